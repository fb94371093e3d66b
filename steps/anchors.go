package steps

import (
	"crypto/x509"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// DesiredBundle is the bundle the rotation wants now: the current anchor, any in-flight
// anchors (a rotation superseded by a newer renewal), and the previous anchor. It is the
// expanded bundle while a rotation is under way, and the current anchor alone once the
// previous anchor is retired — or was renewed with the same key. Empty when the anchor is
// unusable.
func (s *State) DesiredBundle() string {
	if !s.Anchor.Usable() {
		return ""
	}
	if a := s.FinishingOn(); a != nil {
		return s.renderKeeping(a)
	}
	if !s.Rotating() {
		return s.renderKeeping(s.Anchor.Cert)
	}
	if s.CrossSigned() && !s.BridgedRecovery() {
		// The old roots until retire-previous-anchor: the identity issuer's chain carries the
		// bridge from the new anchor to them (see CrossSigned). A bridged recovery expands it as
		// a standard rotation does, for linkerd-identity (see BridgedRecovery).
		return s.renderKeeping(append(append([]*x509.Certificate(nil), s.InFlight...), s.Previous.Cert)...)
	}
	anchors := append([]*x509.Certificate{s.Anchor.Cert}, s.InFlight...)
	return s.renderKeeping(append(anchors, s.Previous.Cert)...)
}

// renderKeeping is RenderBundle of the anchors, or the bytes the ConfigMap holds when it holds
// exactly those anchors, in that order: a bundle another writer rendered — Linkerd's chart trims
// the final newline (templates/identity.yaml) — is the desired bundle as it is. The injector
// stamps each pod with the digest of the bytes it read (linkerd.io/trust-root-sha256), which is
// what the trust-bundle convergence counts: the same anchors rewritten in other bytes would
// count every pod behind, and restart the data plane for nothing.
func (s *State) renderKeeping(anchors ...*x509.Certificate) string {
	want := RenderBundle(anchors...)
	if !s.Bundle.Found || s.Bundle.Data == want || len(s.Bundle.Certs) == 0 {
		return want
	}
	seen := map[string]bool{}
	i := 0
	for _, a := range anchors {
		if a == nil || seen[Fingerprint(a)] {
			continue
		}
		seen[Fingerprint(a)] = true
		if i == len(s.Bundle.Certs) || !s.Bundle.Certs[i].Equal(a) {
			return want
		}
		i++
	}
	if i != len(s.Bundle.Certs) {
		return want
	}
	return s.Bundle.Data
}

// Rotating reports whether a rotation is under way: the anchor differs from the previous one,
// and not merely by a renewal that kept its key and subject (see SameKey).
func (s *State) Rotating() bool {
	return s.Anchor.Usable() && s.Previous.Usable() && s.Anchor.Fingerprint() != s.Previous.Fingerprint() &&
		!SameKey(s.Anchor.Cert, s.Previous.Cert)
}

// FinishingOn returns the anchor the rotation in progress finishes on when the trust anchor
// was renewed again after retire-previous-anchor wrote it into linkerd-previous-anchor: the
// round's anchor (State.Retiring), which the previous-anchor Secret now holds, while the
// current anchor is a newer one. nil otherwise: before that step, or when the anchor was not
// renewed again (the round then finishes on the current anchor).
//
// The round goes on reducing to that anchor alone — the bundle it was reducing to, the one
// every live certificate chains to — and restarts the control plane onto it; the next round
// then starts at detect-anchor-rotation (see superseded) and is the first to write a bundle with
// the newer anchor. Reducing to the current anchor and the retired one instead, the next
// round's expanded bundle, would restart identity onto roots that hold the newer anchor before
// any data-plane pod trusts it: identity would then accept a newer-anchor issuer (cert-manager's
// own renewal is enough) while the data plane trusts only the older ones.
func (s *State) FinishingOn() *x509.Certificate {
	if s.Retiring == "" || !s.Anchor.Usable() || !s.Previous.Usable() ||
		s.Previous.Fingerprint() != s.Retiring || s.Anchor.Fingerprint() == s.Retiring {
		return nil
	}
	return s.Previous.Cert
}

// RenewedInPlace reports whether the anchor was renewed with the same key and subject as the
// previous anchor (cert-manager rotationPolicy Never): no rotation is needed, the previous
// anchor and the bundle are updated in place.
func (s *State) RenewedInPlace() bool {
	return s.Anchor.Usable() && s.Previous.Usable() && s.Anchor.Fingerprint() != s.Previous.Fingerprint() &&
		SameKey(s.Anchor.Cert, s.Previous.Cert)
}

// signedByKept reports whether c is signed by the previous anchor or an in-flight one.
func (s *State) signedByKept(c *x509.Certificate) bool {
	if s.Previous.Usable() && SignedBy(c, s.Previous.Cert) {
		return true
	}
	for _, a := range s.InFlight {
		if SignedBy(c, a) {
			return true
		}
	}
	return false
}

// issuerBridgedToKept reports whether the identity issuer leads to the previous anchor or an
// in-flight one through the chain its Secret presents: an issuer renewed onto a cross-signed
// anchor, [issuer, B] with B signed by A, after a newer anchor superseded B's rotation (B is in
// no bundle, so not in flight). It is on its way out like an issuer on A, not unrelated.
func (s *State) issuerBridgedToKept() bool {
	if !s.Issuer.Usable() {
		return false
	}
	_, _, ok := BridgePath(s.Issuer.Cert, s.Issuer.Chain, s.crossSignedRoots(), s.Now, maxSubCAs)
	return ok
}

// IssuerOnCurrentAnchor reports whether the identity issuer is signed by the current anchor.
func (s *State) IssuerOnCurrentAnchor() bool {
	return s.Anchor.Usable() && s.Issuer.Usable() && SignedBy(s.Issuer.Cert, s.Anchor.Cert)
}

// anchorProblem is a Wait decision when the anchor cannot be used, or nil. Its verdict changes
// when the anchor becomes valid, and when it expires: an observation that passes it first
// defers timedByAnchor.
func anchorProblem(s *State) *workflow.Decision {
	if !s.Anchor.Usable() {
		d := workflow.Waiting("TrustAnchorUnavailable", s.Anchor.Problem("trust anchor Secret"))
		return &d
	}
	if err := CheckAnchor(s.Anchor.Cert, s.Now); err != nil {
		if s.Now.After(s.Anchor.Cert.NotAfter) && s.Previous.Usable() && s.Previous.Fingerprint() == s.Anchor.Fingerprint() {
			if d := anchorExpiredProblem(s); d != nil {
				return d // the anchor the mesh trusts expired, not renewed: what that breaks
			}
		}
		d := workflow.Waiting("TrustAnchorInvalid", fmt.Sprintf("trust anchor Secret %s: %v", s.Anchor.Ref(), err))
		return &d
	}
	return nil
}

// timedByAnchor has *d depend on the time when the trust anchor becomes valid and when it
// expires (anchorProblem): deferred by the observations that pass anchorProblem first.
func (s *State) timedByAnchor(d *workflow.Decision) {
	if s.Anchor.Usable() {
		*d = d.RecheckBy(s.after(s.Anchor.Cert.NotBefore, s.Anchor.Cert.NotAfter.Add(time.Second)))
	}
}

// previousProblem is a Wait decision when the previous-anchor Secret is missing or unusable
// outside bootstrap, or nil. Writing the bundle then would drop the previous anchor; the
// operator recreates the Secret from the bundle (RecreatePrevious) before the steps run.
func previousProblem(s *State) *workflow.Decision {
	if s.Previous.Usable() {
		return nil
	}
	if d := s.takeoverGate(); d != nil {
		// Not recreated from the bundle: it holds anchors made by hand (RecreatePrevious).
		return d
	}
	d := workflow.Waiting("PreviousAnchorUnavailable", s.Previous.Problem("previous-anchor Secret")+
		"; the trust bundle is left as it is until it is recreated from the bundle")
	return &d
}

// droppedSigner returns the anchor of the current bundle that signs the identity issuer when
// the desired bundle does not hold it (a hand edit added it), or nil.
func droppedSigner(s *State) *x509.Certificate {
	if !s.Issuer.Usable() || SignedBy(s.Issuer.Cert, s.Anchor.Cert) || s.Rotating() && s.signedByKept(s.Issuer.Cert) {
		return nil
	}
	for _, c := range s.Bundle.Certs {
		if SignedBy(s.Issuer.Cert, c) {
			return c
		}
	}
	return nil
}
