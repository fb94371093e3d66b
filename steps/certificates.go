package steps

import (
	"bytes"
	"crypto/x509"
)

// Workload certificates converge on a trust anchor's path, not on one issuer's fingerprint.
// cert-manager renews the identity issuer on its own schedule (Linkerd's documented 48h
// duration, 25h renewBefore: about daily), and every renewal under the new anchor is as good as
// the one before: a pod presenting a certificate from the previous new-anchor issuer is trusted
// by every pod that trusts the new anchor, which after the reduction is every pod. Counting
// only the issuer in the Secret now would reset the convergence at each such renewal — every
// pod behind again, the control plane's pods included, whose restart step has already passed —
// and the rotation would wait for the proxies' own refresh (up to a day) or a second round of
// restarts.

// CertificateRoot is the certificate a meshed pod's live chain must verify to for the pod to
// count in status.workloadCertificates: the trust anchor that signs the active identity issuer.
// Once the issuer is renewed onto the new anchor, that is the new anchor, whichever issuer
// under it signed the pod's certificate; before, it is the anchor the current issuer is on (the
// previous or an in-flight one), so the counts say how many pods are on the active issuer's
// path at every phase. When no known anchor signs the issuer (an issuer from an unrelated CA,
// which the steps refuse to go on with), it is the issuer itself. nil when the issuer Secret is
// unusable.
func (s *State) CertificateRoot() *x509.Certificate {
	if !s.Issuer.Usable() {
		return nil
	}
	candidates := []*x509.Certificate{}
	if s.Anchor.Usable() {
		candidates = append(candidates, s.Anchor.Cert)
	}
	candidates = append(candidates, s.InFlight...)
	if s.Previous.Usable() {
		candidates = append(candidates, s.Previous.Cert)
	}
	candidates = append(candidates, s.Bundle.Certs...)
	for _, a := range candidates {
		if bytes.Equal(a.Raw, s.Issuer.Cert.Raw) || SignedBy(s.Issuer.Cert, a) {
			return a
		}
	}
	return s.Issuer.Cert
}

// ChainsTo reports whether a certificate chain, as a proxy presents it (its first certificate
// the leaf, or the certificate that signed the leaf, then the others in any order), verifies to
// root by signatures: the first certificate is root or is signed by root, or is signed by
// another certificate of the chain for which that holds, and so on up. A chain that verifies
// only to another anchor — the old one — does not. Validity periods are not checked: a proxy
// refreshes its certificate long before it expires, and an issuer or anchor past its NotAfter
// is reported by the steps that read it.
func ChainsTo(chain []*x509.Certificate, root *x509.Certificate) bool {
	if len(chain) == 0 || root == nil {
		return false
	}
	used := make([]bool, len(chain))
	cur := chain[0]
	used[0] = true
	for {
		if bytes.Equal(cur.Raw, root.Raw) || SignedBy(cur, root) {
			return true
		}
		next := -1
		for i, c := range chain {
			if !used[i] && SignedBy(cur, c) {
				next = i
				break
			}
		}
		if next < 0 {
			return false
		}
		used[next], cur = true, chain[next]
	}
}
