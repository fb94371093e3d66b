package app

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func TestProgressOnly(t *testing.T) {
	converging := func(n int32) *v1alpha1.ConvergenceStatus {
		return &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: n, TargetPods: 10}
	}
	reconciling := func(status metav1.ConditionStatus, reason, message string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReconciling, Status: status, Reason: reason, Message: message}}
	}
	base := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhasePropagatingTrustRoots, BlockingMessage: "Waiting for 7 pod(s)", TrustBundle: converging(3),
		Conditions: reconciling(metav1.ConditionTrue, "PropagatingTrustRoots", "Waiting for 7 pod(s)")}
	cases := map[string]struct {
		change func(s *v1alpha1.TrustAnchorRotationStatus)
		want   bool
	}{
		"more pods converged, with the message naming fewer behind": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.TrustBundle, s.BlockingMessage = converging(4), "Waiting for 6 pod(s)"
			s.Conditions = reconciling(metav1.ConditionTrue, "PropagatingTrustRoots", "Waiting for 6 pod(s)")
		}, true},
		"a condition changed its reason": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.Conditions = reconciling(metav1.ConditionTrue, "WaitingForIdentityRotation", "Waiting for 7 pod(s)")
		}, false},
		"a condition changed its status": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.Conditions = reconciling(metav1.ConditionFalse, "PropagatingTrustRoots", "Waiting for 7 pod(s)")
		}, false},
		"the convergence completed": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.TrustBundle = &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 10, TargetPods: 10}
		}, false},
		"the phase changed": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.Phase, s.TrustBundle = v1alpha1.PhaseWaitingForIdentityRotation, converging(4)
		}, false},
		"the blocking message went away": {func(s *v1alpha1.TrustAnchorRotationStatus) { s.BlockingMessage = "" }, false},
		"the checkpoint moved": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.Checkpoint = &v1alpha1.Checkpoint{Step: "restart-identity"}
		}, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			next := *base.DeepCopy()
			c.change(&next)
			if got := progressOnly(&base, &next); got != c.want {
				t.Errorf("progressOnly = %v, want %v", got, c.want)
			}
		})
	}
}

// TestHoldProgressMeasuresFromReconcileBeginnings: the reconcile churn paces to begin
// progressWriteInterval after the last writing one began writes its progress, however long that
// one took to write; one that begins sooner holds it and pokes once the interval has passed.
func TestHoldProgressMeasuresFromReconcileBeginnings(t *testing.T) {
	prev := v1alpha1.TrustAnchorRotationStatus{BlockingMessage: "Waiting for 7 pod(s)",
		WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 3, TargetPods: 10}}
	next := *prev.DeepCopy()
	next.WorkloadCertificates.ConvergedPods, next.BlockingMessage = 4, "Waiting for 6 pod(s)"

	c := &Controller{}
	c.initQueue()
	defer c.queue.ShutDown()
	c.lastWriteBegan = time.Now()
	c.reconcileBegan = c.lastWriteBegan.Add(progressWriteInterval)
	if c.holdProgress(&prev, &next) {
		t.Fatal("the paced reconcile held its progress")
	}
	if !c.recheckAt.IsZero() {
		t.Fatal("the paced reconcile asked for another")
	}

	c.reconcileBegan = c.lastWriteBegan.Add(progressWriteInterval / 2)
	if !c.holdProgress(&prev, &next) {
		t.Fatal("a reconcile half an interval after the last write wrote its progress")
	}
	got := make(chan struct{})
	go func() {
		if _, shutdown := c.queue.Get(); !shutdown {
			close(got)
		}
	}()
	select {
	case <-got:
	case <-time.After(10 * progressWriteInterval):
		t.Fatal("no reconcile queued once the interval passed")
	}
	if early := time.Until(c.lastWriteBegan.Add(progressWriteInterval)); early > 20*time.Millisecond {
		t.Errorf("queued %v before the interval passed", early)
	}
}

// A reconcile after a control-plane pod changed writes its progress at once, however soon after
// the last write it began: the count then says the control plane's proxies moved, which the
// user's next restart may wait on. churn.began hands the change to one reconcile only.
func TestHoldProgressWritesAControlPlaneChangeAtOnce(t *testing.T) {
	prev := v1alpha1.TrustAnchorRotationStatus{BlockingMessage: "Waiting for 7 pod(s)",
		WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 3, TargetPods: 10}}
	next := *prev.DeepCopy()
	next.WorkloadCertificates.ConvergedPods, next.BlockingMessage = 4, "Waiting for 6 pod(s)"
	c := &Controller{}
	c.initQueue()
	defer c.queue.ShutDown()
	c.lastWriteBegan = time.Now()
	c.reconcileBegan = c.lastWriteBegan.Add(progressWriteInterval / 10)

	c.churn.changed(6, 6, true, time.Now(), c.poke)
	c.controlPlaneChanged = c.churn.began(c.reconcileBegan)
	if c.holdProgress(&prev, &next) {
		t.Error("the reconcile after a control-plane change held its progress")
	}
	c.controlPlaneChanged = c.churn.began(c.reconcileBegan)
	if !c.holdProgress(&prev, &next) {
		t.Error("the reconcile after it, with no control-plane change, wrote its progress at once")
	}

}
