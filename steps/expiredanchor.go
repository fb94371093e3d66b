package steps

import (
	"crypto/x509"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// --- an expired trust anchor ---------------------------------------------------------------------
//
// Linkerd's identity verifies its issuer against its trust roots with Go's x509.Verify — at
// start, at each reload and at every certificate request (pkg/identity/service.go,
// ensureIssuerStillValid) — which checks every certificate's validity, the root's included: once
// the anchor the issuer chains to has expired, identity refuses every request and a restarted
// identity does not start. The proxies are the other way round: rustls-webpki never looks at a
// trust anchor's validity (corpus entry expired-anchor, test/meshsim/testdata), so a leaf still
// valid still verifies at every peer, and the mesh goes on working until each leaf expires — up
// to the workload certificate lifetime (24h by default) after identity stopped signing.
//
// The standard rotation cannot be the way out (docs/design/recovery.md, case 3): it restarts the
// data plane onto the expanded bundle before it restarts identity, so every proxy it restarts
// comes up without a certificate — identity, on its old roots, cannot load an issuer from the
// new anchor and cannot sign with the old one — and a pod that still had mTLS loses it at once
// instead of at its leaf's expiry. The order that loses least restarts identity first, onto the
// new issuer and the bundle [new, expired], then the whole data plane. Until that order is built
// as steps, the operator refuses to start the standard one over an expired anchor, says so, and
// goes on once identity runs on an issuer of the new anchor — that is, once the recovery's first
// moves are done — from where the standard order is safe again.

// ReasonTrustAnchorExpired: Synced, the trust anchor itself has expired, not renewed.
const ReasonTrustAnchorExpired = "TrustAnchorExpired"

// ReasonPreviousAnchorExpired: the anchor was renewed after the one the mesh trusts expired;
// the rotation waits for identity to run on an issuer of the new anchor.
const ReasonPreviousAnchorExpired = "PreviousAnchorExpired"

// anchorExpiredProblem is detect-anchor-rotation's decision when the anchor the mesh trusts has
// expired: not renewed (Synced), or renewed while identity still signs — or rather, cannot sign —
// under the expired one. nil when it has not expired, or when identity already runs on an issuer
// of the renewed anchor.
func anchorExpiredProblem(s *State) *workflow.Decision {
	if !s.Previous.Usable() {
		return nil
	}
	s.RecheckAt(s.Previous.Cert.NotAfter.Add(time.Second)) // seen the moment it expires
	if !s.Now.After(s.Previous.Cert.NotAfter) {
		return nil
	}
	expired := s.Previous.Cert
	what := fmt.Sprintf("trust anchor %s expired at %s: linkerd-identity refuses every certificate request and cannot restart "+
		"(it verifies its issuer against its roots, the anchor's validity included); the proxies still accept each other's certificates "+
		"(rustls-webpki ignores a trust anchor's validity) until each expires, at most the workload certificate lifetime (24h by default) after identity stopped signing",
		ShortFingerprint(Fingerprint(expired)), expired.NotAfter.UTC().Format(time.RFC3339))
	if !s.Rotating() {
		d := workflow.Waiting(ReasonTrustAnchorExpired, fmt.Sprintf("%s: renew the trust anchor now, cmctl renew -n %s %s, then see docs/troubleshooting.md (An expired trust anchor)",
			what, s.Anchor.Namespace, s.Anchor.Name))
		return &d
	}
	if identityOnRenewedAnchor(s) {
		return nil
	}
	d := workflow.Waiting(ReasonPreviousAnchorExpired, fmt.Sprintf(
		"%s. The rotation onto %s does not start: it would restart the proxies before linkerd-identity, and each would come up without a certificate. "+
			"First renew the identity issuer from the new anchor (%s), write the trust bundle [new, expired] and restart linkerd-identity (docs/troubleshooting.md, An expired trust anchor): "+
			"the rotation goes on once every linkerd-identity pod started after the issuer in Secret %s was signed by the new anchor",
		what, ShortFingerprint(s.Anchor.Fingerprint()), renewIssuerCommand(s), s.Issuer.Ref()))
	return &d
}

// identityOnRenewedAnchor reports whether linkerd-identity runs on an issuer of the renewed
// anchor: the issuer in the Secret is signed by it, the trust bundle holds it, and every running
// identity pod started after that issuer was issued. A Linkerd identity that starts verifies its
// issuer against its roots and exits when it does not chain, so a running pod that started with
// that issuer has the new anchor among its roots.
func identityOnRenewedAnchor(s *State) bool {
	if !s.Issuer.Usable() || !SignedBy(s.Issuer.Cert, s.Anchor.Cert) || !bundleHolds(s.Bundle, s.Anchor.Cert) {
		return false
	}
	d := s.ControlPlane[s.Config.IdentityDeployment]
	running := 0
	for _, p := range d.Members {
		if p.Terminating {
			continue
		}
		if p.Started.Before(s.Issuer.Cert.NotBefore) {
			return false
		}
		running++
	}
	return running > 0
}

func bundleHolds(b Bundle, c *x509.Certificate) bool {
	for _, have := range b.Certs {
		if have.Equal(c) {
			return true
		}
	}
	return false
}
