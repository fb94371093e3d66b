package app

import (
	"context"
	"testing"
	"time"

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
