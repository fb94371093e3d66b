package steps

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// want is a condition's expected status and reason, and a part of its message.
type want struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

func checkCondition(t *testing.T, st v1alpha1.TrustAnchorRotationStatus, typ string, generation int64, w want) {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, st.Conditions)
	}
	if c.Status != w.status || c.Reason != w.reason || !strings.Contains(c.Message, w.message) {
		t.Errorf("%s = %s, %s, %q; want %s, %s, with %q", typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.message)
	}
	if c.ObservedGeneration != generation {
		t.Errorf("%s observedGeneration = %d, want %d", typ, c.ObservedGeneration, generation)
	}
}

// TestReadinessConditions checks the kstatus conditions Project sets in every phase, waiting
// within its threshold and beyond it, and when Synced, bootstrapping or blocked.
func TestReadinessConditions(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const gen = 3
	result := func(step string, phase v1alpha1.Phase, d workflow.Decision) workflow.Result {
		return workflow.Result{Checkpoint: workflow.Checkpoint{Step: step}, Phase: string(phase), Decision: d}
	}
	// inPhase is the status of a rotation that entered phase at the given time.
	inPhase := func(phase v1alpha1.Phase, since time.Time) v1alpha1.TrustAnchorRotationStatus {
		t := metav1.NewTime(since)
		return v1alpha1.TrustAnchorRotationStatus{Phase: phase, LastPhaseTransitionTime: &t,
			Checkpoint: &v1alpha1.Checkpoint{Step: "x", Rotation: "r", StartTime: &t}}
	}
	spec := v1alpha1.TrustAnchorRotationSpec{}
	s := rotatingState(p)

	t.Run("Synced and bootstrapped is Ready", func(t *testing.T) {
		st := Project(rotationSteps, inPhase(v1alpha1.PhaseSynced, now.Add(-1000*time.Hour)), spec, gen, s,
			result(StepDetectAnchorRotation, v1alpha1.PhaseSynced, workflow.Waiting("TrustAnchorUnchanged", "")), now)
		checkCondition(t, st, v1alpha1.ConditionReady, gen, want{metav1.ConditionTrue, "Synced", ""})
		checkCondition(t, st, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionFalse, "Synced", ""})
		checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", ""})
		checkCondition(t, st, v1alpha1.ConditionOutOfOrderIssuerRotation, gen, want{metav1.ConditionFalse, v1alpha1.ReasonIssuerRotationInOrder, ""})
		if st.ObservedGeneration != gen {
			t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, gen)
		}
	})

	t.Run("bootstrapping is Reconciling, and Stalled an hour after it began", func(t *testing.T) {
		missing := workflow.Waiting("TrustAnchorUnavailable", "trust anchor Secret cert-manager/linkerd-trust-anchor not found")
		first := Project(rotationSteps, v1alpha1.TrustAnchorRotationStatus{}, spec, gen, s, result(StepBootstrap, v1alpha1.PhaseSynced, missing), now)
		checkCondition(t, first, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, "Bootstrapping", "linkerd-trust-anchor not found"})
		checkCondition(t, first, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, "Bootstrapping", "linkerd-trust-anchor not found"})
		checkCondition(t, first, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", "stalled after 1h"})
		later := Project(rotationSteps, first, spec, gen, s, result(StepBootstrap, v1alpha1.PhaseSynced, missing), now.Add(59*time.Minute))
		checkCondition(t, later, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", ""})
		if !equality.Semantic.DeepEqual(later.Conditions, first.Conditions) {
			t.Errorf("the same observation later changed the conditions:\n%+v\n%+v", first.Conditions, later.Conditions)
		}
		stalled := Project(rotationSteps, later, spec, gen, s, result(StepBootstrap, v1alpha1.PhaseSynced, missing), now.Add(61*time.Minute))
		checkCondition(t, stalled, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "TrustAnchorUnavailable",
			"blocked in phase Synced since 2026-06-01T12:00:00Z, longer than 1h: trust anchor Secret cert-manager/linkerd-trust-anchor not found"})
		checkCondition(t, stalled, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, "Bootstrapping", ""})
	})

	t.Run("Synced but blocked is Reconciling on what blocks it", func(t *testing.T) {
		st := Project(rotationSteps, inPhase(v1alpha1.PhaseSynced, now.Add(-1000*time.Hour)), spec, gen, s,
			result(StepDetectAnchorRotation, v1alpha1.PhaseSynced, workflow.Waiting("PreviousAnchorUnavailable", "previous-anchor Secret linkerd/linkerd-previous-anchor not found")), now)
		checkCondition(t, st, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, "PreviousAnchorUnavailable", "not found"})
		checkCondition(t, st, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, "PreviousAnchorUnavailable", "not found"})
		// The phase began long ago, the blocking just now: not stalled.
		checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", ""})
	})

	for _, c := range []struct {
		step, waitReason string
		phase            v1alpha1.Phase
		stalledAfter     time.Duration
	}{
		{StepRefreshControlPlane, "ControlPlaneRollingOut", v1alpha1.PhaseRefreshingControlPlane, time.Hour},
		{StepPropagateTrustRoots, "TrustBundleConverging", v1alpha1.PhasePropagatingTrustRoots, time.Hour},
		{StepWaitForIdentityIssuer, "WaitingForIssuerRenewal", v1alpha1.PhaseWaitingForIdentityRotation, 24 * time.Hour},
		{StepRenewWorkloadCertificates, "WorkloadCertificatesRenewing", v1alpha1.PhaseRenewingWorkloadCerts, time.Hour},
		{StepRemoveOldTrustRoots, "TrustBundleConverging", v1alpha1.PhaseRemovingOldTrustRoots, time.Hour},
	} {
		t.Run(string(c.phase), func(t *testing.T) {
			res := result(c.step, c.phase, workflow.Waiting(c.waitReason, "Waiting for 2 pod(s)"))
			within := Project(rotationSteps, inPhase(c.phase, now.Add(-c.stalledAfter+time.Minute)), spec, gen, s, res, now)
			checkCondition(t, within, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, string(c.phase), "Waiting for 2 pod(s)"})
			checkCondition(t, within, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, string(c.phase), "Waiting for 2 pod(s)"})
			checkCondition(t, within, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", "stalled after " + CompactDuration(c.stalledAfter)})

			beyond := Project(rotationSteps, inPhase(c.phase, now.Add(-c.stalledAfter-time.Minute)), spec, gen, s, res, now)
			checkCondition(t, beyond, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, string(c.phase), ""})
			checkCondition(t, beyond, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, c.waitReason,
				"blocked in phase " + string(c.phase) + " since " + now.Add(-c.stalledAfter-time.Minute).Format(time.RFC3339) +
					", longer than " + CompactDuration(c.stalledAfter) + ": Waiting for 2 pod(s)"})
			checkCondition(t, beyond, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, string(c.phase), ""})
		})
	}

	t.Run("the spec sets the thresholds", func(t *testing.T) {
		short := v1alpha1.TrustAnchorRotationSpec{StalledAfter: v1alpha1.StalledAfter{
			Default: &metav1.Duration{Duration: 10 * time.Minute}, IdentityIssuerRenewal: &metav1.Duration{Duration: 90 * time.Minute}}}
		res := result(StepPropagateTrustRoots, v1alpha1.PhasePropagatingTrustRoots, workflow.Waiting("TrustBundleConverging", "Waiting for 2 pod(s)"))
		st := Project(rotationSteps, inPhase(v1alpha1.PhasePropagatingTrustRoots, now.Add(-11*time.Minute)), short, gen, s, res, now)
		checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "TrustBundleConverging", "longer than 10m"})
		res = result(StepWaitForIdentityIssuer, v1alpha1.PhaseWaitingForIdentityRotation, workflow.Waiting("WaitingForIssuerRenewal", "Waiting for the issuer"))
		st = Project(rotationSteps, inPhase(v1alpha1.PhaseWaitingForIdentityRotation, now.Add(-89*time.Minute)), short, gen, s, res, now)
		checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", "stalled after 1h30m"})
		st = Project(rotationSteps, inPhase(v1alpha1.PhaseWaitingForIdentityRotation, now.Add(-91*time.Minute)), short, gen, s, res, now)
		checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "WaitingForIssuerRenewal", "longer than 1h30m"})
	})

	t.Run("an act keeps Stalled; a new phase ends it", func(t *testing.T) {
		wait := result(StepPropagateTrustRoots, v1alpha1.PhasePropagatingTrustRoots, workflow.Waiting("TrustBundleConverging", "Waiting for 2 pod(s)"))
		stalled := Project(rotationSteps, inPhase(v1alpha1.PhasePropagatingTrustRoots, now.Add(-2*time.Hour)), spec, gen, s, wait, now)
		checkCondition(t, stalled, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "TrustBundleConverging", ""})
		acted := Project(rotationSteps, stalled, spec, gen, s, result(StepPropagateTrustRoots, v1alpha1.PhasePropagatingTrustRoots,
			workflow.ActNeeded("RestartingWorkloads", "restarting 1 workload(s)")), now.Add(time.Second))
		checkCondition(t, acted, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "TrustBundleConverging", ""})
		checkCondition(t, acted, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, "PropagatingTrustRoots", "restarting 1 workload(s)"})

		next := Project(rotationSteps, acted, spec, gen, s, result(StepRestartIdentity, v1alpha1.PhaseWaitingForIdentityRotation,
			workflow.Waiting("WaitingForIssuerRenewal", "Waiting for the issuer")), now.Add(time.Minute))
		checkCondition(t, next, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, "NotStalled", "in phase WaitingForIdentityRotation since 2026-06-01T12:01:00Z"})
		if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionStalled); !c.LastTransitionTime.Time.Equal(now.Add(time.Minute)) {
			t.Errorf("Stalled lastTransitionTime = %v, want when it turned False", c.LastTransitionTime)
		}
	})

	t.Run("back in Synced the rotation is Ready, and other conditions stay", func(t *testing.T) {
		prev := inPhase(v1alpha1.PhaseRemovingOldTrustRoots, now.Add(-2*time.Hour))
		meta.SetStatusCondition(&prev.Conditions, metav1.Condition{Type: v1alpha1.ConditionOutOfOrderIssuerRotation, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonIssuerRotatedOutOfOrder, Message: v1alpha1.MessageIssuerRotatedOutOfOrder})
		meta.SetStatusCondition(&prev.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: "TrustBundleConverging", Message: "blocked"})
		st := Project(rotationSteps, prev, spec, gen+1, rotatingState(p, previous(p.newAnchor), bundleOf(p.newAnchor)),
			result(StepDetectAnchorRotation, v1alpha1.PhaseSynced, workflow.Waiting("TrustAnchorUnchanged", "")), now)
		checkCondition(t, st, v1alpha1.ConditionReady, gen+1, want{metav1.ConditionTrue, "Synced", ""})
		checkCondition(t, st, v1alpha1.ConditionReconciling, gen+1, want{metav1.ConditionFalse, "Synced", ""})
		checkCondition(t, st, v1alpha1.ConditionStalled, gen+1, want{metav1.ConditionFalse, "NotStalled", ""})
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("OutOfOrderIssuerRotation = %+v, want it kept until the next rotation", c)
		}
		if st.ObservedGeneration != gen+1 {
			t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, gen+1)
		}
	})
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m", 10 * time.Minute: "10m", 5 * time.Second: "5s", 61 * time.Second: "1m1s"} {
		if got := CompactDuration(d); got != want {
			t.Errorf("CompactDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestIdentityRestartedEarlyCondition: identity restarted early sets the condition True and adds
// what it means to the blocking message; the data plane converged, it turns False.
func TestIdentityRestartedEarlyCondition(t *testing.T) {
	p := newPKI(t)
	now := time.Now()
	const gen = 2
	wait := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepPropagateTrustRoots}, Phase: string(v1alpha1.PhasePropagatingTrustRoots),
		Decision: workflow.Waiting("TrustBundleConverging", "Waiting for 2 pod(s) to converge on the expanded trust bundle")}
	spec := v1alpha1.TrustAnchorRotationSpec{}

	quiet := Project(rotationSteps, v1alpha1.TrustAnchorRotationStatus{}, spec, gen, rotatingState(p, issuer(p.newIssuer), bundlePods(3, 5), identityPods(1, "linkerd-identity-old")), wait, now)
	checkCondition(t, quiet, v1alpha1.ConditionIdentityRestartedEarly, gen, want{metav1.ConditionFalse, v1alpha1.ReasonIdentityNotRestartedEarly, ""})

	s := rotatingState(p, issuer(p.newIssuer), bundlePods(3, 5), identityPod("linkerd-identity-new", -time.Minute, ""))
	early := Project(rotationSteps, quiet, spec, gen, s, wait, now.Add(time.Second))
	checkCondition(t, early, v1alpha1.ConditionIdentityRestartedEarly, gen, want{metav1.ConditionTrue, v1alpha1.ReasonIdentityRestartedEarly, "linkerd/linkerd-identity-new started after the trust bundle was expanded"})
	if !strings.HasPrefix(early.BlockingMessage, "Waiting for 2 pod(s) to converge on the expanded trust bundle; identity pod(s) linkerd/linkerd-identity-new") {
		t.Errorf("blockingMessage %q does not name the early identity pod after what the rotation waits for", early.BlockingMessage)
	}

	s.TrustBundle = Convergence{Converged: 5, Target: 5}
	done := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepRestartIdentity}, Phase: string(v1alpha1.PhasePropagatingTrustRoots),
		Decision: workflow.Waiting("ControlPlaneRollingOut", "Waiting for the rollout")}
	cleared := Project(rotationSteps, early, spec, gen, s, done, now.Add(time.Minute))
	checkCondition(t, cleared, v1alpha1.ConditionIdentityRestartedEarly, gen, want{metav1.ConditionFalse, v1alpha1.ReasonIdentityNotRestartedEarly, ""})
	if strings.Contains(cleared.BlockingMessage, "identity pod(s)") {
		t.Errorf("blockingMessage %q still names the early identity pod", cleared.BlockingMessage)
	}
}
