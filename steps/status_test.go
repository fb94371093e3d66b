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
	st := Project(rotationSteps, synced, spec, 1, s, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "Waiting for 2 pod(s)"), now)
	if st.Phase != v1alpha1.PhasePropagatingTrustRoots || st.LastPhaseTransitionTime.Time != now || st.BlockingMessage != "Waiting for 2 pod(s)" {
		t.Fatalf("phase/transition/message: %+v", st)
	}
	// The counts name the anchors they are against: the expanded bundle's, the new one first.
	wantBundle := v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 10, TargetPods: 12,
		Anchors: []string{Fingerprint(p.newAnchor.cert), Fingerprint(p.oldAnchor.cert)}}
	if !equality.Semantic.DeepEqual(*st.TrustBundle, wantBundle) {
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
	again := Project(rotationSteps, st, spec, 1, s, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "Waiting for 2 pod(s)"), now.Add(time.Second))
	if !equality.Semantic.DeepEqual(again, st) {
		t.Errorf("an unchanged observation changed the status:\n%+v\n%+v", again, st)
	}

	// RenewingWorkloadCerts publishes the accelerated interval; the condition stays True.
	renewing := Project(rotationSteps, st, spec, 1, s, wait(StepRenewWorkloadCertificates, "RenewingWorkloadCerts", "x"), now.Add(time.Minute))
	if renewing.WorkloadCertificateRefreshInterval == nil || renewing.WorkloadCertificateRefreshInterval.Duration != 5*time.Minute {
		t.Errorf("refresh interval = %v, want the 5m default", renewing.WorkloadCertificateRefreshInterval)
	}
	if c := meta.FindStatusCondition(renewing.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c.Status != metav1.ConditionTrue {
		t.Errorf("condition reset mid-rotation")
	}

	// Back in Synced, then a new rotation in order: the condition returns to False.
	done := Project(rotationSteps, renewing, spec, 1, s, wait(StepDetectAnchorRotation, "Synced", ""), now.Add(2*time.Minute))
	if done.Checkpoint.Rotation != "" || done.BlockingMessage != "" {
		t.Errorf("synced checkpoint = %+v, message %q", done.Checkpoint, done.BlockingMessage)
	}
	s2 := rotatingState(newPKI(t))
	next := Project(rotationSteps, done, spec, 1, s2, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "x"), now.Add(3*time.Minute))
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonIssuerRotationInOrder {
		t.Errorf("a new in-order rotation kept %+v", c)
	}

	// The same, when the checkpoint saved before the new rotation's first act already names it
	// (SavedCheckpoint): the True condition is older than the rotation, so it is reset.
	saved := done.DeepCopy()
	start := metav1.NewTime(now.Add(3 * time.Minute))
	saved.Checkpoint = &v1alpha1.Checkpoint{Step: StepExpandTrustBundle, Token: "t", Acts: 1, Rotation: Fingerprint(s2.Anchor.Cert), StartTime: &start}
	after := Project(rotationSteps, *saved, spec, 1, s2, wait(StepPropagateTrustRoots, "PropagatingTrustRoots", "x"), now.Add(4*time.Minute))
	if c := meta.FindStatusCondition(after.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c.Status != metav1.ConditionFalse {
		t.Errorf("a new in-order rotation whose saved checkpoint named it kept %+v", c)
	}
}

// TestSavedCheckpoint: the checkpoint saved before an act names the rotation the act belongs
// to. The case that matters: the workflow completed a round and, the anchor having been renewed
// again meanwhile, acts at expand-trust-bundle in the same pass; a crash before the status
// projection must not leave that act under the finished round's anchor, which from
// retire-previous-anchor on would make the round "finish" on the retired anchor and drop the
// new one.
func TestSavedCheckpoint(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	earlier := metav1.NewTime(now.Add(-time.Hour))
	old, newFP, thirdFP := Fingerprint(p.oldAnchor.cert), Fingerprint(p.newAnchor.cert), Fingerprint(third.cert)
	for name, tc := range map[string]struct {
		prev         *v1alpha1.Checkpoint
		next         string
		state        *State
		wantRotation string
		wantStarted  bool // a new rotation: StartTime now
	}{
		"leaving Synced: the new anchor's rotation starts before the first act": {
			prev: &v1alpha1.Checkpoint{Step: StepDetectAnchorRotation}, next: StepExpandTrustBundle,
			state: rotatingState(p), wantRotation: newFP, wantStarted: true,
		},
		"no status yet": {
			next: StepExpandTrustBundle, state: rotatingState(p), wantRotation: newFP, wantStarted: true,
		},
		"further on in the same rotation": {
			prev: &v1alpha1.Checkpoint{Step: StepPropagateTrustRoots, Rotation: newFP, StartTime: &earlier}, next: StepRestartIdentity,
			state: rotatingState(p), wantRotation: newFP,
		},
		"the same step again": {
			prev: &v1alpha1.Checkpoint{Step: StepRetirePreviousAnchor, Token: "t", Acts: 1, Rotation: newFP, StartTime: &earlier}, next: StepRetirePreviousAnchor,
			state: rotatingState(p), wantRotation: newFP,
		},
		"a round completed and the next acts in the same pass: the next round's anchor": {
			prev: &v1alpha1.Checkpoint{Step: StepRemoveOldTrustRoots, Rotation: newFP, StartTime: &earlier}, next: StepExpandTrustBundle,
			state: rotatingState(p, anchor(third), previous(p.newAnchor), bundleOf(p.newAnchor)), wantRotation: thirdFP, wantStarted: true,
		},
		"an act at a Synced step belongs to no rotation": {
			prev: &v1alpha1.Checkpoint{Step: StepRemoveOldTrustRoots, Rotation: old}, next: StepDetectAnchorRotation,
			state: rotatingState(p),
		},
	} {
		t.Run(name, func(t *testing.T) {
			cp := SavedCheckpoint(rotationSteps, tc.prev, workflow.Checkpoint{Step: tc.next, Token: "tok", Acts: 1}, tc.state, now)
			if cp.Step != tc.next || cp.Token != "tok" || cp.Acts != 1 || cp.Rotation != tc.wantRotation {
				t.Fatalf("checkpoint %+v, want step %s under rotation %.12s", cp, tc.next, tc.wantRotation)
			}
			started := cp.StartTime != nil && cp.StartTime.Time.Equal(now)
			if tc.wantRotation != "" && started != tc.wantStarted {
				t.Errorf("start time %v, want a new rotation: %v", cp.StartTime, tc.wantStarted)
			}
		})
	}
}

// TestWorkflowCheckpoint: the workflow resumes from the step, token and acts the status saved,
// and from its first step when none is saved.
func TestWorkflowCheckpoint(t *testing.T) {
	if got := WorkflowCheckpoint(nil); got != (workflow.Checkpoint{}) {
		t.Errorf("no saved checkpoint: %+v", got)
	}
	cp := workflow.Checkpoint{Step: StepRestartIdentity, Token: "2026-06-01T12:00:00Z scale 3", Acts: 2}
	saved := statusCheckpoint(cp)
	saved.Rotation = "ab12"
	if got := WorkflowCheckpoint(saved); got != cp {
		t.Errorf("resumed at %+v, want %+v", got, cp)
	}
}
