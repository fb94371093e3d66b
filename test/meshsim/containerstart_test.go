package meshsim

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestContainersStartOnTheConfigMapTheAPIServerHolds starts an identity pod after the trust
// bundle was expanded while the simulator's ConfigMap informer still holds the old bundle, as
// it may for tens of seconds after an apiserver outage (its relist backs off) while the pod
// informer already delivers new pods. The kubelet resolves a pod's ConfigMap volumes and its
// configMapKeyRef env from one ConfigMap manager as the pod starts, the volumes first, so the
// identity container (its trust-roots volume) and its own proxy (LINKERD2_PROXY_IDENTITY_
// TRUST_ANCHORS from the same ConfigMap, as Linkerd's chart renders the control plane's
// proxies) start on the same bundle: the one written before the pod started. Resolving the
// proxy's env from the lagging informer instead gave the proxy the old anchor alone beside an
// identity container on both — a control-plane pod started after the expansion that rejects
// new-anchor certificates, which no real cluster runs.
func TestContainersStartOnTheConfigMapTheAPIServerHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	oldRoot := newTestRoot(t, "root.linkerd.cluster.local", now.Add(-time.Hour), now.Add(48*time.Hour))
	newRoot := newTestRoot(t, "root.linkerd.cluster.local", now.Add(-time.Hour), now.Add(96*time.Hour))
	issuer := oldRoot.issue(t, now.Add(-time.Hour), now.Add(24*time.Hour))
	keyDER, err := x509.MarshalPKCS8PrivateKey(issuer.key)
	if err != nil {
		t.Fatal(err)
	}

	ns := DefaultLinkerdNamespace
	dep := controlPlaneDeployment(ControlPlaneOptions{Namespace: ns, TrustDomain: DefaultTrustDomain, ProxyVersion: "v", Replicas: 1}, ComponentIdentity, "")
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: TrustRootsConfigMap, Namespace: ns},
			Data: map[string]string{TrustRootsKey: EncodeCertificates(oldRoot.cert)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: IssuerSecret, Namespace: ns}, Data: map[string][]byte{
			corev1.TLSCertKey:       []byte(EncodeCertificates(issuer.cert)),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		}},
		dep,
	)
	// The ConfigMap informer lists once, then hears nothing: it lags behind the apiserver.
	client.PrependWatchReactor("configmaps", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	m, err := Start(ctx, Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()

	expanded := EncodeCertificates(newRoot.cert, oldRoot.cert)
	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, TrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[TrustRootsKey] = expanded
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.configMapValue(ns, TrustRootsConfigMap, TrustRootsKey); v == expanded {
		t.Fatal("the ConfigMap informer saw the expansion: this test needs it behind")
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-7b9b45b957-jzmq2", Namespace: ns, UID: "identity-after-expansion",
			Labels: dep.Spec.Template.Labels, Annotations: dep.Spec.Template.Annotations},
		Spec:   dep.Spec.Template.Spec,
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.99.1"},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Oracle().WaitFor(ctx, func(s OracleStatus) bool { return s.Pods == 1 }); err != nil {
		t.Fatal(err)
	}

	want := []string{Fingerprint(newRoot.cert), Fingerprint(oldRoot.cert)}
	slices.Sort(want)
	pods, ids := m.Pods(), m.Identities()
	if len(pods) != 1 || len(ids) != 1 {
		t.Fatalf("%d proxies and %d identity controllers run, want 1 of each", len(pods), len(ids))
	}
	if got := ids[0].RootFingerprints; !slices.Equal(got, want) {
		t.Errorf("the identity container started on roots %.12v, want the expanded bundle %.12v", got, want)
	}
	if got := pods[0].RootFingerprints; !slices.Equal(got, want) {
		t.Errorf("identity's own proxy started on roots %.12v, want the expanded bundle %.12v, as its identity container", got, want)
	}
}
