package steps

import (
	"crypto/x509"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Supersede handles a trust anchor renewed again before the rotation to the previous renewal
// finished: the checkpoint's rotation names an anchor that is neither the current anchor nor
// the previous one. Pods may already hold certificates that chain to that in-flight anchor,
// and trust it, so dropping it from the bundle (DesiredBundle was current + previous) could
// break mTLS. Instead the in-flight anchor is recorded in status.inFlightAnchors — the bundle
// keeps it until the previous anchor is retired — and the rotation starts over at
// expand-trust-bundle, towards the newest anchor.
//
// From retire-previous-anchor on, the rotation's anchor is in linkerd-previous-anchor and every
// live certificate chains to it: a renewal then does not restart the rotation. The round
// finishes on the bundle it was reducing to, that anchor alone (State.FinishingOn: the reduction
// and the control-plane restart use it, not the newer anchor), and once the control plane runs
// on it the next round starts at detect-anchor-rotation (the remove-old-trust-roots case below).
//
// It changes st and returns a message for an event when the rotation was superseded. The
// caller persists st before anything else acts, so that a crash can never lose the in-flight
// anchor. An in-flight anchor that the bundle never held was trusted by no pod and signed no
// live certificate; it is not kept.
func Supersede(st *v1alpha1.TrustAnchorRotationStatus, s *State, now time.Time) (string, bool) {
	cp := st.Checkpoint
	if cp != nil && cp.Step == StepRemoveOldTrustRoots && s.Anchor.Usable() && s.Previous.Usable() &&
		s.Anchor.Fingerprint() != s.Previous.Fingerprint() {
		// Renewed again while the pods move onto the reduced bundle, or earlier from
		// retire-previous-anchor on (the control plane then was restarted onto the bundle this
		// round reduced to): waiting for every pod to be injected with the reduced bundle would
		// only cost a round of restarts that the next round's bundle change makes anyway. This
		// round ends and the next starts at detect-anchor-rotation. Nothing is lost: the retired anchor is in no
		// bundle the operator writes again and signs no live certificate (every pod moved to the
		// issuer on the current anchor before it was retired), and the next round's bundle change
		// replaces every pod still carrying it.
		st.Checkpoint = &v1alpha1.Checkpoint{Step: StepDetectAnchorRotation}
		return fmt.Sprintf("trust anchor renewed again (%s) while pods moved onto the reduced bundle of %s at step %s; starting the next rotation at %s",
			ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint()), cp.Step, StepDetectAnchorRotation), true
	}
	if cp == nil || cp.Rotation == "" || named(cp.Step).Idle() || !s.Rotating() {
		return "", false
	}
	if cp.Rotation == s.Anchor.Fingerprint() || cp.Rotation == s.Previous.Fingerprint() {
		// Towards the current anchor; or retired already, and the round finishes on it.
		return "", false
	}
	var kept *x509.Certificate
	for _, c := range s.Bundle.Certs {
		if Fingerprint(c) == cp.Rotation {
			kept = c
		}
	}
	msg := fmt.Sprintf("trust anchor renewed again (%s) before the rotation to %s finished at step %s; restarting the rotation at %s",
		ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(cp.Rotation), cp.Step, StepExpandTrustBundle)
	if kept != nil {
		msg += fmt.Sprintf(", keeping %s in the trust bundle until the previous anchor is retired", ShortFingerprint(cp.Rotation))
		already := false
		for _, a := range s.InFlight {
			already = already || Fingerprint(a) == cp.Rotation
		}
		if !already {
			st.InFlightAnchors = append([]string{string(EncodePEM(kept))}, st.InFlightAnchors...)
		}
	}
	t := metav1.NewTime(now)
	st.Checkpoint = &v1alpha1.Checkpoint{Step: StepExpandTrustBundle, Rotation: s.Anchor.Fingerprint(), StartTime: &t}
	return msg, true
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
		if step == StepDetectAnchorRotation && s.Issuer.Usable() && SignedBy(s.Issuer.Cert, s.Anchor.Cert) {
			return s.Anchor.Cert, true
		}
		return nil, false
	}
	return bootstrapPrevious(s)
}

// RetiringTo is State.Retiring for a checkpoint: the anchor its rotation moves to, from
// retire-previous-anchor on; "" before that step, when Synced, or when cp is nil.
func RetiringTo(cp *v1alpha1.Checkpoint) string {
	if cp == nil || !named(cp.Step).Retiring {
		return ""
	}
	return cp.Rotation
}
