package meshsim

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"time"
)

// This file verifies a peer's chain the way linkerd2-proxy does, not the way Go's crypto/x509
// does. The proxy (linkerd/linkerd2-proxy, linkerd/meshtls/src/creds/verify.rs AnySanVerifier
// and creds/store.rs server_config) hands the peer's whole TLS Certificate message — the leaf
// and every certificate after it, in the order sent — to rustls 0.23
// (verify_server_cert_signed_by_trust_anchor, WebPkiClientVerifier), which calls
// rustls-webpki 0.103 EndEntityCert::verify_for_usage with the proxy's trust roots. Path
// building is webpki's src/verify_cert.rs ChainOptions::build_chain_inner (v/0.103.13, commit
// 2879b2ce7a476181ac3050f73fe0835f04728e86), which this file follows step by step:
//
//   - At each certificate of the path (the head), check_issuer_independent_properties: its
//     validity period (at whole seconds, not_after inclusive), its basicConstraints (an end
//     entity must not be a CA; an issuer must be one, within its pathLenConstraint), and its
//     extendedKeyUsage (when present it must name the required purpose exactly; anyEKU does not
//     count).
//   - Then every trust anchor whose subject equals the head's issuer, byte for byte, in the
//     order the roots were loaded: the whole path is verified top down from the anchor's key
//     (check_signed_chain). The first that verifies ends the search.
//   - Only then every presented certificate whose subject equals the head's issuer, in the
//     order presented, depth first, skipping one whose (subject, SPKI) is already on the path
//     (RFC 4158 §5.2 loop prevention), at most 6 certificates between leaf and anchor.
//   - A failure is "non-fatal" and the search goes on, except exhausting the budget: 100
//     signature checks, 200,000 path-building calls. Once every candidate failed, the most
//     specific of the failures is reported (loop_while_non_fatal_error, Error::most_specific
//     and rank in src/error.rs: the first of the highest rank).
//   - A trust anchor is a subject, a public key and optional name constraints
//     (anchor_from_trusted_cert): its validity period, basicConstraints, keyUsage and
//     extendedKeyUsage are never looked at. An expired root still anchors a path.
//
// Where Go's x509.Verify differs (Go 1.26 crypto/x509 verify.go buildChains, cert_pool.go
// findPotentialParents): Go checks every root's validity period and, for a v3 root, that it is
// a CA allowed to sign certificates; it orders candidate parents by authority/subject key ID
// before anything else, and roots before intermediates only among equals; it checks
// extendedKeyUsage across the whole chain, roots included, and lets anyExtendedKeyUsage
// match; it has no depth limit; it accepts signature algorithms the proxy does not. For the
// chains Linkerd's identity hands out (an ECDSA issuer, optionally followed by more CA
// certificates, under ECDSA or RSA roots that have not expired) both accept and reject the
// same chains; they part on an expired root (the proxy still trusts it) and on the order of
// the candidates tried, which only matters when the budget runs out.
//
// Held to rustls-webpki itself: testdata/webpki-corpus.json records the real verifier's
// verdicts on every chain shape the rotations make and on hostile ones, which
// TestWebpkiCorpus replays here; with WEBPKI_VERIFIER_BIN set the oracle asks the real one and
// runs this beside it (oraclereal.go).
//
// Not modelled: name constraints (no Linkerd PKI here carries them; a certificate or root that
// does is refused, so a test cannot pass by accident) and revocation (the proxy checks none).

// webpkiUsage is the purpose a verification requires of every certificate below the anchor:
// server auth when the proxy is the client (AnySanVerifier, KeyUsage::server_auth), client
// auth when it is the server (WebPkiClientVerifier, KeyUsage::client_auth).
type webpkiUsage = x509.ExtKeyUsage

// webpki budget and depth limits (verify_cert.rs Budget::default, MAX_SUB_CA_COUNT).
const (
	webpkiMaxSignatures = 100
	webpkiMaxBuildCalls = 200_000
	webpkiMaxSubCAs     = 6
)

var (
	errUnknownIssuer       = errors.New("UnknownIssuer: no trust anchor or presented certificate issued it")
	errBudgetExceeded      = errors.New("MaximumSignatureChecksExceeded or MaximumPathBuildCallsExceeded")
	oidExtKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidExtNameConstraints  = asn1.ObjectIdentifier{2, 5, 29, 30}
	errNameConstraintsUsed = errors.New("name constraints are not modelled by the oracle")
)

// webpkiLeaf is the start of a path. The oracle verifies a chain class — the certificates a
// group of pods present above their leaves — once for all of them, so the leaf may be known
// only by its issuer name and the keys that verify its signature (signedBy); cert is set when
// the leaf itself is at hand.
type webpkiLeaf struct {
	cert     *x509.Certificate
	issuer   []byte                       // the leaf's raw issuer name
	signedBy func(*x509.Certificate) bool // whether this certificate's key verifies the leaf
}

// webpkiPath is one verification: the anchors, the presented certificates, the time and the
// purpose, with the budget it spends.
type webpkiPath struct {
	anchors    []*x509.Certificate
	presented  []*x509.Certificate
	now        time.Time
	usage      webpkiUsage
	leaf       webpkiLeaf
	signatures int
	calls      int
}

// webpkiVerify reports whether leaf has a path to one of anchors through presented (the
// certificates sent after the leaf, in order), at now, for usage.
func webpkiVerify(leaf webpkiLeaf, presented, anchors []*x509.Certificate, now time.Time, usage webpkiUsage) error {
	v := &webpkiPath{anchors: anchors, presented: presented, now: now.Truncate(time.Second), usage: usage, leaf: leaf}
	if leaf.cert != nil {
		if err := v.checkCert(leaf.cert, false, 0); err != nil {
			return fmt.Errorf("leaf: %w", err)
		}
	}
	return v.build(nil, 0)
}

// build is build_chain_inner: path holds the certificates above the leaf, the head last.
func (v *webpkiPath) build(path []*x509.Certificate, subCAs int) error {
	issuer := v.leaf.issuer
	if len(path) > 0 {
		head := path[len(path)-1]
		if err := v.checkCert(head, true, subCAs); err != nil {
			return err
		}
		issuer = head.RawIssuer
	}
	err := errUnknownIssuer
	for _, a := range v.anchors {
		if !bytes.Equal(a.RawSubject, issuer) {
			continue
		}
		e := v.checkSignedChain(path, a)
		if e == nil {
			return nil
		}
		if e == errBudgetExceeded {
			return e
		}
		err = mostSpecific(err, e)
	}
	for _, c := range v.presented {
		if !bytes.Equal(c.RawSubject, issuer) || v.onPath(c, path) {
			continue
		}
		next := subCAs
		if len(path) > 0 {
			next++
		}
		if v.calls++; v.calls > webpkiMaxBuildCalls {
			return errBudgetExceeded
		}
		if len(path) >= webpkiMaxSubCAs {
			err = mostSpecific(err, errors.New("MaximumPathDepthExceeded"))
			continue
		}
		e := v.build(append(path[:len(path):len(path)], c), next)
		if e == nil || e == errBudgetExceeded {
			return e
		}
		err = mostSpecific(err, e)
	}
	return err
}

// mostSpecific is Error::most_specific: the new failure replaces the one kept only when it
// ranks higher.
func mostSpecific(kept, failure error) error {
	if webpkiRank(failure) > webpkiRank(kept) {
		return failure
	}
	return kept
}

// webpkiRank is Error::rank (rustls-webpki 0.103.13 src/error.rs) for the failures the model
// reports; UnknownIssuer and the budgets rank lowest.
func webpkiRank(err error) int {
	switch modelKind(err) {
	case "CertNotValidYet", "CertExpired":
		return 290
	case "InvalidSignatureForPublicKey":
		return 260
	case "EmptyEkuExtension":
		return 245
	case "RequiredEkuNotFound":
		return 240
	case "NameConstraintViolation":
		return 230
	case "PathLenConstraintViolated":
		return 220
	case "CaUsedAsEndEntity", "EndEntityUsedAsCa":
		return 210
	case "InvalidCertValidity":
		return 190
	case "UnsupportedSignatureAlgorithmForPublicKey":
		return 150
	case "UnsupportedSignatureAlgorithm":
		return 140
	case "MaximumPathDepthExceeded":
		return 61
	}
	return 0
}

// onPath is the loop check: a candidate with the (subject, SPKI) of a certificate already on
// the path, the leaf included, is skipped. A leaf known only by its issuer is left out of the
// comparison: no Linkerd chain presents a certificate with its own leaf's subject and key.
func (v *webpkiPath) onPath(c *x509.Certificate, path []*x509.Certificate) bool {
	if v.leaf.cert != nil {
		path = append([]*x509.Certificate{v.leaf.cert}, path...)
	}
	for _, p := range path {
		if bytes.Equal(p.RawSubject, c.RawSubject) && bytes.Equal(p.RawSubjectPublicKeyInfo, c.RawSubjectPublicKeyInfo) {
			return true
		}
	}
	return false
}

// checkSignedChain verifies the path's signatures from the anchor's key down to the leaf, each
// one spending the budget, as check_signed_chain does; the anchor's name constraints would be
// checked next (refused here, see above).
func (v *webpkiPath) checkSignedChain(path []*x509.Certificate, anchor *x509.Certificate) error {
	if hasExtension(anchor, oidExtNameConstraints) {
		return errNameConstraintsUsed
	}
	signer := anchor
	for i := len(path) - 1; i >= 0; i-- {
		if v.signatures++; v.signatures > webpkiMaxSignatures {
			return errBudgetExceeded
		}
		if err := webpkiSignature(path[i], signer); err != nil {
			return err
		}
		signer = path[i]
	}
	if v.signatures++; v.signatures > webpkiMaxSignatures {
		return errBudgetExceeded
	}
	if v.leaf.cert != nil {
		return webpkiSignature(v.leaf.cert, signer)
	}
	if !v.leaf.signedBy(signer) {
		return errors.New("InvalidSignatureForPublicKey: the leaf's signature does not verify with the key above it")
	}
	return nil
}

// checkCert is check_issuer_independent_properties.
func (v *webpkiPath) checkCert(c *x509.Certificate, issuer bool, subCAs int) error {
	switch {
	case c.NotBefore.After(c.NotAfter):
		return fmt.Errorf("InvalidCertValidity: %s", c.Subject)
	case v.now.Before(c.NotBefore):
		return fmt.Errorf("CertNotValidYet: %s is not valid before %s", c.Subject, c.NotBefore.Format(time.RFC3339))
	case v.now.After(c.NotAfter):
		return fmt.Errorf("CertExpired: %s expired at %s", c.Subject, c.NotAfter.Format(time.RFC3339))
	case !issuer && c.BasicConstraintsValid && c.IsCA:
		return fmt.Errorf("CaUsedAsEndEntity: %s", c.Subject)
	case issuer && !(c.BasicConstraintsValid && c.IsCA):
		return fmt.Errorf("EndEntityUsedAsCa: %s", c.Subject)
	case issuer && c.MaxPathLen >= 0 && subCAs > c.MaxPathLen:
		return fmt.Errorf("PathLenConstraintViolated: %s", c.Subject)
	case hasExtension(c, oidExtNameConstraints):
		return errNameConstraintsUsed
	}
	if !hasExtension(c, oidExtKeyUsage) {
		return nil
	}
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return fmt.Errorf("EmptyEkuExtension: %s", c.Subject)
	}
	for _, u := range c.ExtKeyUsage {
		if u == v.usage {
			return nil
		}
	}
	return fmt.Errorf("RequiredEkuNotFound: %s lacks extended key usage %d", c.Subject, v.usage)
}

func hasExtension(c *x509.Certificate, oid asn1.ObjectIdentifier) bool {
	for _, e := range c.Extensions {
		if e.Id.Equal(oid) {
			return true
		}
	}
	return false
}

// webpkiSignature verifies child's signature with signer's public key alone — webpki never
// looks at the signer's basicConstraints or keyUsage here — over the algorithms the proxy
// accepts (linkerd/rustls/src/crypto.rs SUPPORTED_SIG_ALGS: ECDSA P-256/P-384/P-521 with
// SHA-256/384/512, Ed25519, RSA PKCS#1 2048–8192 bits with SHA-256/384/512; no RSA-PSS).
func webpkiSignature(child, signer *x509.Certificate) error {
	if err := webpkiSupported(child.SignatureAlgorithm, signer); err != nil {
		return err
	}
	if err := signer.CheckSignature(child.SignatureAlgorithm, child.RawTBSCertificate, child.Signature); err != nil {
		return fmt.Errorf("InvalidSignatureForPublicKey: %s is not signed by the key of %s", child.Subject, signer.Subject)
	}
	return nil
}

func webpkiSupported(alg x509.SignatureAlgorithm, signer *x509.Certificate) error {
	switch pub := signer.PublicKey.(type) {
	case *ecdsa.PublicKey:
		switch pub.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return errors.New("UnsupportedSignatureAlgorithmForPublicKey: ECDSA curve")
		}
		switch alg {
		case x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512:
			return nil
		}
	case ed25519.PublicKey:
		if alg == x509.PureEd25519 {
			return nil
		}
	case *rsa.PublicKey:
		if bits := pub.N.BitLen(); bits < 2048 || bits > 8192 {
			return fmt.Errorf("UnsupportedSignatureAlgorithmForPublicKey: RSA key of %d bits", bits)
		}
		switch alg {
		case x509.SHA256WithRSA, x509.SHA384WithRSA, x509.SHA512WithRSA:
			return nil
		}
	}
	return fmt.Errorf("UnsupportedSignatureAlgorithm: %s", alg)
}

// webpkiEndEntityDefect is what webpki refuses in a leaf itself, apart from its validity
// period (which the oracle follows over time): a CA certificate, or an extendedKeyUsage
// without server auth or client auth (a proxy's certificate serves both directions). "" when
// none.
func webpkiEndEntityDefect(leaf *x509.Certificate) string {
	v := &webpkiPath{now: leaf.NotBefore.Truncate(time.Second)}
	for _, u := range []webpkiUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		v.usage = u
		if err := v.checkCert(leaf, false, 0); err != nil {
			return err.Error()
		}
	}
	return ""
}

// webpkiBothWays verifies for both purposes: a proxy is the server of some connections and
// the client of others.
func webpkiBothWays(leaf webpkiLeaf, presented, anchors []*x509.Certificate, now time.Time) error {
	for _, u := range []webpkiUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := webpkiVerify(leaf, presented, anchors, now, u); err != nil {
			return err
		}
	}
	return nil
}
