package steps

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// maxSubCAs is rustls-webpki's MAX_SUB_CA_COUNT (src/verify_cert.rs, PartialPath::push): at most
// six certificates between a leaf and its trust anchor, the identity issuer included.
const maxSubCAs = 6

// BridgePath returns a path from head — an identity issuer, or a trust anchor as the
// intermediate it becomes in the issuer's chain — to one of roots through presented, the
// certificates sent after it, as linkerd2-proxy's verifier finds one (rustls-webpki
// build_chain_inner, docs/design/fewer-restarts.md "How rustls-webpki builds the path"): the
// roots named as the head's issuer first, any whose key signed it ending the path; then each
// presented certificate so named, in the order presented, that is a CA within its validity
// period at now, whose subject and key are not on the path yet, and whose key signed the head —
// depth first. Roots are trust anchors and have no validity period, as in webpki. room is how
// many certificates the path may hold, head included: maxSubCAs for an issuer, one less for an
// anchor, which an issuer comes below. The path starts with head and ends with the certificate
// root signed; ok is false when there is none. Path-length constraints are not looked at: no
// Linkerd PKI cert-manager issues sets one.
func BridgePath(head *x509.Certificate, presented, roots []*x509.Certificate, now time.Time, room int) (path []*x509.Certificate, root *x509.Certificate, ok bool) {
	if head == nil || room < 1 {
		return nil, nil, false
	}
	return bridgePath([]*x509.Certificate{head}, presented, roots, now, room)
}

func bridgePath(path, presented, roots []*x509.Certificate, now time.Time, room int) ([]*x509.Certificate, *x509.Certificate, bool) {
	head := path[len(path)-1]
	for _, r := range roots {
		if bytes.Equal(r.RawSubject, head.RawIssuer) && SignedBy(head, r) {
			return path, r, true
		}
	}
	if len(path) >= room {
		return nil, nil, false
	}
	for _, c := range presented {
		if !bytes.Equal(c.RawSubject, head.RawIssuer) || onBridgePath(c, path) || !c.IsCA || !c.BasicConstraintsValid ||
			now.Before(c.NotBefore) || now.After(c.NotAfter) || !SignedBy(head, c) {
			continue
		}
		if p, r, ok := bridgePath(append(path[:len(path):len(path)], c), presented, roots, now, room); ok {
			return p, r, true
		}
	}
	return nil, nil, false
}

// onBridgePath is webpki's loop check: a certificate with the subject and key of one already on
// the path is not tried again (RFC 4158 section 5.2).
func onBridgePath(c *x509.Certificate, path []*x509.Certificate) bool {
	for _, p := range path {
		if SameKey(p, c) {
			return true
		}
	}
	return false
}

// crossSignedRoots are the anchors every meshed pod trusts in a cross-signed rotation before
// retire-previous-anchor: the bundle it keeps (DesiredBundle), the previous anchor and any
// in-flight one, plus extra ones about to be kept.
func (s *State) crossSignedRoots(extra ...*x509.Certificate) []*x509.Certificate {
	roots := append(append([]*x509.Certificate(nil), extra...), s.InFlight...)
	if s.Previous.Usable() {
		roots = append(roots, s.Previous.Cert)
	}
	return roots
}

// anchorBridged reports whether the trust anchor, with the certificates its Secret carries
// after it, has a path to one of roots as the proxies verify it (BridgePath): cert-manager's CA
// issuer copies those certificates, and the anchor itself when it is not self-signed, into the
// chain of every identity issuer it signs, so they are what the issuer renewed onto the anchor
// will present. A plan's stand-in anchor is taken to be bridged (StandInCrossSigned).
func (s *State) anchorBridged(roots []*x509.Certificate) bool {
	if s.StandInCrossSigned {
		return true
	}
	if !s.Anchor.Usable() {
		return false
	}
	_, _, ok := BridgePath(s.Anchor.Cert, s.Anchor.Chain, roots, s.Now, maxSubCAs-1)
	return ok
}

// issuerBridgeProblem is what wait-for-identity-issuer says in a cross-signed rotation when the
// identity issuer, signed by the new anchor, has no path through the chain its Secret presents
// to the anchors every pod trusts (crossSignedRoots); "" when it has. Identity hands that chain
// to every proxy after its leaf: pods that trust only those anchors would reject every
// certificate it signs, and linkerd-identity, started on them, does not load the issuer
// (IssuerUpdateSkipped) and, restarted onto them by the next step, would not start.
func issuerBridgeProblem(s *State) string {
	if !s.CrossSigned() || s.StandInCrossSigned || !s.Issuer.Usable() {
		return ""
	}
	roots := s.crossSignedRoots()
	if len(roots) == 0 {
		return ""
	}
	if _, _, ok := BridgePath(s.Issuer.Cert, s.Issuer.Chain, roots, s.Now, maxSubCAs); ok {
		return ""
	}
	how := fmt.Sprintf("re-issue it from the CA issuer over Secret %s, whose certificates (%s) then follow it", s.Anchor.Ref(), chainFingerprints(s.Anchor))
	if !s.anchorBridged(roots) {
		how = fmt.Sprintf("the trust anchor in Secret %s does not lead to them either (%s): renew it from the CA issuer over its own Secret (manifests/cert-manager/linkerd-pki-cross-signed.yaml)", s.Anchor.Ref(), chainFingerprints(s.Anchor))
	}
	return fmt.Sprintf("spec.strategy CrossSigned: the identity issuer %s in Secret %s presents the chain %s, which leads to none of the anchors every meshed pod trusts (%s): "+
		"pods that trust only them would reject every certificate it signs, and linkerd-identity would not load it; %s",
		ShortFingerprint(s.Issuer.Fingerprint()), s.Issuer.Ref(), chainFingerprints(s.Issuer), fingerprints(roots), how)
}

// chainFingerprints names the certificates of a Secret's tls.crt, in order.
func chainFingerprints(src Source) string {
	return fingerprints(append([]*x509.Certificate{src.Cert}, src.Chain...))
}

// ReasonIssuerChainNotBridged is wait-for-identity-issuer's reason for issuerBridgeProblem.
const ReasonIssuerChainNotBridged = "IssuerChainNotBridged"

// BridgeExpiryProblem is what the status and `linkerd trust check` say when, in a cross-signed
// rotation whose one data-plane restart is left to the cluster's churn, the bridge expires
// before status.restartDeadline; "" otherwise. The bridge is the new trust anchor B as
// cert-manager issued it: B's subject and key signed by the previous anchor A, the first
// certificate of the anchor's Secret and an intermediate of every identity issuer's chain. Until
// every pod restarted onto the reduced bundle, pods that trust only A verify
// leaf -> issuer -> B -> A: rustls-webpki checks the validity of every presented certificate
// (check_issuer_independent_properties), so once B expires those pods reject every new chain,
// and Linkerd identity clamps each workload certificate to the earliest expiry in its issuer's
// chain (pkg/tls/ca.go findFirstExpiration), B's included (docs/design/fewer-restarts.md). The
// deadline must therefore come before the bridge's NotAfter.
func BridgeExpiryProblem(s *State, deadline *v1alpha1.RestartDeadline) string {
	if deadline == nil || !s.CrossSigned() || !s.Anchor.Usable() {
		return ""
	}
	bridge := s.Anchor.Cert
	if bridge.CheckSignatureFrom(bridge) == nil {
		return "" // a self-signed anchor bridges nothing
	}
	if !bridge.NotAfter.Before(deadline.Deadline.Time) {
		return ""
	}
	return fmt.Sprintf("the bridge certificate, trust anchor %s in Secret %s (signed by the previous anchor), expires at %s, before status.restartDeadline %s: "+
		"from then on pods that still trust only the previous anchor reject every new certificate chain, and linkerd-identity issues certificates that expire with it; "+
		"restart the remaining workloads before %s, or shorten spec.naturalChurnPeriod (%s)",
		ShortFingerprint(s.Anchor.Fingerprint()), s.Anchor.Ref(), bridge.NotAfter.UTC().Format(time.RFC3339),
		deadline.Deadline.UTC().Format(time.RFC3339), bridge.NotAfter.UTC().Format(time.RFC3339), deadline.ChurnPeriod.Duration)
}
