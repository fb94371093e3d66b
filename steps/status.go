package steps

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// DefaultWorkloadCertificateRefreshInterval is spec.workloadCertificateRefreshInterval's default.
const DefaultWorkloadCertificateRefreshInterval = 5 * time.Minute

// RefreshInterval is the spec's accelerated refresh interval, defaulted.
func RefreshInterval(spec v1alpha1.TrustAnchorRotationSpec) time.Duration {
	if spec.WorkloadCertificateRefreshInterval == nil || spec.WorkloadCertificateRefreshInterval.Duration <= 0 {
		return DefaultWorkloadCertificateRefreshInterval
	}
	return spec.WorkloadCertificateRefreshInterval.Duration
}

// Project computes the status to publish from the previous status, the snapshot the workflow
// advanced over, and where it stopped. It is pure, so the operator writes status only when the
// result differs from what is there.
func Project(rot *Ordered, prev v1alpha1.TrustAnchorRotationStatus, spec v1alpha1.TrustAnchorRotationSpec, generation int64,
	s *State, res workflow.Result, now time.Time) v1alpha1.TrustAnchorRotationStatus {
	st, _ := ProjectTimed(rot, prev, spec, generation, s, res, now)
	return st
}

// ProjectTimed is Project, and the moment after now at which the projected status changes with
// nothing else changing (Stalled falling due, a failed act's retry), zero when there is none:
// the operator observes again then, as at a decision's RecheckAt.
func ProjectTimed(rot *Ordered, prev v1alpha1.TrustAnchorRotationStatus, spec v1alpha1.TrustAnchorRotationSpec, generation int64,
	s *State, res workflow.Result, now time.Time) (v1alpha1.TrustAnchorRotationStatus, time.Time) {
	var recheck time.Time
	at := func(t time.Time) {
		if t.After(now) {
			recheck = workflow.Earliest(recheck, t)
		}
	}
	st := *prev.DeepCopy()
	phase := v1alpha1.Phase(res.Phase)
	if st.Phase != phase || st.LastPhaseTransitionTime == nil {
		t := metav1.NewTime(now)
		st.LastPhaseTransitionTime = &t
	}
	st.Phase = phase
	st.ObservedGeneration = generation
	st.BlockingMessage = ""
	if res.Decision.Outcome == workflow.Wait {
		st.BlockingMessage = res.Decision.Message
	}
	st.ActiveIssuerFingerprint = s.Issuer.Fingerprint()
	switch {
	case st.ActiveIssuerFingerprint == "":
		st.ActiveIssuerObservedTime = nil
	case prev.ActiveIssuerFingerprint != st.ActiveIssuerFingerprint || prev.ActiveIssuerObservedTime == nil:
		st.ActiveIssuerObservedTime = &metav1.Time{Time: s.IssuerObservedAt(now)}
	}
	st.PreviousAnchorFingerprint = s.Previous.Fingerprint()
	st.WorkloadCertificateRefreshInterval = nil
	// In effect while proxies renew onto the new issuer, and while the pod templates of
	// automatically restarted workloads carry it (from their first restart to their last).
	if phase == v1alpha1.PhaseRenewingWorkloadCerts && !s.CrossSigned() || s.RefreshOverrides() > 0 {
		st.WorkloadCertificateRefreshInterval = &metav1.Duration{Duration: RefreshInterval(spec)}
	}
	// With the anchors each count is against: what a linked cluster reads (see remote.go).
	st.TrustBundle = convergenceStatus(s.TrustBundle, BundleFingerprints(s.DesiredBundle()))
	var root []string
	if c := s.CertificateRoot(); c != nil {
		root = []string{Fingerprint(c)}
	}
	st.WorkloadCertificates = convergenceStatus(s.Certificates, root)
	st.RemoteClusters = remoteStatuses(rot, prev.RemoteClusters, s, res.Checkpoint.Step)

	st.SourceFingerprints = nil
	for _, src := range []Source{s.Anchor, s.Previous} {
		if fp := src.Fingerprint(); fp != "" {
			st.SourceFingerprints = append(st.SourceFingerprints, v1alpha1.SourceFingerprint{
				Fingerprint: fp, Kind: v1alpha1.SourceKindSecret, Name: src.Name, Namespace: src.Namespace,
			})
		}
	}

	// The checkpoint, with the rotation it belongs to.
	cp := statusCheckpoint(res.Checkpoint)
	if !rot.named(cp.Step).Idle() {
		// A rotation that completed and went straight on into the next one (the anchor was
		// renewed again meanwhile) is a new rotation.
		if prev.Checkpoint != nil && prev.Checkpoint.Rotation != "" && !res.Completed {
			cp.Rotation, cp.StartTime, cp.Strategy = prev.Checkpoint.Rotation, prev.Checkpoint.StartTime, prev.Checkpoint.Strategy
		} else {
			t := metav1.NewTime(now)
			cp.Rotation, cp.StartTime, cp.Strategy = s.Anchor.Fingerprint(), &t, s.StartStrategy(spec)
		}
	}
	st.Checkpoint = cp
	// In-flight anchors are kept until the previous anchor is retired (it then equals the
	// current one, or the one the rotation moved to when the anchor was renewed again since). A missing or unusable anchor or previous anchor says nothing: keep them.
	if s.Anchor.Usable() && s.Previous.Usable() && (!s.Rotating() || s.FinishingOn() != nil) {
		st.InFlightAnchors = nil
	}

	// A new rotation resets the condition. The checkpoint saved before a rotation's first act
	// already names it (SavedCheckpoint), so prev may hold the new rotation too: a condition
	// that changed before the rotation started is the previous rotation's.
	existing := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation)
	newRotation := cp.Rotation != "" && (prev.Checkpoint == nil || prev.Checkpoint.Rotation != cp.Rotation ||
		existing != nil && cp.StartTime != nil && existing.LastTransitionTime.Before(cp.StartTime))
	switch {
	case rot.named(cp.Step).BeforeIssuerSwitch && s.Rotating() && s.IssuerOnCurrentAnchor() && !s.CrossSigned() && !s.previousAnchorExpired():
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionOutOfOrderIssuerRotation, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonIssuerRotatedOutOfOrder, Message: v1alpha1.MessageIssuerRotatedOutOfOrder,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	case existing == nil || newRotation:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionOutOfOrderIssuerRotation, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonIssuerRotationInOrder, Message: v1alpha1.MessageIssuerRotationInOrder,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	// Identity restarted by someone else between the expansion and the data plane's convergence.
	if pods := s.IdentityRestartedEarly(rot, cp.Step); len(pods) > 0 {
		msg := s.IdentityRestartedEarlyMessage(pods)
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionIdentityRestartedEarly, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonIdentityRestartedEarly, Message: msg,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
		if st.BlockingMessage != "" {
			msg = st.BlockingMessage + "; " + msg
		}
		st.BlockingMessage = msg
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionIdentityRestartedEarly, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonIdentityNotRestartedEarly, Message: v1alpha1.MessageIdentityNotRestartedEarly,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	projectStaleIssuer(&st, s, res.Checkpoint.Step, generation, now)
	projectExpiringLeaves(&st, s, generation, now)
	setReadiness(&st, &prev, spec, generation, res, now, at)
	TrackHistory(rot, &st, prev.Checkpoint, spec, s, nil, res.Passed, now)
	st.NextRotation = NextRotationDeadline(s, spec, st.History)
	st.RestartDeadline = RestartDeadlineOf(s, spec, phase, st.LastPhaseTransitionTime)
	if st.RestartDeadline != nil && st.BlockingMessage != "" {
		st.BlockingMessage += "; " + restartDeadlineNote(st.RestartDeadline, now)
	}
	if p := BridgeExpiryProblem(s, st.RestartDeadline); p != "" {
		if st.BlockingMessage != "" {
			p = st.BlockingMessage + "; " + p
		}
		st.BlockingMessage = p
	}
	projectHolds(&st, &prev, spec, generation, s, res, now, at)
	return st, recheck
}

func convergenceStatus(c Convergence, anchors []string) *v1alpha1.ConvergenceStatus {
	state := v1alpha1.Converging
	if c.Done() {
		state = v1alpha1.Converged
	}
	return &v1alpha1.ConvergenceStatus{Status: state, ConvergedPods: int32(c.Converged), TargetPods: int32(c.Target), Anchors: anchors,
		NotProbedPods: int32(min(c.NotProbed, max(c.Target-c.Converged, 0)))}
}

// BundleFingerprints are the fingerprints of a PEM bundle's certificates, in order; nil when it
// is empty or does not parse.
func BundleFingerprints(bundle string) []string {
	certs, err := ParseCertificates([]byte(bundle))
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range certs {
		out = append(out, Fingerprint(c))
	}
	return out
}

// WorkflowCheckpoint is where the workflow resumes from the checkpoint a status saved: its
// first step when none is saved. The operator and linkerd trust plan both resume from it.
func WorkflowCheckpoint(c *v1alpha1.Checkpoint) workflow.Checkpoint {
	if c == nil {
		return workflow.Checkpoint{}
	}
	return workflow.Checkpoint{Step: c.Step, Token: c.Token, Acts: c.Acts}
}

// statusCheckpoint is the status's form of a workflow checkpoint, without the rotation it
// belongs to (the callers add it).
func statusCheckpoint(cp workflow.Checkpoint) *v1alpha1.Checkpoint {
	return &v1alpha1.Checkpoint{Step: cp.Step, Token: cp.Token, Acts: cp.Acts}
}

// SavedCheckpoint is the checkpoint to persist before an act at next, the workflow having
// advanced from prev (the status's checkpoint when the pass began). It carries the rotation the
// act belongs to, so that the rotation's identity — the anchor it moves to — is saved before
// its first act, not only after it in the status projection: a crash between the two must not
// leave an act recorded under the previous rotation's anchor (from retire-previous-anchor on,
// State.Retiring trusts it). A rotation starts when the workflow leaves the Synced steps, or
// went round to an earlier step (it completed and the anchor had been renewed again), or jumped
// (a newer anchor superseded it: the rotation starts again towards that one).
func SavedCheckpoint(rot *Ordered, prev *v1alpha1.Checkpoint, next workflow.Checkpoint, s *State, now time.Time) *v1alpha1.Checkpoint {
	cp := statusCheckpoint(next)
	if rot.named(next.Step).Idle() {
		return cp
	}
	// A jump that does not supersede (a step that starts over, ReasonStepStartedOver) stays in
	// the rotation it belongs to, and in its strategy: a rotation finishes the way it started
	// (see CrossSigned), whatever spec.strategy says since.
	if prev != nil && prev.Rotation != "" && !rot.named(prev.Step).Idle() &&
		(next.Jump == nil && rot.position(prev.Step) <= rot.position(next.Step) || next.Jump != nil && !next.Jump.Supersedes) {
		cp.Rotation, cp.StartTime, cp.Strategy = prev.Rotation, prev.StartTime, prev.Strategy
		return cp
	}
	t := metav1.NewTime(now)
	cp.Rotation, cp.StartTime, cp.Strategy = s.Anchor.Fingerprint(), &t, s.StartStrategy(s.Spec)
	return cp
}

// UrgentCertificates reports whether, at the given step, the operator should probe pods that
// have not converged on the active issuer's trust anchor often rather than rarely: the rotation
// waits on them, or identity was restarted early (IdentityRestartedEarly) and those probes say
// which pods already present a new-anchor certificate.
func UrgentCertificates(rot *Ordered, s *State, step string) bool {
	return rot.named(step).UrgentProbes || len(s.IdentityRestartedEarly(rot, step)) > 0
}

// projectStaleIssuer sets condition IdentityIssuerStale (see State.StaleIssuer).
func projectStaleIssuer(st *v1alpha1.TrustAnchorRotationStatus, s *State, step string, generation int64, now time.Time) {
	c := metav1.Condition{
		Type: v1alpha1.ConditionIdentityIssuerStale, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonIdentityIssuerCurrent, Message: v1alpha1.MessageIdentityIssuerCurrent,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
	}
	switch l := s.StaleIssuer(step); {
	case s.StaleIssuerCarried(step):
		return // as the previous leader left it, until every pod is probed again
	case l != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonIdentityIssuerStale, s.StaleIssuerMessage(l)
	case !Watching(step):
		c.Reason, c.Message = v1alpha1.ReasonIdentityIssuerRotating, v1alpha1.MessageIdentityIssuerRotating
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
