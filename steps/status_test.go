package steps

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func TestProject(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	spec := v1alpha1.TrustAnchorRotationSpec{}
	wait := func(step, phase, msg string) workflow.Result {
		return workflow.Result{Checkpoint: workflow.Checkpoint{Step: step}, Phase: phase, Decision: workflow.Waiting("R", msg)}
	}

	// Entering PropagatingTrustRoots from Synced with the issuer already renewed: out of order.
	s := rotatingState(p, issuer(p.newIssuer), bundlePods(10, 12), certPods(12, 12))
	synced := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseSynced}
	st := Project(synced, spec, 1, s, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "Waiting for 2 pod(s)"), now)
	if st.Phase != v1alpha1.PhasePropagatingTrustRoots || st.LastPhaseTransitionTime.Time != now || st.BlockingMessage != "Waiting for 2 pod(s)" {
		t.Fatalf("phase/transition/message: %+v", st)
	}
	if *st.TrustBundle != (v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 10, TargetPods: 12}) {
		t.Errorf("trustBundle = %+v", st.TrustBundle)
	}
	if st.PreviousAnchorFingerprint != Fingerprint(p.oldAnchor.cert) || st.ActiveIssuerFingerprint != Fingerprint(p.newIssuer.cert) {
		t.Errorf("fingerprints: %s %s", st.PreviousAnchorFingerprint, st.ActiveIssuerFingerprint)
	}
	if len(st.SourceFingerprints) != 2 || st.SourceFingerprints[0].Name != "linkerd-trust-anchor" || st.SourceFingerprints[0].Kind != v1alpha1.SourceKindSecret {
		t.Errorf("sourceFingerprints = %+v", st.SourceFingerprints)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("OutOfOrderIssuerRotation = %+v, want True", c)
	}
	if st.Checkpoint.Rotation != Fingerprint(p.newAnchor.cert) || st.Checkpoint.StartTime.Time != now {
		t.Errorf("checkpoint = %+v", st.Checkpoint)
	}
	if st.WorkloadCertificateRefreshInterval != nil {
		t.Errorf("refresh interval published outside RenewingWorkloadCerts")
	}

	// Projecting the same observation again a second later changes nothing: no status write.
	again := Project(st, spec, 1, s, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "Waiting for 2 pod(s)"), now.Add(time.Second))
	if !equality.Semantic.DeepEqual(again, st) {
		t.Errorf("an unchanged observation changed the status:\n%+v\n%+v", again, st)
	}

	// RenewingWorkloadCerts publishes the accelerated interval; the condition stays True.
	renewing := Project(st, spec, 1, s, wait(StepRenewWorkloadCertificates, "RenewingWorkloadCerts", "x"), now.Add(time.Minute))
	if renewing.WorkloadCertificateRefreshInterval == nil || renewing.WorkloadCertificateRefreshInterval.Duration != 5*time.Minute {
		t.Errorf("refresh interval = %v, want the 5m default", renewing.WorkloadCertificateRefreshInterval)
	}
	if c := meta.FindStatusCondition(renewing.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c.Status != metav1.ConditionTrue {
		t.Errorf("condition reset mid-rotation")
	}

	// Back in Synced, then a new rotation in order: the condition returns to False.
	done := Project(renewing, spec, 1, s, wait(StepDetectAnchorRotation, "Synced", ""), now.Add(2*time.Minute))
	if done.Checkpoint.Rotation != "" || done.BlockingMessage != "" {
		t.Errorf("synced checkpoint = %+v, message %q", done.Checkpoint, done.BlockingMessage)
	}
	s2 := rotatingState(newPKI(t))
	next := Project(done, spec, 1, s2, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "x"), now.Add(3*time.Minute))
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonIssuerRotationInOrder {
		t.Errorf("a new in-order rotation kept %+v", c)
	}
}
