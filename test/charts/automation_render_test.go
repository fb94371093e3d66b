package charts

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// renderTRO renders the operator chart as release "tro" in namespace "ops" with the given
// --set values, failing the test on a render error.
func renderTRO(t *testing.T) func(set ...string) []*unstructured.Unstructured {
	ctx := testContext(t, 2*time.Minute)
	h := helms(t)[0]
	return func(set ...string) []*unstructured.Unstructured {
		t.Helper()
		out, err := h.Template(ctx, OperatorChart, "tro", "ops", set...)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(out)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
}

// TestAutomationIsOptIn renders the chart with the defaults and with every automation on: the
// defaults grant nothing more than before and render no CronJob; the automations add exactly
// their permissions, and rotationSchedule a CronJob whose ServiceAccount may do what
// `linkerd-trust rotate` does and nothing else.
func TestAutomationIsOptIn(t *testing.T) {
	render := renderTRO(t)
	full := "tro-trust-rotation-operator"

	defaults := render()
	for _, kind := range []string{"CronJob"} {
		if o := Find(defaults, kind, full+"-rotate"); o != nil {
			t.Errorf("the defaults render %s %s", kind, o.GetName())
		}
	}
	if Find(defaults, "ClusterRole", full+"-restart") != nil || Find(defaults, "Role", full+"-issuer-renewal") != nil {
		t.Error("the defaults grant the automations' permissions")
	}
	tar := Find(defaults, "TrustAnchorRotation", "cluster")
	if p, _, _ := unstructured.NestedString(tar.Object, "spec", "dataPlaneRestart", "policy"); p != "Manual" {
		t.Errorf("default dataPlaneRestart.policy %q", p)
	}
	if _, found, _ := unstructured.NestedMap(tar.Object, "spec", "dataPlaneRestart", "namespaceSelector"); found {
		t.Error("an empty namespaceSelector is rendered: it would select the Linkerd namespace")
	}

	objs := render("rotation.spec.dataPlaneRestart.policy=Automatic", "rotation.spec.dataPlaneRestart.method=Evict",
		"rotation.spec.identityIssuerRenewal=Automatic", "rotationSchedule=0 3 1 * *", "linkerd.namespace=mesh", "certManager.namespace=pki")
	restart := toTyped[rbacv1.ClusterRole](t, Find(objs, "ClusterRole", full+"-restart"))
	var verbs []string
	for _, r := range restart.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				verbs = append(verbs, v+" "+res)
			}
		}
	}
	slices.Sort(verbs)
	want := []string{"create pods/eviction", "list daemonsets", "list deployments", "list namespaces", "list poddisruptionbudgets", "list statefulsets",
		"patch daemonsets", "patch deployments", "patch statefulsets", "watch daemonsets", "watch deployments", "watch namespaces", "watch poddisruptionbudgets", "watch statefulsets"}
	if !slices.Equal(verbs, want) {
		t.Errorf("restart ClusterRole grants %v, want %v", verbs, want)
	}
	// RolloutRestart evicts too: the workloads a template change does not restart.
	rollout := toTyped[rbacv1.ClusterRole](t, Find(render("rotation.spec.dataPlaneRestart.policy=Automatic"), "ClusterRole", full+"-restart"))
	evicts := false
	for _, r := range rollout.Rules {
		evicts = evicts || slices.Contains(r.Resources, "pods/eviction") && slices.Contains(r.Verbs, "create")
	}
	if !evicts {
		t.Errorf("restart ClusterRole under RolloutRestart cannot evict (OnDelete and partitioned workloads): %+v", rollout.Rules)
	}
	renewal := toTyped[rbacv1.Role](t, Find(objs, "Role", full+"-issuer-renewal"))
	if renewal.Namespace != "mesh" || len(renewal.Rules) != 2 || !slices.Equal(renewal.Rules[1].Resources, []string{"certificates/status"}) ||
		!slices.Equal(renewal.Rules[1].ResourceNames, []string{"linkerd-identity-issuer"}) {
		t.Errorf("issuer-renewal Role %+v", renewal)
	}

	cj := toTyped[batchv1.CronJob](t, Find(objs, "CronJob", full+"-rotate"))
	if cj.Spec.Schedule != "0 3 1 * *" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("CronJob schedule %q, concurrencyPolicy %q", cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if pod.ServiceAccountName != full+"-rotate" || pod.Containers[0].Args[0] != "rotate" || pod.Containers[0].Command[0] != "/usr/local/bin/linkerd-trust" {
		t.Errorf("CronJob runs %v %v as %s", pod.Containers[0].Command, pod.Containers[0].Args, pod.ServiceAccountName)
	}
	// The rotate ServiceAccount's every permission, by namespace: reads by name, one status update.
	var grants []string
	for _, o := range objs {
		if o.GetName() != full+"-rotate" {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch o.GetKind() {
		case "Role":
			rules = toTyped[rbacv1.Role](t, o).Rules
		case "ClusterRole":
			rules = toTyped[rbacv1.ClusterRole](t, o).Rules
		default:
			continue
		}
		for _, r := range rules {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range r.ResourceNames {
						grants = append(grants, o.GetNamespace()+": "+v+" "+res+" "+n)
					}
					if len(r.ResourceNames) == 0 {
						grants = append(grants, o.GetNamespace()+": "+v+" "+res+" *")
					}
				}
			}
		}
	}
	slices.Sort(grants)
	wantGrants := []string{
		": get clusterissuers linkerd-identity-issuer",
		": get trustanchorrotations cluster",
		"mesh: get certificates linkerd-identity-issuer",
		"pki: get certificates linkerd-trust-anchor",
		"pki: get issuers linkerd-trust-root-issuer",
		"pki: update certificates/status linkerd-trust-anchor",
	}
	if !slices.Equal(grants, wantGrants) {
		t.Errorf("rotate ServiceAccount grants\n%v\nwant\n%v", grants, wantGrants)
	}
}

// TestRestartScopeRenders renders automatic restarts' permissions in both scopes: Cluster binds
// the restart ClusterRole cluster-wide; Namespaces binds it in each listed namespace only, reads
// Namespaces through a ClusterRole of their own, and tells the operator where to restart
// (--restart-namespaces); an empty list does not render. The admission policy that narrows the
// patches comes with the restart RBAC, unless turned off.
func TestRestartScopeRenders(t *testing.T) {
	render := renderTRO(t)
	full := "tro-trust-rotation-operator"
	restartArgs := func(objs []*unstructured.Unstructured) []string {
		dep := toTyped[appsv1.Deployment](t, Find(objs, "Deployment", full))
		var out []string
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--restart-namespaces") {
				out = append(out, a)
			}
		}
		return out
	}
	kinds := func(objs []*unstructured.Unstructured, name string) []string {
		var out []string
		for _, o := range objs {
			if o.GetName() == name {
				out = append(out, o.GetKind()+" "+o.GetNamespace())
			}
		}
		slices.Sort(out)
		return out
	}

	for _, o := range render() {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("the defaults (Manual restarts) render %s %s", o.GetKind(), o.GetName())
		}
	}

	automatic := "rotation.spec.dataPlaneRestart.policy=Automatic"
	objs := render(automatic)
	if got, want := kinds(objs, full+"-restart"), []string{"ClusterRole ", "ClusterRoleBinding ", "ValidatingAdmissionPolicy ", "ValidatingAdmissionPolicyBinding "}; !slices.Equal(got, want) {
		t.Errorf("rbacScope Cluster renders %v named %s-restart, want %v", got, full, want)
	}
	if args := restartArgs(objs); len(args) != 0 {
		t.Errorf("rbacScope Cluster passes %v", args)
	}
	vap := Find(objs, "ValidatingAdmissionPolicy", full+"-restart")
	conds, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
	if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["expression"].(string), "'system:serviceaccount:ops:"+full+"'") {
		t.Errorf("the policy does not match the operator's ServiceAccount alone: %v", conds)
	}
	binding := Find(objs, "ValidatingAdmissionPolicyBinding", full+"-restart")
	if actions, _, _ := unstructured.NestedStringSlice(binding.Object, "spec", "validationActions"); !slices.Equal(actions, []string{"Deny"}) {
		t.Errorf("the policy binding's validationActions %v, want [Deny]", actions)
	}

	objs = render(automatic, "dataPlaneRestart.rbacScope=Namespaces", "dataPlaneRestart.namespaces={shop,pay}")
	if got, want := kinds(objs, full+"-restart"), []string{"ClusterRole ", "RoleBinding pay", "RoleBinding shop", "ValidatingAdmissionPolicy ", "ValidatingAdmissionPolicyBinding "}; !slices.Equal(got, want) {
		t.Errorf("rbacScope Namespaces renders %v named %s-restart, want %v", got, full, want)
	}
	for _, rb := range []string{"shop", "pay"} {
		var b *rbacv1.RoleBinding
		for _, o := range objs {
			if o.GetKind() == "RoleBinding" && o.GetName() == full+"-restart" && o.GetNamespace() == rb {
				b = toTyped[rbacv1.RoleBinding](t, o)
			}
		}
		if b == nil || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != full+"-restart" || len(b.Subjects) != 1 || b.Subjects[0].Name != full || b.Subjects[0].Namespace != "ops" {
			t.Errorf("RoleBinding %s/%s-restart: %+v", rb, full, b)
		}
	}
	restart := toTyped[rbacv1.ClusterRole](t, Find(objs, "ClusterRole", full+"-restart"))
	for _, r := range restart.Rules {
		if slices.Contains(r.Resources, "namespaces") {
			t.Errorf("the restart ClusterRole bound in namespaces grants %v on namespaces", r.Verbs)
		}
	}
	if got, want := kinds(objs, full+"-restart-namespaces"), []string{"ClusterRole ", "ClusterRoleBinding "}; !slices.Equal(got, want) {
		t.Errorf("rbacScope Namespaces renders %v named %s-restart-namespaces, want %v", got, full, want)
	}
	if args := restartArgs(objs); !slices.Equal(args, []string{"--restart-namespaces=shop,pay"}) {
		t.Errorf("rbacScope Namespaces passes %v, want --restart-namespaces=shop,pay", args)
	}

	out, err := helms(t)[0].Template(testContext(t, time.Minute), OperatorChart, "tro", "ops", automatic, "dataPlaneRestart.rbacScope=Namespaces")
	if err == nil || !strings.Contains(err.Error(), "dataPlaneRestart.rbacScope=Namespaces needs dataPlaneRestart.namespaces") {
		t.Errorf("rbacScope Namespaces without namespaces: %v\n%.300s", err, out)
	}

	for _, o := range render(automatic, "dataPlaneRestart.admissionPolicy.enabled=false") {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("admissionPolicy.enabled=false renders %s %s", o.GetKind(), o.GetName())
		}
	}
}
