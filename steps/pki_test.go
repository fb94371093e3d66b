package steps

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// testCA is a certificate with its key, for building chains in tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial int64

// newCert issues a certificate named cn, signed by parent (self-signed when nil).
func newCert(t testing.TB, cn string, parent *testCA, isCA bool, notAfter time.Time) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              notAfter,
		IsCA:                  isCA,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: key}
}

func anchorCA(t testing.TB, cn string) *testCA {
	return newCert(t, cn, nil, true, time.Now().Add(24*time.Hour))
}

func TestRenderBundleIsDeterministicAndDeduplicated(t *testing.T) {
	a, b := anchorCA(t, "a"), anchorCA(t, "b")
	one := RenderBundle(a.cert, b.cert)
	if one != RenderBundle(a.cert, b.cert) {
		t.Fatal("rendering twice differs")
	}
	if got := RenderBundle(a.cert, a.cert); got != RenderBundle(a.cert) {
		t.Fatalf("duplicate anchor kept: %q", got)
	}
	certs, err := ParseCertificates([]byte(one))
	if err != nil || len(certs) != 2 || Fingerprint(certs[0]) != Fingerprint(a.cert) {
		t.Fatalf("bundle does not hold a then b: %v %d", err, len(certs))
	}
	if RenderBundle(a.cert, nil) != RenderBundle(a.cert) {
		t.Fatal("a nil previous anchor changed the bundle")
	}
	// The last bundle is remembered for the anchors it was rendered for, and only for those.
	swapped, err := ParseCertificates([]byte(RenderBundle(b.cert, a.cert)))
	if err != nil || len(swapped) != 2 || Fingerprint(swapped[0]) != Fingerprint(b.cert) {
		t.Fatalf("the bundle of b then a does not start with b: %v %d", err, len(swapped))
	}
	if RenderBundle(a.cert, b.cert) != one || RenderBundle() != "" {
		t.Fatal("a bundle rendered again differs, or no anchor rendered a bundle")
	}
}

func TestParseCertificates(t *testing.T) {
	a := anchorCA(t, "a")
	cases := map[string]struct {
		data    string
		wantN   int
		wantErr bool
	}{
		"one certificate":                     {data: string(EncodePEM(a.cert)), wantN: 1},
		"a key block is skipped, not kept":    {data: "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n" + string(EncodePEM(a.cert)), wantN: 1},
		"text that is not PEM":                {data: "not a certificate", wantErr: true},
		"empty data":                          {data: "", wantErr: true},
		"a CERTIFICATE block that is garbage": {data: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			certs, err := ParseCertificates([]byte(tc.data))
			if (err != nil) != tc.wantErr || len(certs) != tc.wantN {
				t.Fatalf("got %d certs, err %v", len(certs), err)
			}
		})
	}
}

func TestCheckAnchor(t *testing.T) {
	now := time.Now()
	leaf := newCert(t, "leaf", nil, false, now.Add(time.Hour))
	expired := newCert(t, "old", nil, true, now.Add(-time.Minute))
	if err := CheckAnchor(anchorCA(t, "ok").cert, now); err != nil {
		t.Errorf("a valid CA: %v", err)
	}
	if err := CheckAnchor(leaf.cert, now); err == nil {
		t.Error("a certificate that is not a CA was accepted")
	}
	if err := CheckAnchor(expired.cert, now); err == nil {
		t.Error("an expired anchor was accepted")
	}
}

func TestBundleHashIsSHA256OfTheExactBytes(t *testing.T) {
	// sha256("abc\n"), computed independently.
	if got, want := BundleHash("abc\n"), "edeaaff3f1774ad2888673770c6d64097e391bc362d7d6fb34982ddf0efd18cb"; got != want {
		t.Fatalf("BundleHash = %s, want %s", got, want)
	}
}

// TestSignedByRemembersCAVerdicts: the verdicts on CA certificates are remembered, both ways,
// under the same name-linked parents (two anchors named alike, as a renewed anchor is); a
// leaf's are not.
func TestSignedByRemembersCAVerdicts(t *testing.T) {
	anchor, renewed := anchorCA(t, "root.linkerd.cluster.local"), anchorCA(t, "root.linkerd.cluster.local")
	issuer := newCert(t, "identity.linkerd.cluster.local", anchor, true, time.Now().Add(time.Hour))
	leaf := newCert(t, "default.default.serviceaccount.identity.linkerd.cluster.local", issuer, false, time.Now().Add(time.Hour))
	for range 2 {
		if !SignedBy(issuer.cert, anchor.cert) {
			t.Error("the issuer is not signed by its anchor")
		}
		if SignedBy(issuer.cert, renewed.cert) {
			t.Error("the issuer is signed by the renewed anchor, which only shares its name")
		}
		if !SignedBy(leaf.cert, issuer.cert) || SignedBy(leaf.cert, anchor.cert) {
			t.Error("wrong verdict on the leaf")
		}
	}
	signatures.Lock()
	defer signatures.Unlock()
	for _, want := range []struct {
		child, parent *x509.Certificate
		remembered    bool
	}{{issuer.cert, anchor.cert, true}, {issuer.cert, renewed.cert, true}, {leaf.cert, issuer.cert, false}} {
		_, remembered := signatures.verified[[2][sha256.Size]byte{sha256.Sum256(want.child.Raw), sha256.Sum256(want.parent.Raw)}]
		if remembered != want.remembered {
			t.Errorf("%s signed by %s: remembered %v, want %v", want.child.Subject.CommonName, want.parent.Subject.CommonName, remembered, want.remembered)
		}
	}
}
