package charts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// The namespaces of TestRestartPermissions' workloads.
const restartNSA, restartNSB = "restart-a", "restart-b"

// TestRestartPermissions installs the chart with automatic restarts on the local apiserver, which
// enforces ValidatingAdmissionPolicies, and acts as the operator's ServiceAccount:
//   - with the default rbacScope Cluster, the operator's own writer (steps/apply) restarts a
//     Deployment, a StatefulSet and a DaemonSet, sets and removes the refresh override and marks
//     an eviction; any other change of those workloads — image, replicas, labels, another
//     annotation, owner references, finalizers, even next to an allowed one — is denied with the
//     policy's message naming the change and the workload, while the admin may make it;
//   - with rbacScope Namespaces, restarts are allowed in the listed namespace only, the policy
//     still applies there, and workloads cannot be listed cluster-wide.
func TestRestartPermissions(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx := testContext(t, 6*time.Minute)
	admin := c.Kube()
	t.Cleanup(func() {
		// The charts' defaults again, for the next test of the shared cluster (a value, even a
		// default one: without any, Helm 3 would reuse the previous values).
		if _, err := Install(context.Background(), c, InstallOptions{Set: []string{"rotation.spec.dataPlaneRestart.policy=Manual"}}); err != nil {
			t.Errorf("restoring the chart's defaults: %v", err)
		}
	})
	// The release's namespace (the PKI's installation creates it in the other tests), and two
	// namespaces of workloads.
	for _, ns := range []string{"linkerd", restartNSA, restartNSB} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{restartNSA, restartNSB} {
		createWorkloads(t, ctx, admin, ns)
	}

	rel, err := Install(ctx, c, InstallOptions{Set: []string{"rotation.spec.dataPlaneRestart.policy=Automatic", "rotation.spec.dataPlaneRestart.method=Evict"}})
	if err != nil {
		t.Fatal(err)
	}
	policy := rel.Deployment.Name + "-restart"
	as := kubernetes.NewForConfigOrDie(rel.RESTConfig)
	p := &patcher{t: t, ctx: ctx, as: as, admin: admin, user: rel.User, policy: policy,
		writer: &apply.KubeWriter{Client: clientset.Kube(as), Config: steps.DefaultConfig()}}
	p.waitForPolicy(restartNSA)

	t.Run("Cluster", func(t *testing.T) {
		p := p.withT(t)
		for _, ns := range []string{restartNSA, restartNSB} {
			for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
				ref := steps.WorkloadRef{Namespace: ns, Kind: kind, Name: "web"}
				p.allowedWrites(ref)
				p.deniedChanges(ref)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("Namespaces", func(t *testing.T) {
		p := p.withT(t)
		rel, err := Install(ctx, c, InstallOptions{Set: []string{"rotation.spec.dataPlaneRestart.policy=Automatic",
			"dataPlaneRestart.rbacScope=Namespaces", "dataPlaneRestart.namespaces={" + restartNSA + "}"}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(rel.OperatorArgs, "--restart-namespaces="+restartNSA) {
			t.Errorf("the operator's arguments %v do not limit restarts to %s", rel.OperatorArgs, restartNSA)
		}
		// The ClusterRoleBinding is gone once RBAC's cache says so.
		other := steps.WorkloadRef{Namespace: restartNSB, Kind: "Deployment", Name: "web"}
		err = poll.Until(ctx, time.Minute, "restarts outside "+restartNSA+" to be forbidden", func(ctx context.Context) (bool, error) {
			err := p.writer.RestartWorkload(ctx, other, "scoped", nil)
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), `cannot patch resource "deployments"`) {
				return true, nil
			}
			return false, poll.Pending("restarting %s: %v", other, err)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
			ref := steps.WorkloadRef{Namespace: restartNSA, Kind: kind, Name: "web"}
			p.allowedWrites(ref)
			p.deniedChanges(ref)
			other := steps.WorkloadRef{Namespace: restartNSB, Kind: kind, Name: "web"}
			if err := p.writer.RestartWorkload(ctx, other, "scoped", nil); !apierrors.IsForbidden(err) {
				t.Errorf("restarting %s outside the listed namespaces: %v, want Forbidden", other, err)
			}
		}
		if _, err := as.AppsV1().Deployments(restartNSA).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing Deployments in %s: %v", restartNSA, err)
		}
		if _, err := as.AppsV1().Deployments("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Deployments cluster-wide: %v, want Forbidden", err)
		}
		if _, err := as.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing Namespaces (namespaceSelector): %v", err)
		}
	})
}

// createWorkloads creates a Deployment, a StatefulSet and a DaemonSet "web" in ns, each with a
// label, an annotation and a pod-template annotation of someone else's.
func createWorkloads(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns string) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	meta := metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"example.com/owner": "team-a"}}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"example.com/scrape": "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:v1"}}},
	}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	apps := admin.AppsV1()
	for kind, create := range map[string]func() error{
		"Deployment": func() error {
			_, err := apps.Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta,
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
			return err
		},
		"StatefulSet": func() error {
			_, err := apps.StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta,
				Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
			return err
		},
		"DaemonSet": func() error {
			_, err := apps.DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta,
				Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s/web: %v", kind, ns, err)
		}
	}
}

// patcher writes workloads as the operator's ServiceAccount (as) and as the admin.
type patcher struct {
	t            *testing.T
	ctx          context.Context
	as, admin    kubernetes.Interface
	writer       *apply.KubeWriter
	user, policy string
}

func (p *patcher) withT(t *testing.T) *patcher { q := *p; q.t = t; return &q }

// patch merge-patches the workload as client, a dry run when dry.
func (p *patcher) patch(client kubernetes.Interface, ref steps.WorkloadRef, patch string, dry bool) error {
	opts := metav1.PatchOptions{}
	if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	apps, pt, b := client.AppsV1(), types.MergePatchType, []byte(patch)
	var err error
	switch ref.Kind {
	case "Deployment":
		_, err = apps.Deployments(ref.Namespace).Patch(p.ctx, ref.Name, pt, b, opts)
	case "StatefulSet":
		_, err = apps.StatefulSets(ref.Namespace).Patch(p.ctx, ref.Name, pt, b, opts)
	case "DaemonSet":
		_, err = apps.DaemonSets(ref.Namespace).Patch(p.ctx, ref.Name, pt, b, opts)
	}
	return err
}

// waitForPolicy waits until the apiserver enforces the chart's policy: it loads policies from a
// watch, so the first updates after the install may pass before it knows it.
func (p *patcher) waitForPolicy(ns string) {
	p.t.Helper()
	ref := steps.WorkloadRef{Namespace: ns, Kind: "Deployment", Name: "web"}
	err := poll.Until(p.ctx, time.Minute, "the apiserver to enforce ValidatingAdmissionPolicy "+p.policy, func(context.Context) (bool, error) {
		err := p.patch(p.as, ref, `{"metadata":{"labels":{"team":"b"}}}`, true)
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+p.policy+"'") {
			return true, nil
		}
		return false, poll.Pending("a dry-run label change of %s: %v", ref, err)
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// allowedWrites makes every write of automatic restarts on the workload, through the operator's
// own writer, and checks each landed.
func (p *patcher) allowedWrites(ref steps.WorkloadRef) {
	t := p.t
	t.Helper()
	token := fmt.Sprintf("%s-%d", strings.ToLower(ref.Kind), time.Now().UnixNano())
	env, marker := `[{"name":"LINKERD2_PROXY_IDENTITY_MAX_REFRESH","value":"10s"}]`, "added"
	writes := []struct {
		what string
		do   func() error
	}{
		{"restart", func() error { return p.writer.RestartWorkload(p.ctx, ref, token, nil) }},
		{"restart with the refresh override", func() error {
			return p.writer.RestartWorkload(p.ctx, ref, token+"-override", map[string]*string{
				steps.AdditionalEnvAnnotation: &env, steps.RefreshOverrideAnnotation: &marker})
		}},
		{"restart removing the refresh override", func() error {
			return p.writer.RestartWorkload(p.ctx, ref, token+"-final", map[string]*string{
				steps.AdditionalEnvAnnotation: nil, steps.RefreshOverrideAnnotation: nil})
		}},
		{"eviction mark", func() error {
			return p.writer.AnnotateWorkload(p.ctx, ref, map[string]string{steps.EvictedForAnnotation: token})
		}},
	}
	for _, w := range writes {
		if err := w.do(); err != nil {
			t.Errorf("%s of %s as %s: %v, want allowed", w.what, ref, p.user, err)
		}
	}
	meta, tmpl := p.get(ref)
	if tmpl.Annotations[steps.RestartedAtAnnotation] != token+"-final" || meta.Annotations[steps.EvictedForAnnotation] != token {
		t.Errorf("%s after the writes: restartedAt %q, evicted-for %q; want %q and %q", ref,
			tmpl.Annotations[steps.RestartedAtAnnotation], meta.Annotations[steps.EvictedForAnnotation], token+"-final", token)
	}
	if _, ok := tmpl.Annotations[steps.RefreshOverrideAnnotation]; ok {
		t.Errorf("%s keeps %s after its removal", ref, steps.RefreshOverrideAnnotation)
	}
}

func (p *patcher) get(ref steps.WorkloadRef) (metav1.ObjectMeta, corev1.PodTemplateSpec) {
	p.t.Helper()
	apps := p.admin.AppsV1()
	var err error
	switch ref.Kind {
	case "Deployment":
		var o *appsv1.Deployment
		if o, err = apps.Deployments(ref.Namespace).Get(p.ctx, ref.Name, metav1.GetOptions{}); err == nil {
			return o.ObjectMeta, o.Spec.Template
		}
	case "StatefulSet":
		var o *appsv1.StatefulSet
		if o, err = apps.StatefulSets(ref.Namespace).Get(p.ctx, ref.Name, metav1.GetOptions{}); err == nil {
			return o.ObjectMeta, o.Spec.Template
		}
	case "DaemonSet":
		var o *appsv1.DaemonSet
		if o, err = apps.DaemonSets(ref.Namespace).Get(p.ctx, ref.Name, metav1.GetOptions{}); err == nil {
			return o.ObjectMeta, o.Spec.Template
		}
	}
	p.t.Fatalf("getting %s: %v", ref, err)
	return metav1.ObjectMeta{}, corev1.PodTemplateSpec{}
}

// deniedChanges tries, as a dry run, every other kind of change of the workload as the operator's
// ServiceAccount: each is denied by the policy with a message that names it; the admin may make it.
func (p *patcher) deniedChanges(ref steps.WorkloadRef) {
	t := p.t
	t.Helper()
	cases := []struct {
		what, patch, names string
	}{
		{"the image", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"example.com/evil:v1"}]}}}}`, "spec.template.spec"},
		{"the image next to a restart", `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"x"}},"spec":{"containers":[{"name":"web","image":"example.com/evil:v1"}]}}}}`, "spec.template.spec"},
		{"a pod-template label", `{"spec":{"template":{"metadata":{"labels":{"sidecar":"evil"}}}}}`, "spec.template.metadata.labels"},
		{"another pod-template annotation next to a restart", `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"x","example.com/scrape":"false"}}}}}`, "the pod-template annotation example.com/scrape"},
		{"a pod-template annotation removed", `{"spec":{"template":{"metadata":{"annotations":{"example.com/scrape":null}}}}}`, "the pod-template annotation example.com/scrape"},
		{"a label", `{"metadata":{"labels":{"team":"b"}}}`, "metadata.labels"},
		{"another annotation", `{"metadata":{"annotations":{"example.com/owner":"evil"}}}`, "the annotation example.com/owner"},
		{"a new annotation next to the eviction mark", `{"metadata":{"annotations":{"trust.linkerd.io/evicted-for":"x","example.com/new":"y"}}}`, "the annotation example.com/new"},
		{"the owner references", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000000"}]}}`, "metadata.ownerReferences"},
		{"the finalizers", `{"metadata":{"finalizers":["example.com/hold"]}}`, "metadata.finalizers"},
	}
	if ref.Kind != "DaemonSet" {
		cases = append(cases, struct{ what, patch, names string }{"the replicas", `{"spec":{"replicas":5}}`, "spec.replicas"})
	}
	for _, tc := range cases {
		err := p.patch(p.as, ref, tc.patch, true)
		want := fmt.Sprintf("%s may not change %s of %s %s/%s: automatic restarts may change only", p.user, tc.names, ref.Kind, ref.Namespace, ref.Name)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy "+p.policy) {
			t.Errorf("changing %s of %s as %s: %v\nwant Forbidden with %q", tc.what, ref, p.user, err, want)
		}
		if err := p.patch(p.admin, ref, tc.patch, true); err != nil {
			t.Errorf("the admin changing %s of %s: %v", tc.what, ref, err)
		}
	}
}
