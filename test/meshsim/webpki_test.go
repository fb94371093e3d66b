package meshsim

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// bridgePKI is a rotation bridged by a cross-certificate, as cert-manager renews an anchor
// with rotationPolicy: Always: the new anchor keeps the old one's subject and gets a new key;
// cross is a CA certificate with the new anchor's subject and public key, signed by the old
// anchor's key; the new issuer is signed by the new anchor.
type bridgePKI struct {
	oldAnchor, newAnchor, cross *x509.Certificate
	newIssuer                   *testCA
}

func newBridgePKI(t *testing.T, now time.Time, oldAnchorNotAfter time.Time) *bridgePKI {
	t.Helper()
	oldKey, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	anchor := func(notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "root.linkerd.cluster.local"},
			NotBefore: now.Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}
	}
	create := func(tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) *x509.Certificate {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p := &bridgePKI{}
	oldTmpl := anchor(oldAnchorNotAfter)
	p.oldAnchor = create(oldTmpl, oldTmpl, &oldKey.PublicKey, oldKey)
	newTmpl := anchor(now.Add(240 * time.Hour))
	p.newAnchor = create(newTmpl, newTmpl, &newKey.PublicKey, newKey)
	p.cross = create(anchor(now.Add(240*time.Hour)), p.oldAnchor, &newKey.PublicKey, oldKey)
	p.newIssuer = (&testCA{cert: p.newAnchor, key: newKey}).issue(t, now.Add(-time.Hour), now.Add(48*time.Hour))
	if !bytes.Equal(p.oldAnchor.RawSubject, p.newAnchor.RawSubject) || !bytes.Equal(p.cross.RawSubject, p.newAnchor.RawSubject) {
		t.Fatal("the anchors and the cross-certificate must share one subject")
	}
	return p
}

// leaf issues a workload certificate from the new issuer, presenting chain after it (the
// identity issuer's tls.crt beyond its first certificate).
func (p *bridgePKI) leaf(t *testing.T, now time.Time, chain ...*x509.Certificate) []*x509.Certificate {
	t.Helper()
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	creds := &issuerCreds{chain: append([]*x509.Certificate{p.newIssuer.cert}, chain...), key: p.newIssuer.key, firstExpiry: p.newIssuer.cert.NotAfter}
	out, err := signLeaf(creds, "web.emojivoto.serviceaccount.identity.linkerd.cluster.local", &key.PublicKey, now, 24*time.Hour, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOracleFollowsTheProxyThroughABridge: a pod that trusts only the old anchor accepts a
// new-issuer certificate only when the cross-certificate is presented, whatever its place after
// the issuer; a pod that trusts the new anchor accepts it either way. The old anchor, having the
// issuer's issuer name, is tried first and fails its signature check before the
// cross-certificate is.
func TestOracleFollowsTheProxyThroughABridge(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newBridgePKI(t, clk.Now(), clk.Now().Add(240*time.Hour))
	oldOnly := newRootSet([]*x509.Certificate{p.oldAnchor})
	newOnly := newRootSet([]*x509.Certificate{p.newAnchor})
	both := newRootSet([]*x509.Certificate{p.oldAnchor, p.newAnchor})
	oldPod, newPod, bothPod, server := pod(0), pod(1), pod(2), pod(3)

	for _, tc := range []struct {
		name      string
		presented []*x509.Certificate // after the new issuer
		oldOK     bool
	}{
		{"without the cross-certificate", nil, false},
		{"with the cross-certificate", []*x509.Certificate{p.cross}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOracle(clk, time.Second, nil)
			o.setRoots(oldPod, oldOnly)
			o.setRoots(newPod, newOnly)
			o.setRoots(bothPod, both)
			o.setRoots(server, newOnly)
			o.setChain(server, p.leaf(t, clk.Now(), tc.presented...))
			o.Check()
			rejectedBy := map[PodRef]string{}
			for _, v := range o.Violations() {
				if v.Kind != ViolationUntrustedChain || v.Server != server {
					t.Errorf("unexpected violation: %s", v)
				}
				rejectedBy[v.Client] = v.Reason
			}
			if _, rejected := rejectedBy[oldPod]; rejected == tc.oldOK {
				t.Errorf("old-anchor pod rejected = %v, want %v (violations %v)", rejected, !tc.oldOK, o.Violations())
			}
			if reason := rejectedBy[oldPod]; !tc.oldOK && !strings.Contains(reason, "InvalidSignatureForPublicKey") {
				t.Errorf("old-anchor pod's rejection = %q, want the old anchor's failed signature check", reason)
			}
			for _, c := range []PodRef{newPod, bothPod} {
				if reason, rejected := rejectedBy[c]; rejected {
					t.Errorf("%s (trusts the new anchor) rejected the chain: %s", c, reason)
				}
			}
		})
	}

	// The same verdicts from verifyChain, with the cross-certificate before the issuer too (the
	// proxy tries the presented certificates in order, each at every level).
	now := clk.Now()
	withX, withoutX := p.leaf(t, now, p.cross), p.leaf(t, now)
	xFirst := []*x509.Certificate{withX[0], p.cross, withX[1]}
	for _, tc := range []struct {
		name  string
		chain []*x509.Certificate
		roots *rootSet
		ok    bool
	}{
		{"old anchor, no bridge", withoutX, oldOnly, false},
		{"old anchor, bridge", withX, oldOnly, true},
		{"old anchor, bridge presented first", xFirst, oldOnly, true},
		{"new anchor, no bridge", withoutX, newOnly, true},
		{"new anchor, bridge", withX, newOnly, true},
		{"both anchors, no bridge", withoutX, both, true},
	} {
		if err := verifyChain(tc.chain, tc.roots, "", now); (err == nil) != tc.ok {
			t.Errorf("%s: verifyChain = %v, want ok=%v", tc.name, err, tc.ok)
		}
		// Go's x509 agrees on every one of these chains: roots valid, ECDSA throughout.
		if err := goVerify(tc.chain, tc.roots, now); (err == nil) != tc.ok {
			t.Errorf("%s: x509.Verify = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestOracleTrustsAnExpiredAnchorLikeTheProxy: webpki never checks a trust anchor's validity
// period, so a pod that loaded the old anchor keeps accepting bridged chains after the old
// anchor expires, where Go's x509.Verify refuses them. The cross-certificate itself is an
// intermediate, and its validity is checked.
func TestOracleTrustsAnExpiredAnchorLikeTheProxy(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newBridgePKI(t, clk.Now(), clk.Now().Add(time.Hour))
	oldOnly := newRootSet([]*x509.Certificate{p.oldAnchor})
	now := clk.Now().Add(2 * time.Hour)
	chain := p.leaf(t, now, p.cross)
	if err := verifyChain(chain, oldOnly, "", now); err != nil {
		t.Errorf("verifyChain with an expired anchor = %v, want accepted as the proxy does", err)
	}
	if err := goVerify(chain, oldOnly, now); err == nil {
		t.Error("x509.Verify accepted an expired root; the difference this test documents is gone")
	}
	if err := verifyChain(chain, oldOnly, "", p.cross.NotAfter.Add(time.Second)); err == nil || !strings.Contains(err.Error(), "CertExpired") {
		t.Errorf("verifyChain after the cross-certificate expired = %v, want CertExpired", err)
	}
}

// TestVerifyChainLikeWebpki covers the rest of webpki's rules the oracle follows: an
// intermediate must be a CA, a CA cannot be the leaf, an extendedKeyUsage must name the
// purpose, and at most six certificates stand between leaf and anchor.
func TestVerifyChainLikeWebpki(t *testing.T) {
	now := time.Now()
	root := newTestRoot(t, "root", now.Add(-time.Hour), now.Add(time.Hour))
	roots := newRootSet([]*x509.Certificate{root.cert})
	ca := root
	var inters []*x509.Certificate
	for i := 0; i < 7; i++ {
		ca = ca.issue(t, now.Add(-time.Hour), now.Add(time.Hour))
		inters = append([]*x509.Certificate{ca.cert}, inters...)
		chain := append(ca.leaf(t, "a", now, time.Hour)[:1], inters...)
		err := verifyChain(chain, roots, "", now)
		if (err == nil) != (len(inters) <= webpkiMaxSubCAs) {
			t.Errorf("%d intermediates: verifyChain = %v", len(inters), err)
		}
	}
	if err := verifyChain([]*x509.Certificate{ca.cert}, roots, "", now); err == nil {
		t.Error("a CA certificate was accepted as a leaf")
	}
	if d := webpkiEndEntityDefect(ca.cert); !strings.Contains(d, "CaUsedAsEndEntity") {
		t.Errorf("end-entity defect of a CA = %q", d)
	}
	key, _ := newLeafKey()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a"}, NotBefore: now.Add(-time.Minute),
		NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, &key.PublicKey, root.key)
	if err != nil {
		t.Fatal(err)
	}
	anyEKU, _ := x509.ParseCertificate(der)
	if err := verifyChain([]*x509.Certificate{anyEKU}, roots, "", now); err == nil || !strings.Contains(err.Error(), "RequiredEkuNotFound") {
		t.Errorf("anyExtendedKeyUsage leaf: verifyChain = %v, want RequiredEkuNotFound (webpki does not honour anyEKU)", err)
	}
}

func goVerify(chain []*x509.Certificate, roots *rootSet, now time.Time) error {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	return err
}
