package meshsim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// testCA is a hand-made CA for unit tests.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newTestRoot(t testing.TB, name string, notBefore, notAfter time.Time) *testCA {
	t.Helper()
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

// issue signs an intermediate CA (the identity issuer) named identity.linkerd.cluster.local.
func (ca *testCA) issue(t testing.TB, notBefore, notAfter time.Time) *testCA {
	t.Helper()
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	name := issuerExpectedName(DefaultLinkerdNamespace, DefaultTrustDomain)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

func (ca *testCA) creds() *issuerCreds {
	return &issuerCreds{chain: []*x509.Certificate{ca.cert}, key: ca.key, firstExpiry: ca.cert.NotAfter}
}

func (ca *testCA) leaf(t testing.TB, identity string, now time.Time, lifetime time.Duration) []*x509.Certificate {
	t.Helper()
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := signLeaf(ca.creds(), identity, &key.PublicKey, now, lifetime, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return chain
}

func TestSignLeafClampsToIssuerExpiry(t *testing.T) {
	now := time.Now()
	root := newTestRoot(t, "root", now.Add(-time.Hour), now.Add(48*time.Hour))
	issuer := root.issue(t, now.Add(-time.Hour), now.Add(time.Hour))
	chain := issuer.leaf(t, "default.ns.serviceaccount.identity.linkerd.cluster.local", now, 24*time.Hour)
	if got := chain[0].NotAfter; !got.Equal(issuer.cert.NotAfter.Truncate(time.Second)) && !got.Equal(issuer.cert.NotAfter) {
		t.Errorf("leaf NotAfter = %v, want the issuer's %v", got, issuer.cert.NotAfter)
	}
	if got, want := chain[0].NotBefore, now.Add(-20*time.Second).Truncate(time.Second); got.Before(want.Add(-time.Second)) || got.After(want.Add(time.Second)) {
		t.Errorf("leaf NotBefore = %v, want now-20s", got)
	}
	if len(chain) != 2 || chain[1] != issuer.cert {
		t.Errorf("chain should be leaf + issuer")
	}
	if err := verifyChain(chain, newRootSet([]*x509.Certificate{root.cert}), chain[0].DNSNames[0], now); err != nil {
		t.Errorf("leaf does not verify: %v", err)
	}
	long := issuer.leaf(t, "x.y.serviceaccount.identity.linkerd.cluster.local", now.Add(-50*time.Minute), 10*time.Second)
	if d := long[0].NotAfter.Sub(long[0].NotBefore); d != 50*time.Second {
		t.Errorf("leaf validity = %v, want 20s skew + 10s lifetime + 20s skew", d)
	}
}

func TestLoadIssuerVerifiesAgainstRoots(t *testing.T) {
	now := time.Now()
	rootA := newTestRoot(t, "a", now.Add(-time.Hour), now.Add(time.Hour))
	rootB := newTestRoot(t, "b", now.Add(-time.Hour), now.Add(time.Hour))
	issuer := rootB.issue(t, now.Add(-time.Hour), now.Add(time.Hour))
	keyPEM := pemKey(t, issuer.key)
	crt := []byte(EncodeCertificates(issuer.cert))
	name := issuerExpectedName(DefaultLinkerdNamespace, DefaultTrustDomain)
	if _, err := loadIssuer(crt, keyPEM, newRootSet([]*x509.Certificate{rootA.cert}).pool, name, now); err == nil {
		t.Error("an issuer of another root was accepted")
	}
	if _, err := loadIssuer(crt, keyPEM, newRootSet([]*x509.Certificate{rootA.cert, rootB.cert}).pool, name, now); err != nil {
		t.Errorf("an issuer of a trusted root was refused: %v", err)
	}
	if _, err := loadIssuer(crt, keyPEM, newRootSet([]*x509.Certificate{rootB.cert}).pool, "identity.other.cluster.local", now); err == nil {
		t.Error("an issuer without the expected name was accepted")
	}
	other := rootB.issue(t, now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := loadIssuer(crt, pemKey(t, other.key), newRootSet([]*x509.Certificate{rootB.cert}).pool, name, now); err == nil {
		t.Error("a key that does not match the certificate was accepted")
	}
}

func pemKey(t testing.TB, k crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	return []byte("-----BEGIN EC PRIVATE KEY-----\n" + b64lines(der) + "-----END EC PRIVATE KEY-----\n")
}
