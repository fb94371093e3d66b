package apply

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/test/pki"
)

// testConfig names every object otherwise than the defaults: the writers must follow it.
func testConfig() steps.Config {
	cfg := steps.DefaultConfig()
	cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, cfg.TrustRootsConfigMap = "mesh", "prev-anchor", "roots"
	return cfg
}

func testCert(t *testing.T) *x509.Certificate {
	t.Helper()
	c, _, _, err := pki.SelfSigned("root", true, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// patches returns the bodies of the merge patches kube received on the resource (and
// subresource), each made by the operator's field manager.
func patches(t *testing.T, kube *fake.Clientset, resource, subresource string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range kube.Actions() {
		p, ok := a.(k8stesting.PatchActionImpl)
		if !ok || a.GetResource().Resource != resource || a.GetSubresource() != subresource {
			continue
		}
		if p.GetPatchType() != types.MergePatchType || p.GetPatchOptions().FieldManager != FieldManager {
			t.Errorf("%s %s: patch type %s by %q, want a merge patch by %s", a.GetVerb(), resource, p.GetPatchType(), p.GetPatchOptions().FieldManager, FieldManager)
		}
		var body map[string]any
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		out = append(out, body)
	}
	return out
}

func TestKubeWriterAppliesTheAnchorAndTheBundle(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
	cert := testCert(t)
	if err := w.WritePreviousAnchor(ctx, cert); err != nil {
		t.Fatal(err)
	}
	sec, err := kube.CoreV1().Secrets("mesh").Get(ctx, "prev-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The certificate alone: never a private key.
	if keys := strings.Join(slices.Sorted(maps.Keys(sec.Data)), ","); keys != steps.CertificateKey {
		t.Errorf("Secret keys = %s, want %s alone", keys, steps.CertificateKey)
	}
	if got, err := steps.ParseCertificates(sec.Data[steps.CertificateKey]); err != nil || len(got) != 1 || !got[0].Equal(cert) {
		t.Errorf("Secret holds %v (%v), want the certificate", got, err)
	}
	if sec.Type != corev1.SecretTypeOpaque || sec.Labels[steps.ManagedByLabel] != steps.ManagedByValue {
		t.Errorf("Secret type %q, labels %v: want Opaque, managed by the rotation", sec.Type, sec.Labels)
	}

	for _, bundle := range []string{"bundle one", "bundle two"} {
		if err := w.WriteTrustRoots(ctx, bundle); err != nil {
			t.Fatal(err)
		}
		cm, err := kube.CoreV1().ConfigMaps("mesh").Get(ctx, "roots", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[steps.TrustRootsKey] != bundle || cm.Labels[steps.ManagedByLabel] != steps.ManagedByValue {
			t.Errorf("ConfigMap data %v, labels %v: want %s = %q, managed by the rotation", cm.Data, cm.Labels, steps.TrustRootsKey, bundle)
		}
	}
	// Server-side applies that own their fields, whoever set them before.
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok {
			opts := p.GetPatchOptions()
			if p.GetPatchType() != types.ApplyYAMLPatchType || opts.FieldManager != FieldManager || opts.Force == nil || !*opts.Force {
				t.Errorf("%s %s: patch type %s, options %+v; want a forced apply by %s", a.GetVerb(), a.GetResource().Resource, p.GetPatchType(), opts, FieldManager)
			}
		}
	}
}

func TestKubeWriterRestartsAndScalesDeployments(t *testing.T) {
	ctx := context.Background()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "linkerd-identity"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"keep": "me"}}}}}
	kube := fake.NewClientset(dep)
	w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
	if err := w.RestartDeployment(ctx, "mesh", "linkerd-identity", "token-1"); err != nil {
		t.Fatal(err)
	}
	got, err := kube.AppsV1().Deployments("mesh").Get(ctx, "linkerd-identity", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"keep": "me", steps.RestartedAtAnnotation: "token-1"}
	if !maps.Equal(got.Spec.Template.Annotations, want) {
		t.Errorf("pod-template annotations = %v, want %v", got.Spec.Template.Annotations, want)
	}
	if err := w.RestartDeployment(ctx, "mesh", "missing", "token-1"); !apierrors.IsNotFound(err) {
		t.Errorf("restarting a missing Deployment: %v, want NotFound", err)
	}
	if n := len(patches(t, kube, "deployments", "")); n != 2 {
		t.Errorf("%d patches of deployments, want 2", n)
	}

	if err := w.ScaleDeployment(ctx, "mesh", "linkerd-identity", 0); err != nil {
		t.Fatal(err)
	}
	// Through the scale subresource alone, which the operator's RBAC grants for identity.
	scales := patches(t, kube, "deployments", "scale")
	if want := []map[string]any{{"spec": map[string]any{"replicas": float64(0)}}}; !reflect.DeepEqual(scales, want) {
		t.Errorf("scale patches = %v, want %v", scales, want)
	}
}

func TestKubeWriterDeletesPodsAtOnce(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "a"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "b"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "c"}},
	)
	w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
	// A pod already gone is fine.
	if err := w.DeletePods(ctx, "mesh", []string{"a", "gone", "b"}); err != nil {
		t.Fatal(err)
	}
	pods, _ := kube.CoreV1().Pods("mesh").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != "c" {
		t.Errorf("pods left: %v, want c alone", pods.Items)
	}
	for _, a := range kube.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 0 {
				t.Errorf("deleted %s with grace period %v, want 0", d.GetName(), ptr.Deref(g, -1))
			}
		}
	}
	kube.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "c", errors.New("no"))
	})
	if err := w.DeletePods(ctx, "mesh", []string{"c"}); !apierrors.IsForbidden(err) {
		t.Errorf("a forbidden deletion: %v, want the error", err)
	}
}

func TestKubeWriterRestartsAndAnnotatesWorkloads(t *testing.T) {
	ctx := context.Background()
	old := "old"
	kube := fake.NewClientset(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db"}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "agent",
			Annotations: map[string]string{"other": "kept"}},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
				Annotations: map[string]string{"drop": old, "other": "kept"}}}}},
	)
	w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
	set := "value"
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		name := map[string]string{"Deployment": "web", "StatefulSet": "db", "DaemonSet": "agent"}[kind]
		ref := steps.WorkloadRef{Namespace: "app", Kind: kind, Name: name}
		if err := w.RestartWorkload(ctx, ref, "tok", map[string]*string{"set": &set, "drop": nil}); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if err := w.AnnotateWorkload(ctx, ref, map[string]string{steps.EvictedForAnnotation: "tok"}); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
	}
	ds, _ := kube.AppsV1().DaemonSets("app").Get(ctx, "agent", metav1.GetOptions{})
	if want := map[string]string{steps.RestartedAtAnnotation: "tok", "set": "value", "other": "kept"}; !maps.Equal(ds.Spec.Template.Annotations, want) {
		t.Errorf("DaemonSet pod-template annotations = %v, want %v", ds.Spec.Template.Annotations, want)
	}
	if want := map[string]string{steps.EvictedForAnnotation: "tok", "other": "kept"}; !maps.Equal(ds.Annotations, want) {
		t.Errorf("DaemonSet annotations = %v, want %v", ds.Annotations, want)
	}
	sts, _ := kube.AppsV1().StatefulSets("app").Get(ctx, "db", metav1.GetOptions{})
	dep, _ := kube.AppsV1().Deployments("app").Get(ctx, "web", metav1.GetOptions{})
	for what, ann := range map[string]map[string]string{"StatefulSet": sts.Spec.Template.Annotations, "Deployment": dep.Spec.Template.Annotations} {
		if want := map[string]string{steps.RestartedAtAnnotation: "tok", "set": "value"}; !maps.Equal(ann, want) {
			t.Errorf("%s pod-template annotations = %v, want %v", what, ann, want)
		}
	}
	for _, resource := range []string{"deployments", "statefulsets", "daemonsets"} {
		if n := len(patches(t, kube, resource, "")); n != 2 {
			t.Errorf("%d patches of %s, want 2", n, resource)
		}
	}
	err := w.RestartWorkload(ctx, steps.WorkloadRef{Namespace: "app", Kind: "Pod", Name: "web-0"}, "tok", nil)
	if err == nil || !strings.Contains(err.Error(), "not a Deployment, StatefulSet or DaemonSet") {
		t.Errorf("restarting a Pod: %v, want a refusal", err)
	}
}

// EvictPods counts the evictions the apiserver accepted; a pod a PodDisruptionBudget keeps (429)
// and a pod already gone are skipped, another error stops it (a transient one, after its tries).
func TestKubeWriterEvictsPods(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	var asked []string
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		asked = append(asked, ev.Name)
		switch ev.Name {
		case "kept":
			return true, nil, apierrors.NewTooManyRequests("budget", 0)
		case "gone":
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, ev.Name)
		case "broken":
			return true, nil, apierrors.NewInternalError(errors.New("boom"))
		}
		return true, ev, nil
	})
	w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
	ref := steps.WorkloadRef{Namespace: "app", Kind: "Deployment", Name: "web"}
	n, err := w.EvictPods(ctx, ref, []string{"a", "kept", "gone", "b"})
	if n != 2 || err != nil {
		t.Errorf("EvictPods = %d, %v; want 2 evicted, no error", n, err)
	}
	n, err = w.EvictPods(ctx, ref, []string{"c", "broken", "d"})
	if n != 1 || err == nil || !strings.Contains(err.Error(), "evicting Pod app/broken") {
		t.Errorf("EvictPods = %d, %v; want 1 evicted and the error", n, err)
	}
	if want := []string{"a", "kept", "gone", "b", "c", "broken", "broken", "broken", "broken"}; !reflect.DeepEqual(asked, want) {
		t.Errorf("evictions asked %v, want %v", asked, want)
	}
}

func TestKubeWriterRenewsCertificates(t *testing.T) {
	ctx := context.Background()
	before := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	cm := cmfake.NewClientset(&cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "issuer", Generation: 4},
		Status: cmapi.CertificateStatus{Conditions: []cmapi.CertificateCondition{
			{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue, LastTransitionTime: &before},
		}},
	})
	if err := (&KubeWriter{Config: testConfig()}).RenewCertificate(ctx, "mesh", "issuer"); err == nil {
		t.Error("renewed without a cert-manager client")
	}
	w := &KubeWriter{Client: clientset.Kube(fake.NewClientset()), CertManager: clientset.CertManager(cm), Config: testConfig()}
	if err := w.RenewCertificate(ctx, "mesh", "issuer"); err != nil {
		t.Fatal(err)
	}
	crt, err := cm.CertmanagerV1().Certificates("mesh").Get(ctx, "issuer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var issuing *cmapi.CertificateCondition
	for i, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing {
			issuing = &crt.Status.Conditions[i]
		}
	}
	if issuing == nil || issuing.Status != cmmeta.ConditionTrue || issuing.Reason != ReasonManuallyTriggered ||
		issuing.Message != MessageManuallyTriggered || issuing.ObservedGeneration != 4 {
		t.Fatalf("conditions = %+v, want Issuing=True ManuallyTriggered at generation 4", crt.Status.Conditions)
	}
	if len(crt.Status.Conditions) != 2 {
		t.Errorf("conditions = %+v, want Ready kept beside Issuing", crt.Status.Conditions)
	}
	if err := w.RenewCertificate(ctx, "mesh", "missing"); !apierrors.IsNotFound(errors.Unwrap(err)) {
		t.Errorf("renewing a missing Certificate: %v, want NotFound", err)
	}
}

// SetIssuing sets the condition as cert-manager does: its transition time moves only when its
// status changes.
func TestSetIssuingKeepsTheTransitionTime(t *testing.T) {
	then, now := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	SetIssuing(crt, then)
	SetIssuing(crt, now)
	if c := crt.Status.Conditions; len(c) != 1 || !c[0].LastTransitionTime.Equal(&then) || c[0].ObservedGeneration != 2 {
		t.Errorf("set twice: %+v, want one condition, transition time %v", c, then)
	}
	crt.Status.Conditions[0].Status = cmmeta.ConditionFalse
	SetIssuing(crt, now)
	if c := crt.Status.Conditions; len(c) != 1 || c[0].Status != cmmeta.ConditionTrue || !c[0].LastTransitionTime.Equal(&now) {
		t.Errorf("from False: %+v, want True since %v", c, now)
	}
}

// DryRun makes no write and records each one, in order, with what it would change.
func TestDryRunRecordsEveryWrite(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cert := testCert(t)
	d := &DryRun{Config: cfg}
	web := steps.WorkloadRef{Namespace: "app", Kind: "StatefulSet", Name: "db"}
	set := "v"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.WritePreviousAnchor(ctx, cert))
	must(d.WriteTrustRoots(ctx, "bundle"))
	must(d.RestartDeployment(ctx, "mesh", "linkerd-destination", "tok"))
	must(d.DeletePods(ctx, "mesh", []string{"identity-a", "identity-b"}))
	must(d.ScaleDeployment(ctx, "mesh", "linkerd-identity", 0))
	must(d.RestartWorkload(ctx, web, "tok", map[string]*string{"z": nil, "a": &set}))
	must(d.AnnotateWorkload(ctx, web, map[string]string{"y": "2", "x": "1"}))
	n, err := d.EvictPods(ctx, web, []string{"db-0", "db-1"})
	if n != 2 || err != nil {
		t.Errorf("EvictPods = %d, %v; want 2", n, err)
	}
	must(d.RenewCertificate(ctx, "mesh", "linkerd-identity-issuer"))
	want := []Write{
		{"apply", "Secret", "mesh", "prev-anchor", "certificate " + steps.Fingerprint(cert)},
		{"apply", "ConfigMap", "mesh", "roots", "bundle sha256 " + steps.BundleHash("bundle")},
		{"restart", "Deployment", "mesh", "linkerd-destination", "restartedAt tok"},
		{"delete", "Pod", "mesh", "identity-a", "replaced by its ReplicaSet"},
		{"delete", "Pod", "mesh", "identity-b", "replaced by its ReplicaSet"},
		{"scale", "Deployment", "mesh", "linkerd-identity", "replicas 0"},
		{"restart", "StatefulSet", "app", "db", "restartedAt tok, set a, remove z"},
		{"annotate", "StatefulSet", "app", "db", "x=1, y=2"},
		{"evict", "Pod", "app", "db-0", "Eviction API (respects PodDisruptionBudgets)"},
		{"evict", "Pod", "app", "db-1", "Eviction API (respects PodDisruptionBudgets)"},
		{"renew", "Certificate", "mesh", "linkerd-identity-issuer", "Issuing=True, ManuallyTriggered"},
	}
	got := d.Writes()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("writes =\n  %v\nwant\n  %v", got, want)
	}
	// Writes is a copy: the caller cannot change what was recorded.
	got[0].Name = "changed"
	if d.Writes()[0].Name != "prev-anchor" {
		t.Error("Writes returned the recorder's own slice")
	}
}

// A write the apiserver fails for a passing reason (503, 500, a conflict of a write without
// precondition) is sent again, up to four tries; any other failure, and a PodDisruptionBudget's
// 429 to an eviction, is returned at once.
func TestTransientFailuresAreRetried(t *testing.T) {
	ctx := context.Background()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "linkerd-destination"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-1"}}
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		name     string
		failures []error // the answers before the write goes through, in order
		tries    int
		ok       bool
	}{
		{"503 then 500 then conflict", []error{apierrors.NewServiceUnavailable("down"), apierrors.NewInternalError(errors.New("etcd")),
			apierrors.NewConflict(gr, "linkerd-destination", errors.New("raced"))}, 4, true},
		{"server timeout", []error{apierrors.NewServerTimeout(gr, "patch", 1)}, 2, true},
		{"transient beyond the tries", []error{apierrors.NewServiceUnavailable("1"), apierrors.NewServiceUnavailable("2"),
			apierrors.NewServiceUnavailable("3"), apierrors.NewServiceUnavailable("4")}, 4, false},
		{"forbidden", []error{apierrors.NewForbidden(gr, "linkerd-destination", errors.New("rbac"))}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(dep.DeepCopy())
			tries := 0
			kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
				tries++
				if tries <= len(tc.failures) {
					return true, nil, tc.failures[tries-1]
				}
				return false, nil, nil
			})
			w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
			err := w.RestartDeployment(ctx, "mesh", "linkerd-destination", "token-1")
			if (err == nil) != tc.ok || tries != tc.tries {
				t.Errorf("RestartDeployment: %v after %d tries, want ok=%v after %d", err, tries, tc.ok, tc.tries)
			}
		})
	}

	t.Run("eviction refused by a budget", func(t *testing.T) {
		kube := fake.NewClientset(pod.DeepCopy())
		tries := 0
		kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			tries++
			return true, nil, apierrors.NewTooManyRequests("budget", 0)
		})
		w := &KubeWriter{Client: clientset.Kube(kube), Config: testConfig()}
		n, err := w.EvictPods(ctx, steps.WorkloadRef{Kind: "Deployment", Namespace: "app", Name: "web"}, []string{"web-1"})
		if n != 0 || err != nil || tries != 1 {
			t.Errorf("EvictPods: %d evicted, %v, after %d tries; want 0, no error, one try", n, err, tries)
		}
	})
}
