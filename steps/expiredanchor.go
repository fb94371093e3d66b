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
// Renewed, the rotation onto the new anchor takes the recovery's order (recovery.go): the
// standard one would restart the data plane before identity, and each proxy it restarts would
// come up without a certificate (docs/design/recovery.md, case 3).

// ReasonTrustAnchorExpired: Synced, the trust anchor itself has expired, not renewed.
const ReasonTrustAnchorExpired = "TrustAnchorExpired"

// timedByPreviousExpiry has *d depend on the time the previous anchor expires, seen the moment it
// does (anchorExpiredProblem, recoverySkip).
func (s *State) timedByPreviousExpiry(d *workflow.Decision) {
	if s.Previous.Usable() {
		*d = d.RecheckBy(s.after(s.Previous.Cert.NotAfter.Add(time.Second)))
	}
}

// anchorExpiredProblem is detect-anchor-rotation's decision when the anchor the mesh trusts has
// expired and was not renewed: what is down, what still works, and the command. nil when it has
// not expired, or when it was renewed (the rotation then starts, in the recovery's order).
func anchorExpiredProblem(s *State) *workflow.Decision {
	if !s.Previous.Usable() || s.Rotating() {
		return nil
	}
	if !s.Now.After(s.Previous.Cert.NotAfter) {
		return nil
	}
	expired := s.Previous.Cert
	d := workflow.Waiting(ReasonTrustAnchorExpired, fmt.Sprintf("trust anchor %s expired at %s: linkerd-identity refuses every certificate request and cannot restart "+
		"(it verifies its issuer against its roots, the anchor's validity included); the proxies still accept each other's certificates "+
		"(rustls-webpki ignores a trust anchor's validity) until each expires, at most the workload certificate lifetime (24h by default) after identity stopped signing: "+
		"renew the trust anchor now, cmctl renew -n %s %s; the rotation onto the renewed anchor recovers in the order of docs/design/recovery.md (case 3)",
		ShortFingerprint(Fingerprint(expired)), expired.NotAfter.UTC().Format(time.RFC3339), s.Anchor.Namespace, s.Anchor.Name))
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
