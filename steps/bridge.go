package steps

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"strings"
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
// period at now and its path-length constraint, whose subject and key are not on the path yet,
// and whose key signed the head — depth first. The head itself must be such a CA: the proxies
// verify it as the intermediate it is. Roots are trust anchors and have no validity period, as
// in webpki. room is how many certificates the path may hold, head included: maxSubCAs for an
// issuer, one less for an anchor, which an issuer comes below (and so counts one CA below it
// for its path-length constraint, as webpki's sub_ca_count does). The path starts with head and
// ends with the certificate root signed; ok is false when there is none. Linkerd's hand-made
// PKI sets path-length constraints (the root 1, the issuer 0), which a takeover keeps trusting,
// so they count here. A CA whose keyUsage lacks keyCertSign signs nothing
// here (SignedBy is crypto/x509's CheckSignatureFrom): the rustls-webpki of linkerd2-proxy
// v2.366.0 would still take it, rustls-webpki's main branch no longer does, and finding no path
// is the safe side. TestBridgePathAgreesWithTheOracle (test/meshsim) holds this to the oracle's
// model of webpki, and TestWebpkiCorpus to rustls-webpki's own recorded verdicts.
func BridgePath(head *x509.Certificate, presented, roots []*x509.Certificate, now time.Time, room int) (path []*x509.Certificate, root *x509.Certificate, ok bool) {
	if head == nil || room < 1 || room > maxSubCAs || !bridgeIssuer(head, maxSubCAs-room, now) {
		return nil, nil, false
	}
	return bridgePath([]*x509.Certificate{head}, presented, roots, now, room)
}

// bridgeIssuer reports whether webpki takes c as an issuer with subCAs CAs between it and the
// leaf (check_issuer_independent_properties, check_basic_constraints): a CA, within its validity
// period, whose path-length constraint allows them.
func bridgeIssuer(c *x509.Certificate, subCAs int, now time.Time) bool {
	return c.IsCA && c.BasicConstraintsValid && !now.Before(c.NotBefore) && !now.After(c.NotAfter) &&
		(c.MaxPathLen < 0 || subCAs <= c.MaxPathLen)
}

func bridgePath(path, presented, roots []*x509.Certificate, now time.Time, room int) ([]*x509.Certificate, *x509.Certificate, bool) {
	head := path[len(path)-1]
	subCAs := maxSubCAs - room + len(path) // of the next certificate on the path
	for _, r := range roots {
		if bytes.Equal(r.RawSubject, head.RawIssuer) && SignedBy(head, r) {
			return path, r, true
		}
	}
	if len(path) >= room {
		return nil, nil, false
	}
	for _, c := range presented {
		if !bytes.Equal(c.RawSubject, head.RawIssuer) || onBridgePath(c, path) || !bridgeIssuer(c, subCAs, now) || !SignedBy(head, c) {
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

// A bridge is a certificate that is not self-signed in the chain an identity issuer presents
// under the cross-signed strategy: the trust anchor as cert-manager issued it, signed by the
// anchor it replaced, and the older ones cert-manager keeps in the anchor's chain after it
// (docs/cross-signed-rotation.md, "Limits"). BridgeExpiryProblem watches every one of them that
// the issuer's Secret carries, or that the anchor's Secret carries and the issuer's next renewal
// onto it will: a pod may still need each of them, in one of two ways.
//
//   - To verify. Until every pod restarted onto the reduced bundle, pods that trust only the
//     previous anchor verify leaf -> issuer -> bridges -> previous anchor. rustls-webpki checks
//     the validity of every presented certificate on the path (check_issuer_independent_properties),
//     so once one of those expires those pods reject every new chain. The bridges on that path
//     (BridgePath from the issuer, or from the anchor before the issuer switch) are these.
//   - To be issued at all. Linkerd identity clamps every workload certificate to the earliest
//     NotAfter of its issuer's chain, every certificate after the issuer included
//     (pkg/tls/ca.go findFirstExpiration), whether or not a path needs it: once any of them
//     expires, identity issues certificates that are already expired, to every pod, restarted
//     or not. Restarting does not help there; only an identity issuer whose chain no longer
//     carries it does: going back to a self-signed anchor (a Standard rotation).
//
// The anchors the pods trust (self-signed roots in ca.crt, never in the chain) are not bridges:
// webpki checks no validity on a trust anchor.

// bridge is a bridge certificate, where it is carried and whether a path needs it.
type bridge struct {
	cert *x509.Certificate
	// where names the Secret that carries it and its place in its tls.crt.
	where string
	// onPath: pods that trust only the previous anchor verify through it.
	onPath bool
}

// bridges returns the bridges the trust anchor's and the identity issuer's Secrets carry (see
// above), each once, with every place it is carried, the anchor's first.
func (s *State) bridges() []bridge {
	var out []bridge
	seen := map[string]int{}
	add := func(c *x509.Certificate, where string, onPath bool) {
		if c == nil || c.CheckSignatureFrom(c) == nil {
			return // self-signed: a root, which webpki checks no validity of
		}
		if i, ok := seen[Fingerprint(c)]; ok {
			out[i].onPath = out[i].onPath || onPath
			out[i].where += ", and " + where
			return
		}
		seen[Fingerprint(c)] = len(out)
		out = append(out, bridge{cert: c, where: where, onPath: onPath})
	}
	// The anchors the pods that have not restarted trust: before retire-previous-anchor the
	// bundle's, and the path to them is what they verify through. From that step on the
	// previous-anchor Secret holds the round's new anchor and the anchor those pods trust is in
	// no object any more: they verify through the certificate with the round's anchor's key
	// that it signed. The current anchor, when it is not self-signed, counts as on the path
	// too: those pods verify through it once the issuer is on it.
	var roots []*x509.Certificate
	if s.Retiring == "" {
		roots = s.crossSignedRoots()
	}
	path := func(src Source, room int) map[string]bool {
		on := map[string]bool{}
		if p, _, ok := BridgePath(src.Cert, src.Chain, roots, s.Now, room); ok {
			for _, c := range p {
				on[Fingerprint(c)] = true
			}
		}
		for _, c := range append([]*x509.Certificate{src.Cert}, src.Chain...) {
			if SameKey(c, s.Anchor.Cert) || s.Retiring != "" && SameKey(c, s.Previous.Cert) {
				on[Fingerprint(c)] = true
			}
		}
		return on
	}
	if s.Anchor.Usable() {
		on := path(s.Anchor, maxSubCAs-1)
		add(s.Anchor.Cert, fmt.Sprintf("trust anchor %s in Secret %s (signed by the previous anchor)", ShortFingerprint(s.Anchor.Fingerprint()), s.Anchor.Ref()), on[s.Anchor.Fingerprint()])
		for i, c := range s.Anchor.Chain {
			add(c, fmt.Sprintf("certificate %d of the trust anchor Secret %s's %s", i+2, s.Anchor.Ref(), CertificateKey), on[Fingerprint(c)])
		}
	}
	if s.Issuer.Usable() {
		on := path(s.Issuer, maxSubCAs)
		for i, c := range s.Issuer.Chain {
			add(c, fmt.Sprintf("certificate %d of the identity issuer Secret %s's %s", i+2, s.Issuer.Ref(), CertificateKey), on[Fingerprint(c)])
		}
	}
	return out
}

// BridgeExpiryProblem is what the status and `linkerd trust check` say when, in a cross-signed
// rotation whose one data-plane restart is left to the cluster's churn, a bridge (see above)
// expires before status.restartDeadline; "" otherwise. It names every such bridge, the earliest
// first, where it is carried and what its expiry breaks. The deadline must come before every
// bridge's NotAfter: the newest bridge, the anchor itself, for the pods that have not restarted
// yet; the older ones for every pod.
func BridgeExpiryProblem(s *State, deadline *v1alpha1.RestartDeadline) string {
	if deadline == nil || !s.CrossSigned() || !s.Anchor.Usable() {
		return ""
	}
	var expiring []bridge
	for _, b := range s.bridges() {
		if b.cert.NotAfter.Before(deadline.Deadline.Time) {
			expiring = append(expiring, b)
		}
	}
	if len(expiring) == 0 {
		return ""
	}
	first := expiring[0]
	for _, b := range expiring[1:] {
		if b.cert.NotAfter.Before(first.cert.NotAfter) {
			first = b
		}
	}
	var parts []string
	for _, b := range expiring {
		end := b.cert.NotAfter.UTC().Format(time.RFC3339)
		what := "linkerd-identity then issues certificates that expire with it, to every pod: restarting does not help; go back to a self-signed trust anchor " +
			"(a Standard rotation, manifests/cert-manager/linkerd-pki.yaml) whose identity issuer's chain no longer carries it before " + end
		if b.onPath {
			what = "from then on pods that still trust only the previous anchor reject every new certificate chain, and linkerd-identity issues certificates that expire with it; " +
				"restart the remaining workloads before " + end + ", or shorten spec.naturalChurnPeriod (" + deadline.ChurnPeriod.Duration.String() + ")"
		}
		name := "the bridge certificate, " + b.where
		if !b.onPath {
			name = "the older bridge certificate " + ShortFingerprint(Fingerprint(b.cert)) + ", " + b.where + ", which no pod verifies through"
		}
		parts = append(parts, fmt.Sprintf("%s, expires at %s, before status.restartDeadline %s: %s", name, end, deadline.Deadline.UTC().Format(time.RFC3339), what))
	}
	if len(parts) > 1 {
		return fmt.Sprintf("%d bridge certificates expire before status.restartDeadline, the first at %s: %s",
			len(parts), first.cert.NotAfter.UTC().Format(time.RFC3339), strings.Join(parts, "; "))
	}
	return parts[0]
}
