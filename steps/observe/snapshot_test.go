package observe

import (
	"context"
	"reflect"
	"testing"
	"time"

	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// objectCaches are Caches over a fixed set of objects, as the operator's informers would hold
// them.
type objectCaches struct {
	anchor, previous, issuer *corev1.Secret
	bundle                   *corev1.ConfigMap
	deployments              map[string]*appsv1.Deployment
}

func (o objectCaches) AnchorSecret() *corev1.Secret         { return o.anchor }
func (o objectCaches) PreviousAnchorSecret() *corev1.Secret { return o.previous }
func (o objectCaches) IssuerSecret() *corev1.Secret         { return o.issuer }
func (o objectCaches) TrustRoots() *corev1.ConfigMap        { return o.bundle }
func (o objectCaches) ControlPlaneDeployment(name string) *appsv1.Deployment {
	return o.deployments[name]
}

// The operator's snapshot and the CLI's Read make the same State of the same objects: the
// PKI sources, the trust bundle, the control plane and the trust-bundle convergence.
func TestSnapshotReadsAsTheCLIReads(t *testing.T) {
	cfg := steps.DefaultConfig()
	anchor, previous := selfSigned(t, time.Now().Add(48*time.Hour)), selfSigned(t, time.Now().Add(24*time.Hour))
	secretOf := func(ns, name string, c []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{steps.CertificateKey: c}}
	}
	caches := objectCaches{
		anchor:   secretOf(cfg.CertManagerNamespace, cfg.AnchorSecret, steps.EncodePEM(anchor)),
		previous: secretOf(cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, steps.EncodePEM(previous)),
		issuer:   secretOf(cfg.LinkerdNamespace, cfg.IssuerSecret, []byte("not PEM")),
		bundle: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LinkerdNamespace, Name: cfg.TrustRootsConfigMap},
			Data: map[string]string{steps.TrustRootsKey: steps.RenderBundle(anchor, previous)}},
		deployments: map[string]*appsv1.Deployment{},
	}
	objs := []runtime.Object{caches.anchor, caches.previous, caches.issuer, caches.bundle}
	replicas := int32(1)
	for i, name := range cfg.ControlPlane() {
		if i == 0 {
			continue // one missing, read as not found by both
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LinkerdNamespace, Name: name, Generation: 2},
			Spec:   appsv1.DeploymentSpec{Replicas: &replicas},
			Status: appsv1.DeploymentStatus{ObservedGeneration: int64(i), Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
		caches.deployments[name] = d
		objs = append(objs, d)
	}
	var pods []*corev1.Pod
	for _, p := range []struct{ ns, name, component, hash string }{
		{"app", "web-1", "", steps.BundleHash(steps.RenderBundle(anchor, previous))},
		{"app", "web-2", "", "old"},
		{cfg.LinkerdNamespace, "linkerd-identity-1", "identity", "old"},
	} {
		labels := map[string]string{steps.ControlPlaneNSLabel: cfg.LinkerdNamespace}
		if p.component != "" {
			labels[steps.ControlPlaneComponentLabel] = p.component
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, UID: types.UID("uid-" + p.name),
			Labels: labels, Annotations: map[string]string{steps.TrustRootSHA256Annotation: p.hash}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: steps.ProxyContainerName}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}
		pods = append(pods, pod)
		objs = append(objs, pod)
	}

	kube := kubefake.NewClientset(objs...)
	reader := PKIReader{Kube: clientset.Kube(kube), CertManager: clientset.CertManager(cmfake.NewClientset()), Config: cfg}
	now := time.Now()
	read, err := Read(context.Background(), reader, nil, now)
	if err != nil {
		t.Fatal(err)
	}

	index := podindex.New(nil)
	for _, p := range pods {
		index.Upsert(podindex.SlimPod(cfg, p))
	}
	snap := &Snapshotter{Config: cfg, Steps: steps.Facts(), Caches: caches, Index: index, Certs: probe.NewCertTracker(index, nil, 1, time.Second, nil)}
	got, err := snap.Snapshot(now, "", &v1alpha1.TrustAnchorRotation{})
	if err != nil {
		t.Fatal(err)
	}

	want := read.State
	for _, src := range []struct {
		what      string
		got, want steps.Source
	}{{"anchor", got.Anchor, want.Anchor}, {"previous anchor", got.Previous, want.Previous}, {"issuer", got.Issuer, want.Issuer}} {
		if src.got.Ref() != src.want.Ref() || src.got.Found != src.want.Found || !src.got.Cert.Equal(src.want.Cert) ||
			(src.got.Err == nil) != (src.want.Err == nil) {
			t.Errorf("%s: the snapshot read %+v, the CLI %+v", src.what, src.got, src.want)
		}
	}
	if got.Anchor.Cert == nil || got.Previous.Cert == nil || got.Issuer.Err == nil {
		t.Fatalf("the snapshot read anchor %v, previous %v, issuer error %v: want both anchors and the issuer's parse error",
			got.Anchor.Cert, got.Previous.Cert, got.Issuer.Err)
	}
	if got.Bundle.Data != want.Bundle.Data || len(got.Bundle.Certs) != 2 || len(want.Bundle.Certs) != 2 {
		t.Errorf("trust bundle: the snapshot read %d certificates, the CLI %d", len(got.Bundle.Certs), len(want.Bundle.Certs))
	}
	if !reflect.DeepEqual(got.ControlPlane, want.ControlPlane) {
		t.Errorf("control plane: the snapshot read %+v, the CLI %+v", got.ControlPlane, want.ControlPlane)
	}
	if !reflect.DeepEqual(got.TrustBundle, want.TrustBundle) || got.TrustBundle.Target != 2 {
		t.Errorf("trust-bundle convergence: the snapshot counted %+v, the CLI %+v (want 2 data-plane pods)", got.TrustBundle, want.TrustBundle)
	}
}
