package steps

import (
	"crypto/x509"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// A trust anchor renewed again before the rotation to the previous renewal finished: the
// checkpoint's rotation (State.Rotation) names an anchor that is neither the current anchor nor
// the previous one. Pods may already hold certificates that chain to that in-flight anchor, and
// trust it, so dropping it from the bundle (DesiredBundle was current + previous) could break
// mTLS. Instead the rotation jumps back to expand-trust-bundle, towards the newest anchor, and
// the checkpoint the engine saves for that jump records the in-flight anchor in
// status.inFlightAnchors (SaveCheckpoint) — the bundle keeps it until the previous anchor is
// retired. The engine saves the jump before anything else acts and stops there, so a crash can
// never lose the in-flight anchor, and the next pass observes it in State.InFlight before
// expand-trust-bundle renders a bundle.
//
// From retire-previous-anchor on, the rotation's anchor is in linkerd-previous-anchor and every
// live certificate chains to it: a renewal then does not restart the rotation. The round
// finishes on the bundle it was reducing to, that anchor alone (State.FinishingOn: the reduction
// and the control-plane restart use it, not the newer anchor), and once the control plane runs
// on it the next round starts at detect-anchor-rotation (the remove-old-trust-roots case below).
//
// Every step of a rotation observes this first (guardSupersede), at the checkpoint's step only:
// a plan's view of the steps ahead leaves it out (ObserveAhead). An in-flight anchor that the
// bundle never held was trusted by no pod and signed no live certificate; it is not kept.

// ReasonRotationSuperseded is the reason of the jump a trust anchor renewed again mid-rotation
// makes, and of its Event.
const ReasonRotationSuperseded = "RotationSuperseded"

// supersession is where a rotation superseded by a newer anchor starts again, and why.
type supersession struct {
	to, message string
	// keep is the in-flight anchor the trust bundle holds, which status.inFlightAnchors must
	// record unless it does already; nil when there is none to add.
	keep *x509.Certificate
	// standard: spec.strategy is CrossSigned but the newer anchor does not bridge to the anchors
	// the data plane trusts, so the rotation starting again records the Standard strategy (see
	// crossSignedFallback).
	standard bool
}

// superseded reports whether the rotation at step was superseded by a newer trust anchor.
func (s *State) superseded(at Step) (supersession, bool) {
	step := at.Name
	if waitsOnReducedBundle(step) && s.Anchor.Usable() && s.Previous.Usable() && s.Anchor.Fingerprint() != s.Previous.Fingerprint() {
		// Renewed again while the pods move onto the reduced bundle, or earlier from
		// retire-previous-anchor on (the control plane then was restarted onto the bundle this
		// round reduced to): waiting for every pod to be injected with the reduced bundle would
		// only cost a round of restarts that the next round's bundle change makes anyway. This
		// round ends and the next starts at detect-anchor-rotation. Nothing is lost: the retired
		// anchor is in no bundle the operator writes again and signs no live certificate (every
		// pod moved to the issuer on the current anchor before it was retired), and the next
		// round's bundle change replaces every pod still carrying it.
		return supersession{to: StepDetectAnchorRotation, message: fmt.Sprintf(
			"trust anchor renewed again (%s) while pods moved onto the reduced bundle of %s at step %s; starting the next rotation at %s",
			ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint()), step, StepDetectAnchorRotation)}, true
	}
	if s.Rotation == "" || at.Idle() || !s.Rotating() {
		return supersession{}, false
	}
	if s.Rotation == s.Anchor.Fingerprint() || s.Rotation == s.Previous.Fingerprint() {
		// Towards the current anchor; or retired already, and the round finishes on it.
		return supersession{}, false
	}
	sup := supersession{to: StepExpandTrustBundle, message: fmt.Sprintf(
		"trust anchor renewed again (%s) before the rotation to %s finished at step %s; restarting the rotation at %s",
		ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Rotation), step, StepExpandTrustBundle)}
	for _, c := range s.Bundle.Certs {
		if Fingerprint(c) == s.Rotation {
			sup.keep = c
		}
	}
	if sup.keep != nil {
		sup.message += fmt.Sprintf(", keeping %s in the trust bundle until the previous anchor is retired", ShortFingerprint(s.Rotation))
	}
	if note, standard := s.crossSignedFallback(sup.keep); standard {
		sup.message += note
		sup.standard = true
	}
	if sup.keep != nil {
		for _, a := range s.InFlight {
			if Fingerprint(a) == s.Rotation {
				sup.keep = nil // recorded already
			}
		}
	}
	return sup, true
}

// crossSignedFallback decides the strategy of a rotation that starts again at
// expand-trust-bundle towards a newer anchor (see superseded), when spec.strategy is
// CrossSigned. The cross-signed steps then pass over the expansion and its restarts: the
// bundle stays what the data plane trusts — the previous anchor, the in-flight ones, and keep,
// about to be kept — and every pod must verify the chain of the issuer renewed onto the newer
// anchor through the bridges that issuer presents, which are what the newer anchor's Secret
// carries (anchorBridged). cert-manager's cross-signing gives them when the anchor renewed
// again was signed by the one it replaced (its chain is then [C, B], B signed by A), but not
// when it was issued otherwise meanwhile — self-signed, by another CA — and then no such chain
// can ever be issued: the key that could sign a bridge is gone. Such a rotation goes on as a
// Standard one, whatever spec.strategy says: the bundle is expanded with the newer anchor and
// the data plane restarted onto it before the issuer switch, which needs no bridge. Waiting
// instead would leave the mesh where a renewal of the issuer (cert-manager's own schedule)
// hands identity a chain it cannot load, with nothing the user could do but change the
// strategy. note is what the jump's message says of it.
func (s *State) crossSignedFallback(keep *x509.Certificate) (note string, standard bool) {
	if StrategyOf(s.Spec) != v1alpha1.StrategyCrossSigned {
		return "", false
	}
	var extra []*x509.Certificate
	if keep != nil {
		extra = append(extra, keep)
	}
	roots := s.crossSignedRoots(extra...)
	if s.anchorBridged(roots) {
		return "", false
	}
	return fmt.Sprintf("; spec.strategy CrossSigned cannot carry it: the newer anchor %s in Secret %s (%s) has no path to the anchors every meshed pod trusts (%s), "+
		"so pods that trust only them would reject the chains of an issuer renewed onto it; this rotation goes on as a Standard one (status.checkpoint.strategy): "+
		"the trust bundle expanded with the newer anchor and the data plane restarted onto it before the issuer switch",
		ShortFingerprint(s.Anchor.Fingerprint()), s.Anchor.Ref(), chainFingerprints(s.Anchor), fingerprints(roots)), true
}

// guardSupersede wraps the Observe of a step of a rotation: the workflow jumps when the rotation
// was superseded (see superseded); otherwise the step observes as before. One act comes first:
// restart-identity holding identity at 0 (a scale token) scales it back, once none of its pods
// is left, as the step itself would — under the step's checkpoint, so that a crash in between
// scales back to the recorded replicas — and the rotation jumps after.
func guardSupersede(step Step, observe func(*State, string) workflow.Decision) func(*State, string) workflow.Decision {
	return func(s *State, token string) workflow.Decision {
		sup, ok := s.superseded(step)
		if !ok {
			return observe(s, token)
		}
		if _, held := IdentityScaleToRestore(s, step.Name, token); held {
			sc, _ := parseIdentityScale(token)
			d := observeScaleIdentity(s, s.ControlPlane[s.Config.IdentityDeployment], sc)
			d.Message = sup.message + "; first: " + d.Message
			return d
		}
		return workflow.JumpTo(sup.to, ReasonRotationSuperseded, sup.message).Superseding()
	}
}

// SaveCheckpoint sets in st the checkpoint to persist before an act at next, or with the jump
// that moved the workflow to next (next.Jump), the workflow having advanced from st's
// checkpoint over s (see SavedCheckpoint). A rotation superseded by a newer anchor also records
// there the in-flight anchor it leaves (see superseded): the same write as the jump's checkpoint,
// so that no step can act on a bundle without it.
func SaveCheckpoint(rot *Ordered, st *v1alpha1.TrustAnchorRotationStatus, next workflow.Checkpoint, s *State, now time.Time) {
	prev := st.Checkpoint
	st.Checkpoint = SavedCheckpoint(rot, st.Checkpoint, next, s, now)
	if j := next.Jump; j != nil && j.Supersedes {
		if sup, ok := s.superseded(rot.named(j.From)); ok {
			if sup.keep != nil {
				st.InFlightAnchors = append([]string{string(EncodePEM(sup.keep))}, st.InFlightAnchors...)
			}
			if sup.standard && st.Checkpoint != nil {
				st.Checkpoint.Strategy = v1alpha1.StrategyStandard
			}
		}
	}
	// The workflow passed the step it was at to reach this act: the history records a user's
	// restarts there (the projection after the act sees the act's checkpoint, not that step).
	var passed []string
	if prev != nil && next.Jump == nil && prev.Step != next.Step && rot.position(prev.Step) < rot.position(next.Step) {
		passed = []string{prev.Step}
	}
	TrackHistory(rot, st, prev, s.Spec, s, next.Jump, passed, now)
}

// FromStatus sets what the state holds of the TrustAnchorRotation's status: the rotation in
// progress, when it started, the anchor it retires to, and the anchors kept in flight.
func (s *State) FromStatus(rot *Ordered, st *v1alpha1.TrustAnchorRotationStatus) error {
	inFlight, err := ParseInFlight(st.InFlightAnchors)
	if err != nil {
		return err
	}
	s.InFlight, s.Retiring, s.Rotation, s.RotationStart, s.Strategy = inFlight, RetiringTo(rot, st.Checkpoint), "", time.Time{}, ""
	s.issuerWatchFromStatus(st)
	if cp := st.Checkpoint; cp != nil {
		s.Rotation, s.Strategy = cp.Rotation, cp.Strategy
		if cp.StartTime != nil {
			s.RotationStart = cp.StartTime.Time
		}
	}
	return nil
}

// ParseInFlight parses status.inFlightAnchors. An entry that does not parse is an error: the
// operator must not render a bundle that silently lacks an anchor it promised to keep.
func ParseInFlight(pems []string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for i, p := range pems {
		certs, err := ParseCertificates([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("status.inFlightAnchors[%d]: %w", i, err)
		}
		out = append(out, certs...)
	}
	return out, nil
}

// RecreatePrevious returns the certificate to recreate the previous-anchor Secret with when it
// was deleted (at any step, not only at bootstrap): the anchor the bundle trusts besides the
// current and in-flight ones, or the current anchor when it trusts no other (or, at step
// detect-anchor-rotation, when the bundle was deleted too). ok is false when there is nothing
// to do or nothing says which anchor it held (bootstrap and the bundle-writing steps then wait
// with a message).
func RecreatePrevious(s *State, step string) (*x509.Certificate, bool) {
	if s.Previous.Found || !s.Anchor.Usable() {
		return nil, false
	}
	if !s.Bundle.Found || len(s.Bundle.Certs) == 0 {
		// Both deleted while Synced: the mesh trusts the current anchor alone, which still signs
		// the identity issuer, so it is the previous anchor, as at bootstrap; the trust bundle is
		// then rewritten from it. Mid-rotation nothing says which anchor was the previous one.
		if Watching(step) && s.Issuer.Usable() && SignedBy(s.Issuer.Cert, s.Anchor.Cert) {
			return s.Anchor.Cert, true
		}
		return nil, false
	}
	return bootstrapPrevious(s)
}

// RetiringTo is State.Retiring for a checkpoint: the anchor its rotation moves to, from
// retire-previous-anchor on; "" before that step, when Synced, or when cp is nil.
func RetiringTo(rot *Ordered, cp *v1alpha1.Checkpoint) string {
	if cp == nil || !rot.named(cp.Step).Retiring {
		return ""
	}
	return cp.Rotation
}
