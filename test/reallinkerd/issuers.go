package reallinkerd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// IssuerCase is one identity issuer the identity controller is started with, or hot-reloaded
// to, over the trust roots RootA: its Secret's tls.crt and tls.key.
type IssuerCase struct {
	Name     string
	Crt, Key []byte
}

// IssuerCases makes the issuers the identity recording covers, all under fresh roots: root-a,
// the identity's trust roots (RootsPEM), and root-b, an anchor it does not trust. The
// recording (by the real identity controller) and its replay (by the simulator) each make
// their own: what they are compared on — whether the issuer is accepted, and the message —
// does not depend on the keys.
func IssuerCases() (rootsPEM []byte, cases []IssuerCase, err error) {
	now := time.Now()
	rootA, keyA, err := selfSigned("root-a", now)
	if err != nil {
		return nil, nil, err
	}
	rootB, keyB, err := selfSigned("root-b", now)
	if err != nil {
		return nil, nil, err
	}
	const name = "identity.linkerd.cluster.local"
	mismatch, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range []struct {
		name, cn string
		isCA     bool
		root     *x509.Certificate
		rootKey  *ecdsa.PrivateKey
		withRoot bool // tls.crt holds the root after the issuer
		wrongKey bool
	}{
		{name: "verifies", cn: name, isCA: true, root: rootA, rootKey: keyA},
		{name: "verifies, root in tls.crt", cn: name, isCA: true, root: rootA, rootKey: keyA, withRoot: true},
		{name: "another anchor's", cn: name, isCA: true, root: rootB, rootKey: keyB},
		{name: "without the identity name", cn: "some-other-issuer", isCA: true, root: rootA, rootKey: keyA},
		{name: "not a CA", cn: name, isCA: false, root: rootA, rootKey: keyA},
		{name: "key of another certificate", cn: name, isCA: true, root: rootA, rootKey: keyA, wrongKey: true},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: c.cn}, DNSNames: []string{c.cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: c.isCA, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if c.isCA {
			tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, c.root, &key.PublicKey, c.rootKey)
		if err != nil {
			return nil, nil, fmt.Errorf("issuer %q: %w", c.name, err)
		}
		crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if c.withRoot {
			crt = append(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.root.Raw})...)
		}
		k := key
		if c.wrongKey {
			k = mismatch
		}
		keyDER, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		cases = append(cases, IssuerCase{Name: c.name, Crt: crt, Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})})
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootA.Raw}), cases, nil
}

func selfSigned(cn string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(72 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}
