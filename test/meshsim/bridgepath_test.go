package meshsim

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
)

// TestBridgePathAgreesWithTheOracle holds the operator's path finder (steps.BridgePath, which
// decides whether a cross-signed rotation stays cross-signed) to the oracle's model of the
// proxy's verifier (webpkiVerify): over random PKIs of a few names and keys, anchors,
// cross-certificates in any order, expired and not-yet-valid ones, certificates that are not
// CAs, loops and chains longer than webpki allows, BridgePath finds a path from an issuer to the
// anchors exactly when a leaf of that issuer, presented with the issuer and those certificates,
// verifies.
//
// One difference is by design, on the safe side: BridgePath takes no step through a CA whose
// keyUsage lacks keyCertSign (crypto/x509's CheckSignatureFrom), which the rustls-webpki of
// linkerd2-proxy v2.366.0 (0.103.13, the proxy of edge-26.8.3) accepts and rustls-webpki's main
// branch refuses since a0bf408 ("Verify usage of keyCertSign bit in keyUsage extensions"). There
// BridgePath must agree with the oracle given the presented certificates without those CAs, and
// may only find no path where the proxy would find one, never the other way round.
func TestBridgePathAgreesWithTheOracle(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	rng := mrand.New(mrand.NewPCG(35, 33))
	const cases = 400
	found, bridged, refusedSigner := 0, 0, 0
	for i := range cases {
		g := randomPKI(t, rng, now)
		leaf := g.issue(t, g.head, "leaf", now.Add(-time.Minute), now.Add(time.Hour), false)
		verify := func(presented []*x509.Certificate) error {
			chain := append([]*x509.Certificate{g.head.cert}, presented...)
			return webpkiVerify(webpkiLeaf{cert: leaf.cert, issuer: leaf.cert.RawIssuer}, chain, g.roots, now, x509.ExtKeyUsageServerAuth)
		}
		var signers []*x509.Certificate
		for _, c := range g.presented {
			if c.KeyUsage == 0 || c.KeyUsage&x509.KeyUsageCertSign != 0 {
				signers = append(signers, c)
			}
		}
		proxy, withoutNonSigners := verify(g.presented), verify(signers)
		path, _, ok := steps.BridgePath(g.head.cert, g.presented, g.roots, now, webpkiMaxSubCAs)
		switch {
		case ok && proxy != nil:
			t.Errorf("case %d: BridgePath found a path (%s) where the oracle's webpki finds none (%v): unsafe\n%s", i, names(path), proxy, g)
		case ok != (withoutNonSigners == nil):
			t.Errorf("case %d: BridgePath found a path %v (%s); the oracle's webpki, without the CAs lacking keyCertSign, says %v\n%s", i, ok, names(path), withoutNonSigners, g)
		case !ok && proxy == nil:
			refusedSigner++
		}
		if ok {
			found++
			if len(path) > 1 {
				bridged++
			}
		}
	}
	// The cases must exercise every answer, or the comparison proves little.
	if found < cases/10 || found > cases*9/10 || bridged < cases/10 || refusedSigner == 0 {
		t.Errorf("%d of %d random PKIs had a path, %d through presented certificates, %d only through a CA lacking keyCertSign: the generator no longer makes every kind",
			found, cases, bridged, refusedSigner)
	}
	t.Logf("%d of %d random PKIs had a path to an anchor, %d of them through presented certificates; %d more only through a CA lacking keyCertSign", found, cases, bridged, refusedSigner)
}

type pkiNode struct {
	name string
	key  *ecdsa.PrivateKey
	cert *x509.Certificate // the certificate this node was issued, when it is a head or a root
}

type randomPKIs struct {
	head      *pkiNode
	roots     []*x509.Certificate
	presented []*x509.Certificate
	desc      []string
	// noCertSign makes the next certificate a CA whose keyUsage lacks keyCertSign.
	noCertSign bool
}

func (g *randomPKIs) String() string { return strings.Join(g.desc, "\n") }

// randomPKI draws two to four CA names with one or two keys each, self-signed anchors for
// some of them, an identity issuer signed by one of them, and up to eight certificates between
// them presented after the issuer, in random order.
func randomPKI(t *testing.T, rng *mrand.Rand, now time.Time) *randomPKIs {
	t.Helper()
	g := &randomPKIs{}
	var nodes []*pkiNode
	for n := range 2 + rng.IntN(3) {
		for range 1 + rng.IntN(2) {
			key, err := newLeafKey()
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, &pkiNode{name: fmt.Sprintf("ca-%d", n), key: key})
		}
	}
	pick := func() *pkiNode { return nodes[rng.IntN(len(nodes))] }
	for _, n := range nodes {
		if len(g.roots) == 0 || rng.IntN(3) == 0 {
			root := g.issue(t, n, n.name, now.Add(-time.Hour), now.Add(time.Hour), true)
			g.roots = append(g.roots, root.cert)
			g.desc = append(g.desc, "anchor "+describe(root.cert))
		}
	}
	key, err := newLeafKey()
	if err != nil {
		t.Fatal(err)
	}
	headSigner := pick()
	for range 2 {
		if headSigner.cert == nil && !isAnchorKey(g.roots, headSigner) {
			break
		}
		headSigner = pick() // prefer a key no anchor holds: a path must go through the presented
	}
	if rng.IntN(4) == 0 {
		// A line of four to seven CAs from an anchor's key down to the issuer: webpki allows
		// six certificates above the leaf, the issuer included.
		signer := nodes[0]
		for j := range 4 + rng.IntN(4) {
			k, err := newLeafKey()
			if err != nil {
				t.Fatal(err)
			}
			link := &pkiNode{name: fmt.Sprintf("link-%d", j), key: k}
			c := g.issue(t, signer, link.name, now.Add(-time.Hour), now.Add(time.Hour), true, k)
			g.presented = append(g.presented, c.cert)
			g.desc = append(g.desc, fmt.Sprintf("presented %s signed by %s", link.name, signer.name))
			signer = link
		}
		headSigner = signer
	}
	g.head = g.issue(t, headSigner, "identity.linkerd.cluster.local", now.Add(-time.Hour), now.Add(time.Hour), true, key)
	g.desc = append(g.desc, "issuer "+describe(g.head.cert))
	for range rng.IntN(9) {
		subject, signer := pick(), pick()
		notBefore, notAfter := now.Add(-time.Hour), now.Add(time.Hour)
		switch rng.IntN(8) {
		case 0:
			notAfter = now.Add(-time.Minute) // expired
		case 1:
			notBefore = now.Add(time.Minute) // not valid yet
		}
		isCA := rng.IntN(10) != 0
		g.noCertSign = isCA && rng.IntN(10) == 0
		c := g.issue(t, signer, subject.name, notBefore, notAfter, isCA, subject.key)
		g.presented = append(g.presented, c.cert)
		g.desc = append(g.desc, fmt.Sprintf("presented %s, key of %s, signed by %s (CA %v, keyCertSign %v, valid %s..%s)",
			subject.name, keyID(subject.key), keyID(signer.key), isCA, !g.noCertSign, notBefore.Sub(now), notAfter.Sub(now)))
		g.noCertSign = false
	}
	rng.Shuffle(len(g.presented), func(i, j int) { g.presented[i], g.presented[j] = g.presented[j], g.presented[i] })
	return g
}

// issue makes a certificate for name signed by signer's key; with no key given, it certifies
// signer's own key (a self-signed anchor). The node returned holds the key certified.
func (g *randomPKIs) issue(t *testing.T, signer *pkiNode, name string, notBefore, notAfter time.Time, isCA bool, key ...*ecdsa.PrivateKey) *pkiNode {
	t.Helper()
	subjectKey := signer.key
	if len(key) > 0 {
		subjectKey = key[0]
	} else if !isCA {
		k, err := newLeafKey()
		if err != nil {
			t.Fatal(err)
		}
		subjectKey = k
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		if g.noCertSign {
			tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		}
	} else {
		tmpl.DNSNames = []string{name}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	parent := tmpl
	if signer.cert != nil {
		parent = signer.cert
	} else if subjectKey != signer.key {
		// The signer is known by its name and key alone: a template stands for its certificate.
		parent = &x509.Certificate{Subject: pkix.Name{CommonName: signer.name}, PublicKey: &signer.key.PublicKey}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &subjectKey.PublicKey, signer.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pkiNode{name: name, key: subjectKey, cert: c}
}

func isAnchorKey(roots []*x509.Certificate, n *pkiNode) bool {
	for _, r := range roots {
		if n.key.PublicKey.Equal(r.PublicKey) {
			return true
		}
	}
	return false
}

func keyID(k *ecdsa.PrivateKey) string { return fmt.Sprintf("%x", k.PublicKey.X.Bytes()[:3]) }

func describe(c *x509.Certificate) string {
	return fmt.Sprintf("%s signed by %s", c.Subject.CommonName, c.Issuer.CommonName)
}

func names(path []*x509.Certificate) string {
	var out []string
	for _, c := range path {
		out = append(out, c.Subject.CommonName)
	}
	return strings.Join(out, " <- ")
}
