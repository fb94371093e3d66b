package meshsim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Fingerprint is the lowercase hex SHA-256 of a certificate's DER bytes, the form the operator and
// the ground-truth API use to name certificates.
//
// It and ParseCertificates stay the simulator's own, where the bed's PKI (test/pki) uses the
// operator's (steps): the simulator's identity, proxies and oracle judge what the product did,
// and none of them runs the product's code, so a mistake in it cannot hide behind a shared one.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// BundleSHA256 is the value of the linkerd.io/trust-root-sha256 annotation: the lowercase hex
// SHA-256 of the exact bundle bytes, no trimming (linkerd-contracts.md).
func BundleSHA256(bundle string) string {
	sum := sha256.Sum256([]byte(bundle))
	return hex.EncodeToString(sum[:])
}

// ParseCertificates decodes every CERTIFICATE block of a PEM text, in order. Non-certificate
// blocks are skipped; a malformed certificate is an error, as it is for Linkerd.
func ParseCertificates(pemText []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := pemText
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// parsePrivateKey decodes the first private key of a PEM text (SEC1, PKCS#8 or PKCS#1), as
// linkerd2 pkg/tls DecodePEMKey accepts.
func parsePrivateKey(pemText []byte) (crypto.Signer, error) {
	rest := pemText
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no private key found")
		}
		switch block.Type {
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(block.Bytes)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("unsupported PKCS#8 key type %T", k)
			}
			return s, nil
		}
	}
}

// keyMatches reports whether a private key belongs to a certificate.
func keyMatches(key crypto.Signer, c *x509.Certificate) bool {
	switch pub := key.Public().(type) {
	case *ecdsa.PublicKey:
		return pub.Equal(c.PublicKey)
	case *rsa.PublicKey:
		return pub.Equal(c.PublicKey)
	default:
		return false
	}
}

// rootSet is a proxy's (or identity's) parsed trust roots. Its key names the SET of roots, so
// that two proxies whose bundles differ only in order or duplicates share an equivalence class.
type rootSet struct {
	key          string
	certs        []*x509.Certificate
	fingerprints []string // sorted, distinct
	pool         *x509.CertPool
}

func newRootSet(certs []*x509.Certificate) *rootSet {
	seen := map[string]bool{}
	rs := &rootSet{pool: x509.NewCertPool()}
	for _, c := range certs {
		fp := Fingerprint(c)
		if seen[fp] {
			continue
		}
		seen[fp] = true
		rs.certs = append(rs.certs, c)
		rs.fingerprints = append(rs.fingerprints, fp)
		rs.pool.AddCert(c)
	}
	sort.Strings(rs.fingerprints)
	rs.key = strings.Join(rs.fingerprints, ",")
	return rs
}

// parseRoots parses a trust bundle the way the proxy does at start: at least one certificate.
func parseRoots(bundle string) (*rootSet, error) {
	certs, err := ParseCertificates([]byte(bundle))
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("no trust anchors found")
	}
	return newRootSet(certs), nil
}

// verifyChain verifies chain[0] with chain[1:] as the presented intermediates against roots at
// now, the way the proxy's verifier does (webpki.go), for both TLS directions (a proxy is a
// server to some peers and a client to others). name, when set, is the identity required of
// chain[0]: the proxy checks it against the leaf's DNS and URI SANs itself
// (linkerd/meshtls/verifier verify_id), not as a host name.
func verifyChain(chain []*x509.Certificate, roots *rootSet, name string, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("empty certificate chain")
	}
	leaf := chain[0]
	if err := webpkiBothWays(webpkiLeaf{cert: leaf, issuer: leaf.RawIssuer}, chain[1:], roots.certs, now); err != nil {
		return err
	}
	if name == "" {
		return nil
	}
	for _, n := range leaf.DNSNames {
		if n == name {
			return nil
		}
	}
	for _, u := range leaf.URIs {
		if u.String() == name {
			return nil
		}
	}
	return fmt.Errorf("certificate does not match TLS identity %s", name)
}

// newLeafKey makes a proxy's key pair. linkerd2-proxy generates one ECDSA P-256 key at start-up
// and sends the same CSR at every refresh.
func newLeafKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

var serialLimit = new(big.Int).Lsh(big.NewInt(1), 127)

// signLeaf issues a workload certificate like linkerd2 pkg/tls CA.IssueEndEntityCrt: validity
// [now-skew, now+lifetime+skew] clamped to the first expiry in the issuer's chain, SAN DNS = the
// identity, server+client auth.
func signLeaf(issuer *issuerCreds, identity string, pub crypto.PublicKey, now time.Time, lifetime, skew time.Duration) ([]*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, serialLimit)
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	notAfter := now.Add(lifetime).Add(skew)
	if issuer.firstExpiry.Before(notAfter) {
		notAfter = issuer.firstExpiry
	}
	tmpl := &x509.Certificate{
		SerialNumber:       serial,
		Subject:            pkix.Name{CommonName: identity},
		DNSNames:           []string{identity},
		NotBefore:          now.Add(-skew),
		NotAfter:           notAfter,
		SignatureAlgorithm: x509.ECDSAWithSHA256,
		KeyUsage:           x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:        []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer.chain[0], pub, issuer.key)
	if err != nil {
		return nil, fmt.Errorf("signing certificate for %s: %w", identity, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate for %s: %w", identity, err)
	}
	// The response carries the issuer's chain as intermediates, leaf first (pkg/identity Certify).
	return append([]*x509.Certificate{leaf}, issuer.chain...), nil
}

// issuerCreds is a loaded identity issuer: its certificate chain as read from tls.crt (issuer
// first) and its key.
type issuerCreds struct {
	chain       []*x509.Certificate
	key         crypto.Signer
	firstExpiry time.Time
	// verifiedUntil is when the last verification against the roots stops holding (Unix
	// nanoseconds; see verifyIssuerNow).
	verifiedUntil atomic.Int64
}

// verifyIssuerNow is pkg/tls Crt.Verify of a loaded issuer at now, as identity's Certify makes it
// (pkg/identity/service.go ensureIssuerStillValid). The result of a verification holds, for the
// same certificates, until the first NotAfter of the longest-lived chain it found: until then
// only the time is compared, so that certifying a large mesh costs no signature checks.
func verifyIssuerNow(issuer *issuerCreds, roots *x509.CertPool, now time.Time) error {
	if now.UnixNano() < issuer.verifiedUntil.Load() {
		return nil
	}
	inter := x509.NewCertPool()
	for _, c := range issuer.chain[1:] {
		inter.AddCert(c)
	}
	chains, err := issuer.chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now})
	if err != nil {
		return err
	}
	var until time.Time
	for _, chain := range chains {
		first := chain[0].NotAfter
		for _, c := range chain[1:] {
			if c.NotAfter.Before(first) {
				first = c.NotAfter
			}
		}
		if first.After(until) {
			until = first
		}
	}
	issuer.verifiedUntil.Store(until.UnixNano())
	return nil
}

// loadIssuer parses an issuer Secret's tls.crt / tls.key and verifies it against the identity
// controller's trust roots, like linkerd2 pkg/identity loadCredentials: the files must decode
// and the key match (pkg/tls ReadPEMCreds), the certificate must chain to a root with the rest of
// tls.crt as intermediates — at no name: "Don't verify with dns name as this is not a leaf
// certificate", so an issuer certificate without identity.<ns>.<trust-domain> is accepted —
// and it must be a CA. expectedName only appears in the message, as upstream's. The messages
// are the ones the real identity controller (edge-26.8.3) logged for each case.
func loadIssuer(crtPEM, keyPEM []byte, roots *x509.CertPool, expectedName string, now time.Time) (*issuerCreds, error) {
	const readErr = "failed to read CA from disk: "
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf(readErr+"%w", err)
	}
	certs, err := ParseCertificates(crtPEM)
	if err != nil {
		return nil, fmt.Errorf(readErr+"%w", err)
	}
	if len(certs) == 0 {
		return nil, errors.New(readErr + "No certificates found")
	}
	if !keyMatches(key, certs[0]) {
		return nil, errors.New(readErr + "tls: Public and private key do not match")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
	}); err != nil {
		return nil, fmt.Errorf("failed to verify issuer credentials for '%s' with trust anchors: %w", expectedName, err)
	}
	if !certs[0].IsCA {
		return nil, errors.New("failed to verify issuer certificate: it must be an intermediate-CA, but it is not")
	}
	first := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	return &issuerCreds{chain: certs, key: key, firstExpiry: first}, nil
}

// EncodeCertificates renders certificates as a PEM bundle.
func EncodeCertificates(certs ...*x509.Certificate) string {
	var b strings.Builder
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.String()
}
