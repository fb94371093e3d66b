package app

import (
	"testing"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func TestProgressOnly(t *testing.T) {
	converging := func(n int32) *v1alpha1.ConvergenceStatus {
		return &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: n, TargetPods: 10}
	}
	base := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhasePropagatingTrustRoots, BlockingMessage: "Waiting for 7 pod(s)", TrustBundle: converging(3)}
	cases := map[string]struct {
		change func(s *v1alpha1.TrustAnchorRotationStatus)
		want   bool
	}{
		"more pods converged, with the message naming fewer behind": {func(s *v1alpha1.TrustAnchorRotationStatus) {
			s.TrustBundle, s.BlockingMessage = converging(4), "Waiting for 6 pod(s)"
		}, true},
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
