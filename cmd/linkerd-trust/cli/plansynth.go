package cli

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"math/big"
	"time"
)

// anchorSynthesiser makes the stand-in for a renewed trust anchor: a new CA certificate like
// the current one, and its key (nil when it has none to give).
type anchorSynthesiser func(current *x509.Certificate, now time.Time) (*x509.Certificate, crypto.Signer, error)

// issuerSynthesiser makes the stand-in for the identity issuer renewed onto the stand-in anchor:
// a CA certificate like the current issuer, signed with the anchor's key.
type issuerSynthesiser func(current, anchor *x509.Certificate, anchorKey crypto.Signer, now time.Time) (*x509.Certificate, error)

// synthesiseAnchor makes a self-signed CA certificate with the current anchor's subject and
// lifetime and a fresh key, as cert-manager would on renewal with rotationPolicy Always. It only
// ever lives in this process's memory, as its key, which signs nothing but the stand-in of the
// renewed issuer (synthesiseIssuer).
func synthesiseAnchor(current *x509.Certificate, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	return synthesiseCA(current, nil, nil, now)
}

// synthesiseIssuer makes the stand-in identity issuer: the current issuer's subject and lifetime,
// a fresh key, signed by the stand-in anchor. In memory only.
func synthesiseIssuer(current, anchor *x509.Certificate, anchorKey crypto.Signer, now time.Time) (*x509.Certificate, error) {
	if anchorKey == nil {
		return nil, errors.New("no key of the stand-in trust anchor")
	}
	c, _, err := synthesiseCA(current, anchor, anchorKey, now)
	return c, err
}

// synthesiseCA makes a CA certificate like current with a fresh key, signed by parent's key
// (self-signed when parent is nil).
func synthesiseCA(current, parent *x509.Certificate, parentKey crypto.Signer, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               current.Subject,
		NotBefore:             now,
		NotAfter:              now.Add(current.NotAfter.Sub(current.NotBefore)),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	signer := crypto.Signer(key)
	if parent == nil {
		parent = tmpl
	} else {
		signer = parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}
