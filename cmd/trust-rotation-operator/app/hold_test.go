package app

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Suspended, a reconcile that would start a rotation writes nothing but the status, which says
// it is suspended and what it would do next; resumed, the same reconcile acts.
func TestReconcileSuspendedActsOnNothing(t *testing.T) {
	b, _ := renewedBed(t, Options{})
	tar := b.tars.get(steps.DefaultRotationName)
	tar.Spec.Suspend = true
	b.store(b.c.rotation, b.tars.put(tar))
	b.reconcile()
	if w := b.writes(); len(w) != 0 {
		t.Fatalf("suspended, the operator wrote %v", w)
	}
	st := b.tars.get(steps.DefaultRotationName).Status
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSuspended)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "next: step "+steps.StepExpandTrustBundle+" would act") {
		t.Fatalf("Suspended condition %+v, want True naming the next act", c)
	}
	if !strings.HasPrefix(st.BlockingMessage, "suspended (spec.suspend)") {
		t.Errorf("blocking message %q", st.BlockingMessage)
	}
	if st.Checkpoint == nil || st.Checkpoint.Acts != 0 {
		t.Errorf("checkpoint %+v: no act may be counted", st.Checkpoint)
	}
	if events := b.drainEvents(); !hasEvent(events, "Normal "+ReasonSuspended) || hasEvent(events, "Normal "+ReasonStepActed) {
		t.Errorf("events %v, want Suspended and no act", events)
	}

	// Resumed: the act runs, and the condition says so.
	tar = b.tars.get(steps.DefaultRotationName)
	tar.Spec.Suspend = false
	b.store(b.c.rotation, b.tars.put(tar))
	b.reconcile()
	if w := b.writes(); len(w) == 0 {
		t.Fatal("resumed, the operator did not act")
	}
	st = b.tars.get(steps.DefaultRotationName).Status
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSuspended); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonResumed {
		t.Errorf("Suspended condition %+v, want False, Resumed", c)
	}
	if events := b.drainEvents(); !hasEvent(events, "Normal "+ReasonResumed) {
		t.Errorf("events %v, want Resumed", events)
	}
}
