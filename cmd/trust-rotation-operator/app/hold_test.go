package app

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

// With a spec it cannot use, a reconcile that would start a rotation acts on nothing, as when
// suspended, and says why: SpecInvalid=True naming the field, a Warning Event, the metric; fixed,
// the same reconcile acts.
func TestReconcileInvalidSpecActsOnNothing(t *testing.T) {
	b, _ := renewedBed(t, Options{})
	tar := b.tars.get(steps.DefaultRotationName)
	tar.Spec.DataPlaneRestart.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "02:00", TimeZone: "Mars/Olympus"}}
	b.store(b.c.rotation, b.tars.put(tar))
	b.reconcile()
	if w := b.writes(); len(w) != 0 {
		t.Fatalf("with an invalid spec, the operator wrote %v", w)
	}
	st := b.tars.get(steps.DefaultRotationName).Status
	const field = "spec.dataPlaneRestart.maintenanceWindows[0].timeZone"
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecInvalid)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, field) {
		t.Fatalf("SpecInvalid condition %+v, want True naming %s", c, field)
	}
	if r := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonSpecInvalid {
		t.Errorf("Ready %+v, want False, SpecInvalid", r)
	}
	if st.Checkpoint == nil || st.Checkpoint.Acts != 0 {
		t.Errorf("checkpoint %+v: no act may be counted", st.Checkpoint)
	}
	if events := b.drainEvents(); !hasEvent(events, "Warning "+v1alpha1.ReasonSpecInvalid) || hasEvent(events, "Normal "+ReasonStepActed) {
		t.Errorf("events %v, want SpecInvalid and no act", events)
	}
	if v := testutil.ToFloat64(b.c.metrics.specInvalid.WithLabelValues(steps.DefaultRotationName)); v != 1 {
		t.Errorf("trust_rotation_spec_invalid = %v, want 1", v)
	}

	tar = b.tars.get(steps.DefaultRotationName)
	tar.Spec.DataPlaneRestart.MaintenanceWindows[0].TimeZone = "Europe/Paris"
	b.store(b.c.rotation, b.tars.put(tar))
	b.reconcile()
	if w := b.writes(); len(w) == 0 {
		t.Fatal("fixed, the operator did not act")
	}
	st = b.tars.get(steps.DefaultRotationName).Status
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecInvalid); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("SpecInvalid condition %+v, want False", c)
	}
	if events := b.drainEvents(); !hasEvent(events, "Normal "+v1alpha1.ReasonSpecValid) {
		t.Errorf("events %v, want SpecValid", events)
	}
	if v := testutil.ToFloat64(b.c.metrics.specInvalid.WithLabelValues(steps.DefaultRotationName)); v != 0 {
		t.Errorf("trust_rotation_spec_invalid = %v, want 0", v)
	}
}

// Another TrustAnchorRotation with a spec the operator cannot use is marked Ignored and
// SpecInvalid, with its Event and metric, and the driven one is reconciled as before.
func TestReconcileReportsAnotherInvalidRotation(t *testing.T) {
	b, _ := syncedBed(t, Options{})
	other := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	other.Spec.DataPlaneRestart.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "02:00", TimeZone: "Mars/Olympus"}}
	b.store(b.c.rotation, b.tars.put(other))
	b.reconcile()
	got := b.tars.get("other")
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionIgnored) || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionSpecInvalid) {
		t.Fatalf("other rotation's conditions %+v, want Ignored and SpecInvalid True", got.Status.Conditions)
	}
	if events := b.drainEvents(); !hasEvent(events, "Warning "+v1alpha1.ReasonSpecInvalid) {
		t.Errorf("events %v, want SpecInvalid", events)
	}
	if v := testutil.ToFloat64(b.c.metrics.specInvalid.WithLabelValues("other")); v != 1 {
		t.Errorf("trust_rotation_spec_invalid{name=other} = %v, want 1", v)
	}
	if st := b.tars.get(steps.DefaultRotationName).Status; !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("the driven rotation is not Ready: %+v", st.Conditions)
	}
}
