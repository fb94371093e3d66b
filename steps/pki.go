package steps

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Fingerprint is the lowercase hex SHA-256 of a certificate's DER: the identity of a
// certificate everywhere in this project (status, metrics, plans).
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// ShortFingerprint abbreviates a fingerprint (or another hex digest, such as a bundle hash) to
// its first 12 characters, for the operator's messages and the CLI's output alike, so that a
// certificate reads the same in both; status fields carry it in full.
func ShortFingerprint(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// BundleHash is what Linkerd's proxy-injector stamps on pods as linkerd.io/trust-root-sha256:
// the lowercase hex SHA-256 of the exact bundle bytes, untrimmed.
func BundleHash(bundle string) string {
	sum := sha256.Sum256([]byte(bundle))
	return hex.EncodeToString(sum[:])
}

// ErrNoCertificate is returned for PEM data with no CERTIFICATE block.
var ErrNoCertificate = errors.New("no PEM CERTIFICATE block")

// ParseCertificates parses every CERTIFICATE block of PEM data, in order. Other block types
// (a private key, say) are skipped without being retained. Data that is not PEM at all, or a
// block that does not parse, is an error.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
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
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		if len(bytes.TrimSpace(rest)) > 0 || len(bytes.TrimSpace(data)) > 0 {
			return nil, fmt.Errorf("%w (data is not PEM-encoded certificates)", ErrNoCertificate)
		}
		return nil, ErrNoCertificate
	}
	return certs, nil
}

// CheckAnchor says what makes c unusable as a trust anchor at now, or nil: it must be a CA
// certificate within its validity period.
func CheckAnchor(c *x509.Certificate, now time.Time) error {
	if !c.IsCA || !c.BasicConstraintsValid {
		return fmt.Errorf("certificate %q is not a CA certificate (basicConstraints CA:FALSE)", c.Subject)
	}
	if now.After(c.NotAfter) {
		return fmt.Errorf("certificate %q expired at %s", c.Subject, c.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(c.NotBefore) {
		return fmt.Errorf("certificate %q is not valid before %s", c.Subject, c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// SignedBy reports whether child's signature verifies with parent's key (and their names link).
//
// The verdict on a CA certificate is remembered: a reconcile asks it of the same anchors and
// issuers over and over (CertificateRoot, IssuerOnCurrentAnchor, IdentityRestartedEarly...), and
// an ECDSA verification was a quarter of the operator's CPU while pods rolled. A verdict depends
// on the two DERs alone, so it is keyed by their hashes. Leaves (a pod's live certificate, each
// checked once per probe) are not remembered.
func SignedBy(child, parent *x509.Certificate) bool {
	if child == nil || parent == nil {
		return false
	}
	if !child.IsCA {
		return child.CheckSignatureFrom(parent) == nil
	}
	key := [2][sha256.Size]byte{sha256.Sum256(child.Raw), sha256.Sum256(parent.Raw)}
	signatures.Lock()
	ok, known := signatures.verified[key]
	signatures.Unlock()
	if known {
		return ok
	}
	ok = child.CheckSignatureFrom(parent) == nil
	signatures.Lock()
	defer signatures.Unlock()
	if len(signatures.verified) >= maxSignatures {
		clear(signatures.verified) // a mesh has a few CAs at a time; this bounds a long life
	}
	signatures.verified[key] = ok
	return ok
}

// signatures are SignedBy's verdicts on CA certificates, by the hashes of child and parent.
var signatures = struct {
	sync.Mutex
	verified map[[2][sha256.Size]byte]bool
}{verified: map[[2][sha256.Size]byte]bool{}}

const maxSignatures = 256

// EncodePEM returns the PEM encoding of certificates, in order.
func EncodePEM(certs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// RenderBundle is the content of linkerd-identity-trust-roots' ca-bundle.crt for the given
// anchors: each certificate once (by fingerprint), in the order given — current anchor first,
// then the previous one — PEM-encoded. The operator and `linkerd trust bundle` both call it, so
// their bytes, and hence the trust-root-sha256 the injector stamps, are identical.
func RenderBundle(anchors ...*x509.Certificate) string {
	rendered.Lock()
	defer rendered.Unlock()
	if slices.EqualFunc(anchors, rendered.anchors, sameCertificate) {
		return rendered.bundle
	}
	rendered.anchors, rendered.bundle = slices.Clone(anchors), renderBundle(anchors)
	return rendered.bundle
}

// rendered is the last bundle RenderBundle rendered, and for which anchors: the operator asks
// for the same bundle on every reconcile, thousands of times over a rotation.
var rendered struct {
	sync.Mutex
	anchors []*x509.Certificate
	bundle  string
}

// sameCertificate reports whether a and b are the same certificate, or both nil.
func sameCertificate(a, b *x509.Certificate) bool {
	return a == b || a != nil && b != nil && a.Equal(b)
}

func renderBundle(anchors []*x509.Certificate) string {
	seen := map[string]bool{}
	var unique []*x509.Certificate
	for _, a := range anchors {
		if a == nil || seen[Fingerprint(a)] {
			continue
		}
		seen[Fingerprint(a)] = true
		unique = append(unique, a)
	}
	return string(EncodePEM(unique...))
}

// SameKey reports whether two certificates have the same subject and public key: a renewal
// that kept the key (cert-manager rotationPolicy Never). Whatever one of them signed verifies
// against the other, so trusting either is trusting both.
func SameKey(a, b *x509.Certificate) bool {
	return a != nil && b != nil && bytes.Equal(a.RawSubject, b.RawSubject) &&
		bytes.Equal(a.RawSubjectPublicKeyInfo, b.RawSubjectPublicKeyInfo)
}
