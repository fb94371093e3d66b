package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HandMade is a trust anchor and an identity issuer made the way Linkerd's documentation makes
// them ("Generating your own mTLS root certificates"), with smallstep's step CLI:
//
//	step certificate create root.linkerd.cluster.local ca.crt ca.key \
//	  --profile root-ca --no-password --insecure
//	step certificate create identity.linkerd.cluster.local issuer.crt issuer.key \
//	  --profile intermediate-ca --not-after 8760h --no-password --insecure \
//	  --ca ca.crt --ca-key ca.key
//
// ECDSA P-256 keys; the root-ca profile makes a self-signed CA with path length 1 and key usages
// certSign and crlSign, valid ten years; the intermediate-ca profile a CA with path length 0 and
// the same key usages (smallstep crypto x509util DefaultRootTemplate and
// DefaultIntermediateTemplate).
type HandMade struct {
	Anchor, Issuer *x509.Certificate
	// IssuerKeyPEM is the issuer's key as step writes it (an EC PRIVATE KEY). AnchorKeyPEM is the
	// anchor's (ca.key): only the cross-signed takeover, by a user who kept it, uses it.
	IssuerKeyPEM, AnchorKeyPEM []byte
}

// MakeHandMade makes the anchor and the issuer for trustDomain, the issuer valid for issuerLife.
func MakeHandMade(trustDomain string, issuerLife time.Duration) (*HandMade, error) {
	now := time.Now()
	anchorKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	anchor, err := stepCertificate("root.linkerd."+trustDomain, now, now.Add(87600*time.Hour), 1, &anchorKey.PublicKey, nil, anchorKey)
	if err != nil {
		return nil, err
	}
	issuerKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	issuer, err := stepCertificate("identity.linkerd."+trustDomain, now, now.Add(issuerLife), 0, &issuerKey.PublicKey, anchor, anchorKey)
	if err != nil {
		return nil, err
	}
	h := &HandMade{Anchor: anchor, Issuer: issuer}
	if h.IssuerKeyPEM, err = keyPEM(issuerKey); err != nil {
		return nil, err
	}
	if h.AnchorKeyPEM, err = keyPEM(anchorKey); err != nil {
		return nil, err
	}
	return h, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// AnchorPEM is the anchor's certificate as step writes it (ca.crt).
func (h *HandMade) AnchorPEM() []byte { return encodePEM(h.Anchor) }

// stepCertificate signs a CA certificate as step's templates shape it (parent nil: self-signed).
func stepCertificate(cn string, notBefore, notAfter time.Time, pathLen int, pub *ecdsa.PublicKey, parent *x509.Certificate, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLen: pathLen, MaxPathLenZero: pathLen == 0,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", cn, err)
	}
	return x509.ParseCertificate(der)
}

// Helm's release of Linkerd's control plane in the objects it renders.
const (
	ChartRelease   = "linkerd-control-plane"
	ChartCreatedBy = "linkerd/helm edge-26.8.3"
)

// ChartObjects are the trust-roots ConfigMap and the issuer Secret as `helm install
// linkerd-control-plane` renders them from the hand-made certificates
// (identityTrustAnchorsPEM, identity.issuer.tls.crtPEM and keyPEM, scheme linkerd.io/tls, the
// chart's defaults): linkerd2 charts/linkerd-control-plane/templates/identity.yaml at
// edge-26.8.3, each PEM trimmed, the Secret with no type (Opaque), plus what Helm adds to every
// object it installs (label app.kubernetes.io/managed-by, annotations meta.helm.sh/release-*).
func (h *HandMade) ChartObjects(namespace string) (*corev1.ConfigMap, *corev1.Secret) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{"linkerd.io/control-plane-component": "identity", "linkerd.io/control-plane-ns": namespace,
				"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"linkerd.io/created-by": ChartCreatedBy,
				"meta.helm.sh/release-name": ChartRelease, "meta.helm.sh/release-namespace": namespace}}
	}
	trim := func(b []byte) []byte { return []byte(strings.TrimSpace(string(b))) }
	cm := &corev1.ConfigMap{ObjectMeta: meta("linkerd-identity-trust-roots"),
		Data: map[string]string{"ca-bundle.crt": string(trim(encodePEM(h.Anchor)))}}
	sec := &corev1.Secret{ObjectMeta: meta("linkerd-identity-issuer"),
		Data: map[string][]byte{"crt.pem": trim(encodePEM(h.Issuer)), "key.pem": trim(h.IssuerKeyPEM)}}
	return cm, sec
}

func encodePEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
