package steps

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Defaults of spec.stalledAfter.
const (
	DefaultStalledAfter                      = time.Hour
	DefaultStalledAfterIdentityIssuerRenewal = 24 * time.Hour
)

// StalledAfter is how long the rotation may wait in phase before it is Stalled, defaulted.
func StalledAfter(spec v1alpha1.TrustAnchorRotationSpec, phase v1alpha1.Phase) time.Duration {
	d, def := spec.StalledAfter.Default, DefaultStalledAfter
	if phase == v1alpha1.PhaseWaitingForIdentityRotation {
		d, def = spec.StalledAfter.IdentityIssuerRenewal, DefaultStalledAfterIdentityIssuerRenewal
	}
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

// setReadiness sets the kstatus conditions Ready, Reconciling and Stalled on st, the status
// Project computed (phase, blocking message and checkpoint already set), from prev, the status
// it replaces, and res, where the workflow stopped. Each condition's lastTransitionTime changes
// only when its status does (meta.SetStatusCondition), and no message holds the time that
// passes, so that an unchanged observation writes nothing. recheck is told when Stalled falls
// due, so that the operator looks again then.
func setReadiness(st *v1alpha1.TrustAnchorRotationStatus, prev *v1alpha1.TrustAnchorRotationStatus,
	spec v1alpha1.TrustAnchorRotationSpec, generation int64, res workflow.Result, now time.Time, recheck func(time.Time)) {
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: message,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	rotating := st.Phase != v1alpha1.PhaseSynced
	step := ""
	if st.Checkpoint != nil {
		step = st.Checkpoint.Step
	}
	waiting := res.Decision.Outcome == workflow.Wait

	// Synced, bootstrapped, and the workflow waits for nothing but the next renewal of the anchor.
	if !rotating && Watching(step) && waiting && st.BlockingMessage == "" {
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSynced,
			"no rotation in progress, and nothing blocks the operator")
		set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonSynced, "no rotation in progress")
		set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonNotStalled, "")
		return
	}

	// Reconciling: why, and what the operator waits for or does.
	reason := string(st.Phase)
	switch {
	case !rotating && Bootstrapping(step):
		reason = v1alpha1.ReasonBootstrapping
	case !rotating && res.Decision.Reason != "":
		reason = res.Decision.Reason
	}
	message := st.BlockingMessage
	switch {
	case message != "":
	case (res.Decision.Outcome == workflow.Act || res.Decision.Outcome == workflow.Jump) && res.Decision.Message != "":
		message = fmt.Sprintf("step %s: %s", step, res.Decision.Message)
	case rotating:
		message = fmt.Sprintf("rotation in progress: %s", st.Phase)
	default:
		message = fmt.Sprintf("step %s: %s", step, res.Decision.Reason)
	}
	previously := meta.FindStatusCondition(prev.Conditions, v1alpha1.ConditionReconciling)
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, message)

	// Stalled: the clock runs from when the phase began, or, Synced, from when the operator
	// started reconciling.
	since := now
	switch {
	case rotating && st.LastPhaseTransitionTime != nil:
		since = st.LastPhaseTransitionTime.Time
	case !rotating && previously != nil && previously.Status == metav1.ConditionTrue:
		since = previously.LastTransitionTime.Time
	}
	limit := StalledAfter(spec, st.Phase)
	if cp := st.Checkpoint; cp != nil && cp.Strategy == v1alpha1.StrategyCrossSigned {
		limit = crossSignedStalledAfter(spec, st.Phase, limit)
	}
	if !waiting && prev.Phase == st.Phase && meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled) != nil {
		// An act is progress, but not the end of the wait it interrupts: the condition stays
		// as the previous status had it (st is a copy of it).
		return
	}
	if waiting && st.BlockingMessage != "" && now.Sub(since) > limit {
		stalledOn := res.Decision.Reason
		if stalledOn == "" {
			stalledOn = reason
		}
		set(v1alpha1.ConditionStalled, metav1.ConditionTrue, stalledOn, fmt.Sprintf(
			"blocked in phase %s since %s, longer than %s: %s", st.Phase, since.UTC().Format(time.RFC3339), CompactDuration(limit), st.BlockingMessage))
		return
	}
	if waiting && st.BlockingMessage != "" {
		recheck(since.Add(limit + time.Second))
	}
	set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonNotStalled, fmt.Sprintf(
		"in phase %s since %s; stalled after %s", st.Phase, since.UTC().Format(time.RFC3339), CompactDuration(limit)))
}

// CompactDuration is time.Duration's String without zero trailing units: "1h" for 1h0m0s,
// "1h30m" for 1h30m0s, "90s".
func CompactDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
