package app

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

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

// A failed reconcile is retried through the workqueue once the failure back-off has passed, and
// counted as a retry; what wakes the loop before then (the failure's own writes come back as
// pokes) reconciles nothing. A success then ends the back-off: its next reconcile is a change's.
// A wake before the moment the last reconcile named reconciles nothing either.
func TestFailedReconcileWaitsOutItsBackOff(t *testing.T) {
	b, _ := renewedBed(t, Options{})
	down := true
	b.kube.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down {
			return true, nil, apierrors.NewServiceUnavailable("down")
		}
		return false, nil, nil
	})
	ctx := context.Background()
	reconciles := func() map[string]float64 {
		out := map[string]float64{}
		for _, cause := range []string{CauseStart, CauseChange, CauseRecheck, CausePoll, CauseRetry} {
			if n := testutil.ToFloat64(b.c.metrics.reconciles.WithLabelValues(cause)); n > 0 {
				out[cause] = n
			}
		}
		return out
	}
	next := func(cause string) {
		t.Helper()
		done := make(chan bool, 1)
		go func() { done <- b.c.processNext(ctx, cause) }()
		select {
		case ok := <-done:
			if !ok {
				t.Fatal("the queue shut down")
			}
		case <-time.After(10 * failureMaxDelay):
			t.Fatal("nothing came out of the queue")
		}
	}

	b.c.queue.Add(b.c.key())
	next(CauseStart)
	if b.c.retryAt.IsZero() {
		t.Fatal("the failed reconcile set no back-off")
	}
	retryAt := b.c.retryAt
	b.c.poke()
	b.c.poke()
	next("")
	if got, want := reconciles(), map[string]float64{CauseStart: 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after pokes within the back-off: reconciles %v, want %v", got, want)
	}
	down = false
	next("")
	if time.Now().Before(retryAt) {
		t.Errorf("retried %v before the back-off ended", time.Until(retryAt))
	}
	if got, want := reconciles(), map[string]float64{CauseStart: 1, CauseRetry: 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the back-off: reconciles %v, want %v", got, want)
	}
	if !b.c.retryAt.IsZero() {
		t.Fatalf("the retry succeeded and the back-off is still set, to %v", b.c.retryAt)
	}
	b.c.poke()
	next("")
	if got, want := reconciles(), map[string]float64{CauseStart: 1, CauseRetry: 1, CauseChange: 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a poke: reconciles %v, want %v", got, want)
	}

	// A moment an earlier reconcile named, which the last one did not name again, stays in
	// the queue (it keeps a key's earliest moment): it wakes the loop and reconciles nothing.
	b.c.recheckAt = time.Now().Add(time.Hour)
	b.c.queue.Add(b.c.key())
	next("")
	if got, want := reconciles(), map[string]float64{CauseStart: 1, CauseRetry: 1, CauseChange: 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a wake before the moment named: reconciles %v, want %v", got, want)
	}
	b.c.recheckAt = time.Now()
	b.c.queue.Add(b.c.key()) // as the queue does at the moment
	next("")
	if got, want := reconciles(), map[string]float64{CauseStart: 1, CauseRetry: 1, CauseChange: 1, CauseRecheck: 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the moment named: reconciles %v, want %v", got, want)
	}
}
