package meshsim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
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

// TestSignLeafServesTheWholeIssuerChain pins what the real identity controller of linkerd2
// edge-26.8.3 returned to a Certify (linkerd2-proxy-api) with tls.crt holding the issuer and its
// root: the leaf (SAN DNS and CN the identity, digitalSignature and keyEncipherment, server and
// client auth, valid from 20s before the request to 24h20s after it, clamped to the first expiry
// in tls.crt), every certificate of tls.crt as intermediates in their order, root included, and
// validUntil the leaf's NotAfter.
func TestSignLeafServesTheWholeIssuerChain(t *testing.T) {
	now := time.Now()
	root := newTestRoot(t, "root-a", now.Add(-time.Hour), now.Add(72*time.Hour))
	issuer := root.issue(t, now.Add(-time.Hour), now.Add(48*time.Hour))
	creds := &issuerCreds{chain: []*x509.Certificate{issuer.cert, root.cert}, key: issuer.key, firstExpiry: issuer.cert.NotAfter}
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	const id = "web.default.serviceaccount.identity.linkerd.cluster.local"
	chain, err := signLeaf(creds, id, &key.PublicKey, now, 24*time.Hour, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leaf := chain[0]
	if len(chain) != 3 || chain[1] != issuer.cert || chain[2] != root.cert {
		t.Errorf("intermediates: %d certificates, want tls.crt's two, issuer then root", len(chain)-1)
	}
	if fmt.Sprint(leaf.DNSNames) != "["+id+"]" || leaf.Subject.CommonName != id {
		t.Errorf("leaf names: SAN %v, CN %q", leaf.DNSNames, leaf.Subject.CommonName)
	}
	if d := leaf.NotAfter.Sub(leaf.NotBefore); d != 24*time.Hour+40*time.Second {
		t.Errorf("leaf validity %v, want 24h40s", d)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment ||
		fmt.Sprint(leaf.ExtKeyUsage) != fmt.Sprint([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("leaf usages: key %b, extended %v", leaf.KeyUsage, leaf.ExtKeyUsage)
	}
}

// TestLoadIssuerVerifiesAgainstRoots pins the identity controller's verdict on an issuer, at
// start and at a hot reload alike, with the message the real identity controller of linkerd2
// edge-26.8.3 logged for the same case (run with an issuer of each kind in its mounted Secret):
//
//	fatal "Failed to initialize identity service: <message>" at start, or
//	warning "Skipping issuer update as certs could not be read from disk: <message>" at a reload.
func TestLoadIssuerVerifiesAgainstRoots(t *testing.T) {
	now := time.Now()
	rootA := newTestRoot(t, "a", now.Add(-time.Hour), now.Add(time.Hour))
	rootB := newTestRoot(t, "b", now.Add(-time.Hour), now.Add(time.Hour))
	issuer := rootB.issue(t, now.Add(-time.Hour), now.Add(time.Hour))
	keyPEM := pemKey(t, issuer.key)
	crt := []byte(EncodeCertificates(issuer.cert))
	name := issuerExpectedName(DefaultLinkerdNamespace, DefaultTrustDomain)
	rootsA, rootsB := newRootSet([]*x509.Certificate{rootA.cert}).pool, newRootSet([]*x509.Certificate{rootA.cert, rootB.cert}).pool
	other := rootB.issue(t, now.Add(-time.Hour), now.Add(time.Hour))
	nonameCrt, nonameKey := rootB.issueNamed(t, "some-other-issuer", true)
	notCACrt, notCAKey := rootB.issueNamed(t, name, false)
	for _, tc := range []struct {
		what     string
		crt, key []byte
		roots    *x509.CertPool
		want     string // "" when accepted
	}{
		{"an issuer of a trusted root", crt, keyPEM, rootsB, ""},
		{"an issuer of another root", crt, keyPEM, rootsA,
			"failed to verify issuer credentials for 'identity.linkerd.cluster.local' with trust anchors: x509: certificate signed by unknown authority"},
		// Linkerd verifies the issuer at no name: one without identity.linkerd.cluster.local
		// starts identity, and a reload to it is IssuerUpdated.
		{"an issuer without the identity name", nonameCrt, nonameKey, rootsB, ""},
		{"an issuer that is not a CA", notCACrt, notCAKey, rootsB,
			"failed to verify issuer certificate: it must be an intermediate-CA, but it is not"},
		{"a key that does not match the certificate", crt, pemKey(t, other.key), rootsB,
			"failed to read CA from disk: tls: Public and private key do not match"},
	} {
		_, err := loadIssuer(tc.crt, tc.key, tc.roots, name, now)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: simulator %q, linkerd %q", tc.what, got, tc.want)
		}
	}
}

// issueNamed signs an issuer certificate with subject and SAN name, a CA or not, and returns it
// and its key as the Secret's tls.crt and tls.key.
func (ca *testCA) issueNamed(t testing.TB, name string, isCA bool) (crtPEM, keyPEM []byte) {
	t.Helper()
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return []byte(EncodeCertificates(c)), pemKey(t, key)
}

func pemKey(t testing.TB, k crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	return []byte("-----BEGIN EC PRIVATE KEY-----\n" + b64lines(der) + "-----END EC PRIVATE KEY-----\n")
}

// TestCertifyRefusesOnceTheIssuerOrTheAnchorExpired: identity verifies its issuer against the
// roots it loaded at each Certify, at the current time (ensureIssuerStillValid): a running
// identity refuses every CSR from the moment its issuer, or the anchor the issuer chains to,
// expires — whichever comes first — and the cached verdict never outlives either.
func TestCertifyRefusesOnceTheIssuerOrTheAnchorExpired(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	for name, tc := range map[string]struct{ anchorEnds, issuerEnds time.Duration }{
		"the issuer expires first": {48 * time.Hour, 2 * time.Hour},
		"the anchor expires first": {2 * time.Hour, 48 * time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			root := newTestRoot(t, "root", now.Add(-time.Hour), now.Add(tc.anchorEnds))
			issuer := root.issue(t, now.Add(-time.Hour), now.Add(tc.issuerEnds))
			roots, err := parseRoots(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.cert.Raw})))
			if err != nil {
				t.Fatal(err)
			}
			creds := issuer.creds()
			for _, at := range []time.Duration{0, time.Hour, 2*time.Hour - time.Second} {
				if err := verifyIssuerNow(creds, roots.pool, now.Add(at)); err != nil {
					t.Errorf("at +%v: %v, want the issuer accepted", at, err)
				}
			}
			for _, at := range []time.Duration{2*time.Hour + time.Second, 3 * time.Hour} {
				if err := verifyIssuerNow(creds, roots.pool, now.Add(at)); err == nil || !strings.Contains(err.Error(), "expired") {
					t.Errorf("at +%v: %v, want an expiry error", at, err)
				}
			}
		})
	}
}
