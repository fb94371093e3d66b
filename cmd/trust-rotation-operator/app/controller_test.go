package app

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// Stopped before its caches sync (SIGTERM while a new leader starts), Run returns without an
// error: the operator exits 0, as for any SIGTERM, and a pod does not count it as a failure.
func TestRunStopsCleanlyBeforeTheCachesSync(t *testing.T) {
	// Nothing listens there: the TrustAnchorRotation cache never syncs.
	tars, err := client.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(clientset.Kube(fake.NewClientset()), tars, NewMetrics(), Options{Config: steps.DefaultConfig(), RotationName: steps.DefaultRotationName,
		ProbeConcurrency: 1, ProbeTimeout: time.Second, MaxPollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run stopped before its caches synced: %v, want nil", err)
	}
}

// The informers keep the certificates of the PKI Secrets — tls.crt, and crt.pem where Linkerd's
// chart renders the identity issuer — and never a private key.
func TestInformersKeepNoPrivateKey(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-issuer", Annotations: map[string]string{steps.HelmResourcePolicyAnnotation: steps.HelmKeep}},
		Data: map[string][]byte{steps.CertificateKey: []byte("c1"), "tls.key": []byte("k1"), steps.ChartIssuerKey: []byte("c2"), "key.pem": []byte("k2"), "ca.crt": []byte("c3")}}
	got, err := certificateOnly(sec)
	if err != nil {
		t.Fatal(err)
	}
	slim := got.(*corev1.Secret)
	want := map[string][]byte{steps.CertificateKey: []byte("c1"), steps.ChartIssuerKey: []byte("c2")}
	if !reflect.DeepEqual(slim.Data, want) || slim.Annotations[steps.HelmResourcePolicyAnnotation] != steps.HelmKeep {
		t.Fatalf("kept %v (annotations %v), want the certificates %v and the annotations", slim.Data, slim.Annotations, want)
	}
}
