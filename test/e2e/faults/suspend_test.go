package faults

import (
	"context"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// suspendHold is how long a suspended soak rotation waits for the operator to hold an act
// (the status saying what it would do next) before it is resumed anyway: a rotation suspended
// while it waits on pods holds nothing until they converge.
const suspendHold = 30 * time.Second

// armSuspend: at a step drawn at random, spec.suspend is set (as `linkerd trust rotate
// --suspend` sets it); once the operator reports Suspended, and held an act or suspendHold
// passed, it is resumed. It fired when the operator reported the suspension. While suspended,
// no act may run: an act counted at the held checkpoint fails the test.
func armSuspend(run *soakRun) {
	run.supervise("")
	e, t := run.e, run.t
	run.at(drawStep(run.rng, rotationSteps()), func() bool {
		ctx := e.Ctx
		if _, err := e.TARs.SetSuspend(ctx, rotationName, true, "soak"); err != nil {
			t.Errorf("suspending: %v", err)
			return false
		}
		defer func() {
			if _, err := e.TARs.SetSuspend(context.Background(), rotationName, false, "soak"); err != nil {
				t.Errorf("resuming: %v", err)
			}
		}()
		suspended := func(tar *v1alpha1.TrustAnchorRotation) bool {
			return meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionSuspended) && tar.Status.ObservedGeneration == tar.Generation
		}
		tar, err := e2e.WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the suspension reported", suspended)
		if err != nil {
			t.Errorf("suspended: %v", err)
			return false
		}
		held := func(tar *v1alpha1.TrustAnchorRotation) bool {
			c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionSuspended)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "would ")
		}
		first := tar.Status.Checkpoint.DeepCopy()
		if last, _ := e2e.WaitRotation(ctx, e.TARs, rotationName, suspendHold, "an act held", held); last != nil {
			tar = last
		}
		t.Logf("suspended: %s", tar.Status.BlockingMessage)
		if cp := tar.Status.Checkpoint; first != nil && cp != nil && cp.Step == first.Step && cp.Acts > first.Acts {
			t.Errorf("suspended at step %s, the operator acted: %d acts, %d when the suspension was reported", cp.Step, cp.Acts, first.Acts)
		}
		return true
	})
}
