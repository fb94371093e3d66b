package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// anchorCertificate is the fixture's trust-anchor Certificate.
func anchorCertificate(f *fixture) *cmapi.Certificate {
	for _, o := range f.cm {
		if c, ok := o.(*cmapi.Certificate); ok && c.Name == "linkerd-trust-anchor" {
			return c
		}
	}
	f.t.Fatal("the fixture has no trust-anchor Certificate")
	return nil
}

// TestCheckCrossSignedPrerequisites: under spec.strategy CrossSigned, check fails while the
// anchor's Certificate is self-signed or keeps its key, naming the Certificate and its issuer,
// and passes once it is issued by the CA issuer over its own Secret.
func TestCheckCrossSignedPrerequisites(t *testing.T) {
	const line = "the trust anchor is issued as spec.strategy needs"
	cases := map[string]struct {
		setup    func(*fixture)
		wantCode int
		want     string
	}{
		"standard needs nothing more": {setup: func(*fixture) {}, want: "√ " + line},
		"a self-signed anchor": {setup: crossSigned, wantCode: 1,
			want: "Certificate cert-manager/linkerd-trust-anchor is issued by Issuer linkerd-trust-root-issuer, which is not a CA issuer, not with the anchor's own Secret linkerd-trust-anchor"},
		"an anchor that keeps its key": {setup: func(f *fixture) {
			crossSigned(f)
			anchorCertificate(f).Spec.PrivateKey.RotationPolicy = cmapi.RotationPolicyNever
		}, wantCode: 1, want: "Certificate cert-manager/linkerd-trust-anchor has spec.privateKey.rotationPolicy: Never"},
		"an anchor issued by the CA over its own Secret": {setup: func(f *fixture) {
			crossSigned(f)
			anchorCertificate(f).Spec.IssuerRef.Name, anchorCertificate(f).Spec.IssuerRef.Kind = "linkerd-identity-issuer", cmapi.ClusterIssuerKind
		}, want: "√ " + line},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			out, errOut, code := f.run("check")
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Errorf("exit code %d (want %d), output lacks %q:\n%s%s", code, tc.wantCode, tc.want, out, errOut)
			}
			if f.rotations["cluster"].Spec.Strategy == v1alpha1.StrategyCrossSigned && tc.wantCode == 0 && strings.Contains(out, "× "+line) {
				t.Errorf("the strategy check failed:\n%s", out)
			}
		})
	}
}

// crossSignedAnchorPEM is a new trust anchor as cert-manager's CA issuer over the anchor's own
// Secret issues it: the anchor's subject and a new key, signed by a previous self-signed anchor.
func crossSignedAnchorPEM(t *testing.T, notAfter time.Time) []byte {
	t.Helper()
	tmpl := func(serial int64, notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "root.linkerd.cluster.local"},
			NotBefore: testNow.Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	}
	oldKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	old := tmpl(1, testNow.Add(87600*time.Hour))
	oldDER, err := x509.CreateCertificate(rand.Reader, old, old, oldKey.Public(), oldKey)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := x509.ParseCertificate(oldDER)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl(2, notAfter), parent, newKey.Public(), oldKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestCheckBridgeExpiry: in a cross-signed rotation whose restart is left to churn, check fails
// when the new anchor, the bridge pods that trust only the previous anchor verify through,
// expires before status.restartDeadline, naming the TrustAnchorRotation and the anchor's
// Secret; it passes when the deadline comes first.
func TestCheckBridgeExpiry(t *testing.T) {
	const line = "the trust anchor is issued as spec.strategy needs"
	bridgeEnd := testNow.Add(400 * 24 * time.Hour)
	for name, tc := range map[string]struct {
		deadline time.Time
		want     string
	}{
		"the bridge expires first": {deadline: bridgeEnd.Add(time.Hour),
			want: "× " + line + "\n    TrustAnchorRotation cluster: the bridge certificate, trust anchor "},
		"the deadline comes first": {deadline: bridgeEnd.Add(-time.Hour), want: "√ " + line},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			crossSigned(f)
			anchorCertificate(f).Spec.IssuerRef.Name, anchorCertificate(f).Spec.IssuerRef.Kind = "linkerd-identity-issuer", cmapi.ClusterIssuerKind
			pemBytes := crossSignedAnchorPEM(t, bridgeEnd)
			f.issue("cert-manager", "linkerd-trust-anchor", pemBytes)
			bridge, err := steps.ParseCertificates(pemBytes)
			if err != nil {
				t.Fatal(err)
			}
			since := metav1.NewTime(tc.deadline.Add(-168 * time.Hour))
			st := &f.rotations["cluster"].Status
			st.Phase = v1alpha1.PhaseRemovingOldTrustRoots
			st.Checkpoint = &v1alpha1.Checkpoint{Step: steps.StepRemoveOldTrustRoots, Rotation: steps.Fingerprint(bridge[0]), StartTime: &since, Strategy: v1alpha1.StrategyCrossSigned}
			st.RestartDeadline = &v1alpha1.RestartDeadline{Deadline: metav1.NewTime(tc.deadline), Since: since, ChurnPeriod: metav1.Duration{Duration: 168 * time.Hour}}
			out, errOut, _ := f.run("check")
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s%s", tc.want, out, errOut)
			}
			if strings.HasPrefix(tc.want, "×") && !strings.Contains(out, "in Secret cert-manager/linkerd-trust-anchor (signed by the previous anchor), expires at "+bridgeEnd.UTC().Format(time.RFC3339)) {
				t.Errorf("the failure does not name the anchor's Secret and the bridge's expiry:\n%s", out)
			}
		})
	}
}

// TestCheckOlderBridgeExpiry: after two cross-signed rotations the identity issuer's chain is
// [issuer, C, B], B the older bridge, which no pod verifies through but linkerd-identity clamps
// every workload certificate to. check fails when B expires before status.restartDeadline,
// naming where B is carried, although the newest bridge C outlives the deadline.
func TestCheckOlderBridgeExpiry(t *testing.T) {
	const line = "the trust anchor is issued as spec.strategy needs"
	bridgeEnd, olderEnd := testNow.Add(400*24*time.Hour), testNow.Add(100*24*time.Hour)
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	type ca struct {
		cert *x509.Certificate
		key  *ecdsa.PrivateKey
	}
	issue := func(cn string, serial int64, notAfter time.Time, parent *ca) *ca {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: testNow.Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
		k := key()
		signer, signerKey := tmpl, k
		if parent != nil {
			signer, signerKey = parent.cert, parent.key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, k.Public(), signerKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return &ca{cert: c, key: k}
	}
	a := issue("root.linkerd.cluster.local", 1, testNow.Add(87600*time.Hour), nil)
	b := issue("root.linkerd.cluster.local", 2, olderEnd, a)
	c := issue("root.linkerd.cluster.local", 3, bridgeEnd, b)
	iss := issue("identity.linkerd.cluster.local", 4, testNow.Add(48*time.Hour), c)

	f := newFixture(t)
	crossSigned(f)
	anchorCertificate(f).Spec.IssuerRef.Name, anchorCertificate(f).Spec.IssuerRef.Kind = "linkerd-identity-issuer", cmapi.ClusterIssuerKind
	f.issue("cert-manager", "linkerd-trust-anchor", steps.EncodePEM(c.cert, b.cert))
	f.issue("linkerd", "linkerd-identity-issuer", steps.EncodePEM(iss.cert, c.cert, b.cert))
	deadline := bridgeEnd.Add(-time.Hour)
	since := metav1.NewTime(deadline.Add(-168 * time.Hour))
	st := &f.rotations["cluster"].Status
	st.Phase = v1alpha1.PhaseRemovingOldTrustRoots
	st.Checkpoint = &v1alpha1.Checkpoint{Step: steps.StepRemoveOldTrustRoots, Rotation: steps.Fingerprint(c.cert), StartTime: &since, Strategy: v1alpha1.StrategyCrossSigned}
	st.RestartDeadline = &v1alpha1.RestartDeadline{Deadline: metav1.NewTime(deadline), Since: since, ChurnPeriod: metav1.Duration{Duration: 168 * time.Hour}}
	out, errOut, _ := f.run("check")
	for _, want := range []string{"× " + line + "\n    TrustAnchorRotation cluster: the older bridge certificate " + steps.ShortFingerprint(steps.Fingerprint(b.cert)),
		"certificate 3 of the identity issuer Secret linkerd/linkerd-identity-issuer's tls.crt",
		"expires at " + olderEnd.UTC().Format(time.RFC3339), "go back to a self-signed trust anchor"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s%s", want, out, errOut)
		}
	}
}

// TestCheckBridgesInTheIssuersChain: whatever the strategy and phase, the bridges the identity
// issuer's chain carries (what identity serves after the issuer) are checked for expiry as the
// issuer is: a warning within --expiry-warning naming which certificate of the chain, a
// failure once one expired.
func TestCheckBridgesInTheIssuersChain(t *testing.T) {
	const line = "identity issuer is valid and renewed on time"
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	issue := func(cn string, serial int64, notBefore, notAfter time.Time, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
		k := key()
		if parent == nil {
			parent, parentKey = tmpl, k
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, k.Public(), parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	for name, tc := range map[string]struct {
		bridgeEnd time.Time
		want      string
	}{
		"far":     {testNow.Add(400 * 24 * time.Hour), "√ " + line},
		"soon":    {testNow.Add(10 * 24 * time.Hour), "‼ " + line + "\n    certificate 2 of the chain identity serves in Secret linkerd/linkerd-identity-issuer, CN=root.linkerd.cluster.local ("},
		"expired": {testNow.Add(-time.Hour), "× " + line + "\n    certificate 2 of the chain identity serves in Secret linkerd/linkerd-identity-issuer, CN=root.linkerd.cluster.local ("},
	} {
		t.Run(name, func(t *testing.T) {
			a, aKey := issue("root.linkerd.cluster.local", 1, testNow.Add(-48*time.Hour), testNow.Add(87600*time.Hour), nil, nil)
			b, bKey := issue("root.linkerd.cluster.local", 2, testNow.Add(-48*time.Hour), tc.bridgeEnd, a, aKey)
			iss, _ := issue("identity.linkerd.cluster.local", 3, testNow.Add(-time.Hour), testNow.Add(47*time.Hour), b, bKey)
			f := newFixture(t)
			f.issue("linkerd", "linkerd-identity-issuer", steps.EncodePEM(iss, b))
			out, errOut, _ := f.run("check")
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s%s", tc.want, out, errOut)
			}
		})
	}
}
