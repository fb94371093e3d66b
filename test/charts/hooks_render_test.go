package charts

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The chart's Helm hooks: a pre-install,pre-upgrade Job running `linkerd-trust check --pre` and a
// post-install,post-upgrade Job running `linkerd-trust wait`, each under a ServiceAccount of its
// own whose RBAC is hooks of the same phases with a lower weight (created before the Job), every
// one deleted before it is created again and once it succeeded; each grants reads only, of named
// objects where Kubernetes allows it, and no Secret. Each Job can be turned off.
func TestHooksRender(t *testing.T) {
	render := renderTRO(t)
	objs := render()
	for _, hook := range []struct {
		job, phases string
		args        []string
	}{
		{"tro-trust-rotation-operator-preflight", "pre-install,pre-upgrade", []string{"check", "--pre"}},
		{"tro-trust-rotation-operator-wait-ready", "post-install,post-upgrade", []string{"wait", "--timeout=180s"}},
	} {
		t.Run(hook.job, func(t *testing.T) {
			u := Find(objs, "Job", hook.job)
			if u == nil {
				t.Fatalf("no Job %s", hook.job)
			}
			job := toTyped[batchv1.Job](t, u)
			a := job.Annotations
			if a["helm.sh/hook"] != hook.phases || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" ||
				a["helm.sh/hook-output-log-policy"] != "hook-failed" {
				t.Errorf("Job %s annotations %v", hook.job, a)
			}
			jobWeight, _ := strconv.Atoi(a["helm.sh/hook-weight"])
			if *job.Spec.BackoffLimit != 0 || job.Spec.ActiveDeadlineSeconds == nil {
				t.Errorf("Job %s: backoffLimit %d, activeDeadlineSeconds %v: want one bounded attempt", hook.job, *job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds)
			}
			pod := job.Spec.Template.Spec
			ctr := pod.Containers[0]
			if len(pod.Containers) != 1 || ctr.Command[0] != "/usr/local/bin/linkerd-trust" || !slices.Equal(ctr.Args[:len(hook.args)], hook.args) {
				t.Errorf("Job %s runs %q %q, want linkerd-trust %q", hook.job, ctr.Command, ctr.Args, hook.args)
			}
			if pod.ServiceAccountName != hook.job {
				t.Errorf("Job %s runs as %s, want a ServiceAccount of its own", hook.job, pod.ServiceAccountName)
			}
			if sc := ctr.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
				t.Errorf("Job %s: security context %+v", hook.job, sc)
			}
			// Its ServiceAccount and RBAC: hooks of the same phases, before the Job.
			var rbac []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetName() == hook.job && o.GetKind() != "Job" {
					rbac = append(rbac, o)
				}
			}
			kinds := map[string]bool{}
			for _, o := range rbac {
				kinds[o.GetKind()] = true
				oa := o.GetAnnotations()
				w, _ := strconv.Atoi(oa["helm.sh/hook-weight"])
				if oa["helm.sh/hook"] != hook.phases || w >= jobWeight || oa["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
					t.Errorf("%s %s/%s: annotations %v, want hook %s with a weight below the Job's %d", o.GetKind(), o.GetNamespace(), o.GetName(), oa, hook.phases, jobWeight)
				}
				var rules []rbacv1.PolicyRule
				switch o.GetKind() {
				case "ClusterRole":
					rules = toTyped[rbacv1.ClusterRole](t, o).Rules
				case "Role":
					rules = toTyped[rbacv1.Role](t, o).Rules
				}
				for _, r := range rules {
					for _, v := range r.Verbs {
						if v != "get" && v != "list" {
							t.Errorf("%s %s grants %s on %v: a hook only reads", o.GetKind(), o.GetName(), v, r.Resources)
						}
					}
					if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
						t.Errorf("%s %s grants %v %v", o.GetKind(), o.GetName(), r.APIGroups, r.Resources)
					}
					if slices.Contains(r.Verbs, "get") && len(r.ResourceNames) == 0 {
						t.Errorf("%s %s grants get on every %v: name them", o.GetKind(), o.GetName(), r.Resources)
					}
				}
			}
			for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
				if !kinds[k] {
					t.Errorf("Job %s has no %s of its own", hook.job, k)
				}
			}
		})
	}
	if wait := toTyped[batchv1.Job](t, Find(objs, "Job", "tro-trust-rotation-operator-wait-ready")); !slices.Contains(wait.Spec.Template.Spec.Containers[0].Args, "--operator-lease=trust-rotation-operator") {
		t.Errorf("the wait does not wait for the operator's Lease: %q", wait.Spec.Template.Spec.Containers[0].Args)
	}

	// Off, each renders nothing: no Job, no ServiceAccount, no RBAC.
	off := render("hooks.preflight.enabled=false", "hooks.waitReady.enabled=false")
	for _, o := range off {
		if _, ok := o.GetAnnotations()["helm.sh/hook"]; ok || strings.HasSuffix(o.GetName(), "-preflight") || strings.HasSuffix(o.GetName(), "-wait-ready") {
			t.Errorf("with the hooks off, the chart renders %s %s", o.GetKind(), o.GetName())
		}
	}
	// An operator without leader election has no Lease to wait for.
	noLE := render("replicaCount=1", "operator.leaderElection.enabled=false")
	wait := toTyped[batchv1.Job](t, Find(noLE, "Job", "tro-trust-rotation-operator-wait-ready"))
	if !slices.Contains(wait.Spec.Template.Spec.Containers[0].Args, "--operator-lease=") || Find(noLE, "Role", "tro-trust-rotation-operator-wait-ready") != nil {
		t.Errorf("without leader election the wait still waits for a Lease: %q", wait.Spec.Template.Spec.Containers[0].Args)
	}
}
