package meshsim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

var updateCorpus = flag.Bool("update", false, "record testdata/webpki-corpus.json again with the verifier of "+reallinkerd.EnvVerifier)

// corpusFile holds chains, each with the verdict the real rustls-webpki gave (WEBPKI_VERIFIER_BIN,
// called as linkerd2-proxy calls it): every chain shape the rotations produce and hostile ones.
// TestWebpkiCorpus replays each against the oracle's model (webpki.go) and the operator's path
// finder (steps.BridgePath); TestRecordWebpkiCorpus, with -update and the verifier, records it.
const corpusFile = "testdata/webpki-corpus.json"

type webpkiCorpus struct {
	Verifier string        `json:"verifier"`
	Entries  []corpusEntry `json:"entries"`
}

type corpusEntry struct {
	Name  string `json:"name"`
	About string `json:"about"`
	VerifyRequest
	Verdict Verdict `json:"verdict"`
}

// TestWebpkiCorpus: the oracle's model and the operator's path finder give, on every recorded
// chain, the verdict the real rustls-webpki gave.
func TestWebpkiCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	recorded := map[string]bool{}
	for _, e := range corpus.Entries {
		recorded[e.Name] = true
	}
	for _, s := range corpusShapes(t, time.Now()) {
		if !recorded[s.name] && !recorded[s.name+"/server"] {
			t.Errorf("%s has no entry %s (%s): record it again (-update with %s)", corpusFile, s.name, s.about, reallinkerd.EnvVerifier)
		}
	}
	agreedPaths := 0
	for _, e := range corpus.Entries {
		roots, chain := e.certificates(t)
		now, usage := time.Unix(e.Time, 0), e.usage()
		model := webpkiVerify(webpkiLeaf{cert: chain[0], issuer: chain[0].RawIssuer}, chain[1:], roots, now, usage)
		if (model == nil) != e.Verdict.OK {
			t.Errorf("%s (%s): rustls-webpki %s, the model %v", e.Name, e.About, e.Verdict, orAccepted(model))
			continue
		}
		if got, want := modelKind(model), normalKind(e.Verdict.Kind); got != want {
			t.Errorf("%s (%s): rustls-webpki refuses it with %s (%s), the model with %v", e.Name, e.About, e.Verdict.Kind, e.Verdict.Error, model)
		}
		// The path finder starts at the leaf's issuer: where the leaf itself is fine and
		// presented with its issuer first, it must find a path only if the proxy accepts the
		// chain, and find one whenever the proxy accepts it through that issuer.
		if !leafFine(chain, now, usage) {
			continue
		}
		path, _, ok := steps.BridgePath(chain[1], chain[2:], roots, now, webpkiMaxSubCAs)
		switch {
		case ok && !e.Verdict.OK:
			t.Errorf("%s (%s): steps.BridgePath found a path (%s) that rustls-webpki refuses: %s", e.Name, e.About, names(path), e.Verdict.Error)
		case !ok && e.Verdict.OK && onlyThroughIssuer(chain, roots) && !lacksCertSign(chain[2:]):
			t.Errorf("%s (%s): rustls-webpki accepts it, steps.BridgePath finds no path from the leaf's issuer", e.Name, e.About)
		case ok == e.Verdict.OK:
			agreedPaths++
		}
	}
	t.Logf("%d entries of %s (%s) replayed; steps.BridgePath agreed on %d", len(corpus.Entries), corpusFile, corpus.Verifier, agreedPaths)
}

func orAccepted(err error) string {
	if err == nil {
		return "accepted"
	}
	return "rejected: " + err.Error()
}

// leafFine: the leaf is valid at now, no CA, fit for usage and signed by the certificate
// presented after it.
func leafFine(chain []*x509.Certificate, now time.Time, usage x509.ExtKeyUsage) bool {
	if len(chain) < 2 || chain[0].CheckSignatureFrom(chain[1]) != nil {
		return false
	}
	v := &webpkiPath{now: now.Truncate(time.Second), usage: usage}
	return v.checkCert(chain[0], false, 0) == nil
}

// onlyThroughIssuer: no anchor and no other presented certificate has the leaf's issuer's
// subject, so any path the proxy finds goes through the presented issuer.
func onlyThroughIssuer(chain, roots []*x509.Certificate) bool {
	same := func(c *x509.Certificate) bool { return string(c.RawSubject) == string(chain[0].RawIssuer) }
	return !slices.ContainsFunc(roots, same) && !slices.ContainsFunc(chain[2:], same)
}

// lacksCertSign: a presented CA whose keyUsage lacks keyCertSign, through which BridgePath, on
// the safe side, takes no step (see its doc).
func lacksCertSign(certs []*x509.Certificate) bool {
	return slices.ContainsFunc(certs, func(c *x509.Certificate) bool {
		return c.IsCA && c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0
	})
}

func loadCorpus(t *testing.T) webpkiCorpus {
	t.Helper()
	raw, err := os.ReadFile(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	var c webpkiCorpus
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v", corpusFile, err)
	}
	return c
}

func (e corpusEntry) usage() x509.ExtKeyUsage {
	if e.Usage == "client" {
		return x509.ExtKeyUsageClientAuth
	}
	return x509.ExtKeyUsageServerAuth
}

func (e corpusEntry) certificates(t *testing.T) (roots, chain []*x509.Certificate) {
	t.Helper()
	parse := func(in []string) []*x509.Certificate {
		var out []*x509.Certificate
		for _, s := range in {
			der, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatalf("%s: %v", e.Name, err)
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatalf("%s: %v", e.Name, err)
			}
			out = append(out, c)
		}
		return out
	}
	return parse(e.Roots), parse(e.Chain)
}

// TestRecordWebpkiCorpus records the corpus again: with -update and WEBPKI_VERIFIER_BIN set,
// it makes every chain shape, asks the real verifier and writes the verdicts.
func TestRecordWebpkiCorpus(t *testing.T) {
	bin := reallinkerd.FromEnv().Verifier
	if !*updateCorpus || bin == "" {
		t.Skipf("records %s only with -update and %s set", corpusFile, reallinkerd.EnvVerifier)
	}
	v, err := StartVerifier(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	now := time.Now().Truncate(time.Second)
	corpus := webpkiCorpus{Verifier: v.Version()}
	for _, s := range corpusShapes(t, now) {
		for _, usage := range s.usages() {
			e := corpusEntry{Name: s.name, About: s.about, VerifyRequest: NewVerifyRequest(s.roots, s.chain, now, usage)}
			if len(s.usages()) > 1 {
				e.Name += "/" + e.Usage
			}
			if e.Verdict, err = v.Verify(e.VerifyRequest); err != nil {
				t.Fatalf("%s: %v", e.Name, err)
			}
			corpus.Entries = append(corpus.Entries, e)
		}
	}
	out, err := json.MarshalIndent(corpus, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(corpusFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corpusFile, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, e := range corpus.Entries {
		if e.Verdict.OK {
			accepted++
		}
	}
	t.Logf("recorded %d entries with %s: %d accepted, %d refused", len(corpus.Entries), v.Version(), accepted, len(corpus.Entries)-accepted)
}

// corpusShape is one chain to record: roots, the chain (end entity first) and the purposes.
type corpusShape struct {
	name, about string
	roots       []*x509.Certificate
	chain       []*x509.Certificate
	bothWays    bool
}

func (s corpusShape) usages() []x509.ExtKeyUsage {
	if s.bothWays {
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
}

// corpusCA is a key and, once issued, its certificate.
type corpusCA struct {
	name string
	key  crypto.Signer
	cert *x509.Certificate
}

// certOpts shape one certificate of the corpus.
type certOpts struct {
	notBefore, notAfter time.Time
	isCA                bool
	maxPathLen          int // -1: none
	keyUsage            x509.KeyUsage
	extKeyUsage         []x509.ExtKeyUsage
	dns                 []string
	alg                 x509.SignatureAlgorithm
}

type corpusMaker struct {
	t   *testing.T
	now time.Time
}

func (m corpusMaker) key() crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		m.t.Fatal(err)
	}
	return k
}

func (m corpusMaker) caOpts() certOpts {
	return certOpts{notBefore: m.now.Add(-time.Hour), notAfter: m.now.Add(240 * time.Hour), isCA: true, maxPathLen: -1,
		keyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
}

func (m corpusMaker) leafOpts() certOpts {
	return certOpts{notBefore: m.now.Add(-time.Minute), notAfter: m.now.Add(24 * time.Hour), maxPathLen: -1,
		keyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		extKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		dns:         []string{"web.emojivoto.serviceaccount.identity.linkerd.cluster.local"}}
}

// sign certifies subject's key under name, signed by signer (itself when signer is nil).
func (m corpusMaker) sign(subject *corpusCA, signer *corpusCA, o certOpts) *x509.Certificate {
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(mrand.Int64()), Subject: pkix.Name{CommonName: subject.name},
		NotBefore: o.notBefore, NotAfter: o.notAfter, IsCA: o.isCA, BasicConstraintsValid: true,
		KeyUsage: o.keyUsage, ExtKeyUsage: o.extKeyUsage, DNSNames: o.dns, SignatureAlgorithm: o.alg,
	}
	if o.maxPathLen >= 0 {
		tmpl.MaxPathLen, tmpl.MaxPathLenZero = o.maxPathLen, o.maxPathLen == 0
	}
	parent, key := tmpl, subject.key
	if signer != nil {
		parent, key = &x509.Certificate{Subject: pkix.Name{CommonName: signer.name}, PublicKey: signer.key.Public()}, signer.key
		if signer.cert != nil {
			parent = signer.cert
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, subject.key.Public(), key)
	if err != nil {
		m.t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		m.t.Fatal(err)
	}
	return c
}

// anchor is a self-signed CA; issuer a CA signed by signer; leaf a workload certificate.
func (m corpusMaker) anchor(name string, o certOpts) *corpusCA {
	ca := &corpusCA{name: name, key: m.key()}
	ca.cert = m.sign(ca, nil, o)
	return ca
}

func (m corpusMaker) issuer(name string, signer *corpusCA, o certOpts) *corpusCA {
	ca := &corpusCA{name: name, key: m.key()}
	ca.cert = m.sign(ca, signer, o)
	return ca
}

func (m corpusMaker) leaf(signer *corpusCA, o certOpts) *x509.Certificate {
	return m.sign(&corpusCA{name: "web.emojivoto.serviceaccount.identity.linkerd.cluster.local", key: m.key()}, signer, o)
}

// corpusShapes makes every chain the corpus records: the rotations' shapes, the hostile ones,
// and random PKIs (randomPKI, the path finder's own test generator).
func corpusShapes(t *testing.T, now time.Time) []corpusShape {
	m := corpusMaker{t: t, now: now}
	const rootName, issuerName = "root.linkerd.cluster.local", "identity.linkerd.cluster.local"
	ca, leafO := m.caOpts(), m.leafOpts()
	with := func(o certOpts, f func(*certOpts)) certOpts { f(&o); return o }
	certs := func(cs ...*x509.Certificate) []*x509.Certificate { return cs }

	a1 := m.anchor(rootName, ca)
	i1 := m.issuer(issuerName, a1, ca)
	a2 := m.anchor(rootName, ca) // cert-manager's renewal of the anchor: same name, new key
	i2 := m.issuer(issuerName, a2, ca)
	l1, l2 := m.leaf(i1, leafO), m.leaf(i2, leafO)
	// cross-signed: the cross-certificate has A2's subject and key, signed by A1's key.
	cross12 := m.sign(&corpusCA{name: rootName, key: a2.key}, a1, ca)
	a3 := m.anchor(rootName, ca)
	i3 := m.issuer(issuerName, a3, ca)
	cross23 := m.sign(&corpusCA{name: rootName, key: a3.key}, a2, ca)
	l3 := m.leaf(i3, leafO)
	// Linkerd's hand-made PKI (step certificate create root.linkerd.cluster.local …; docs'
	// "Generating your own mTLS root certificates") beside cert-manager's anchor.
	hand := m.anchor(rootName, with(ca, func(o *certOpts) { o.maxPathLen = 1 }))
	handIssuer := m.issuer(issuerName, hand, with(ca, func(o *certOpts) { o.maxPathLen = 0 }))
	lHand := m.leaf(handIssuer, leafO)
	expiredA1 := m.anchor(rootName, with(ca, func(o *certOpts) { o.notBefore, o.notAfter = now.Add(-48*time.Hour), now.Add(-time.Hour) }))
	iUnderExpired := m.issuer(issuerName, expiredA1, ca)
	expiredIssuer := m.issuer(issuerName, a1, with(ca, func(o *certOpts) { o.notAfter = now.Add(-time.Minute) }))
	futureCross := m.sign(&corpusCA{name: rootName, key: a2.key}, a1, with(ca, func(o *certOpts) { o.notBefore = now.Add(time.Hour) }))
	expiredCross := m.sign(&corpusCA{name: rootName, key: a2.key}, a1, with(ca, func(o *certOpts) { o.notAfter = now.Add(-time.Second) }))
	// The recovery's bridge (docs/design/recovery.md, case 3): A2's subject and key signed by
	// the expired A1, with a validity of its own, as cert-manager's CA issuer signs under an
	// expired CA.
	bridgeFromExpired := m.sign(&corpusCA{name: rootName, key: a2.key}, expiredA1, ca)
	expiredBridgeFromExpired := m.sign(&corpusCA{name: rootName, key: a2.key}, expiredA1, with(ca, func(o *certOpts) { o.notAfter = now.Add(-time.Second) }))
	// A loop: X certified by Y's key and Y by X's, neither anchored.
	x, y := &corpusCA{name: "x.example", key: m.key()}, &corpusCA{name: "y.example", key: m.key()}
	xByY, yByX := m.sign(x, y, ca), m.sign(y, x, ca)
	loopIssuer := m.issuer(issuerName, x, ca)
	// A line of CAs under A1: webpki allows six certificates between the leaf and the anchor.
	line := func(n int) (*corpusCA, []*x509.Certificate) {
		signer, presented := a1, []*x509.Certificate(nil)
		for i := range n {
			next := m.issuer(fmt.Sprintf("link-%d.example", i), signer, ca)
			presented = append([]*x509.Certificate{next.cert}, presented...)
			signer = next
		}
		return signer, presented
	}
	top6, line6 := line(5) // five links, then the issuer: six
	issuer6 := m.issuer(issuerName, top6, ca)
	top7, line7 := line(6)
	issuer7 := m.issuer(issuerName, top7, ca)
	notCA := m.issuer(issuerName, a1, with(ca, func(o *certOpts) { o.isCA = false; o.keyUsage = x509.KeyUsageDigitalSignature }))
	noCertSign := m.issuer(issuerName, a1, with(ca, func(o *certOpts) { o.keyUsage = x509.KeyUsageDigitalSignature }))
	pathLen0 := m.issuer("intermediate.example", a1, with(ca, func(o *certOpts) { o.maxPathLen = 0 }))
	underPathLen0 := m.issuer(issuerName, pathLen0, ca)
	rsaRoot := &corpusCA{name: rootName}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaRoot.key = rk
	rsaRoot.cert = m.sign(rsaRoot, nil, ca)
	underRSA := m.issuer(issuerName, rsaRoot, ca)

	shapes := []corpusShape{
		{name: "standard", about: "anchor, issuer, leaf: the mesh between rotations", roots: certs(a1.cert), chain: certs(l1, i1.cert), bothWays: true},
		{name: "standard-expanded-old-leaf", about: "roots [A2, A1] after the bundle's expansion, a leaf of the old issuer", roots: certs(a2.cert, a1.cert), chain: certs(l1, i1.cert), bothWays: true},
		{name: "standard-expanded-new-leaf", about: "roots [A2, A1], a leaf of the new issuer: the anchors share a subject, webpki tries both", roots: certs(a1.cert, a2.cert), chain: certs(l2, i2.cert), bothWays: true},
		{name: "standard-new-leaf-old-roots", about: "a leaf of the new issuer at a pod that trusts A1 alone: the outage the order prevents", roots: certs(a1.cert), chain: certs(l2, i2.cert)},
		{name: "standard-old-leaf-reduced-roots", about: "a leaf of the old issuer at a pod whose roots were reduced to A2", roots: certs(a2.cert), chain: certs(l1, i1.cert)},
		{name: "cross-signed-bridge", about: "the new issuer presented with the cross-certificate (A2's key signed by A1) at a pod that trusts A1 alone", roots: certs(a1.cert), chain: certs(l2, i2.cert, cross12), bothWays: true},
		{name: "cross-signed-bridge-new-roots", about: "the bridged chain at a pod that trusts A2 alone: the anchor ends the path before the cross-certificate", roots: certs(a2.cert), chain: certs(l2, i2.cert, cross12)},
		{name: "cross-signed-bridge-expired", about: "the bridge expired: a pod on A1 alone refuses the new issuer", roots: certs(a1.cert), chain: certs(l2, i2.cert, expiredCross)},
		{name: "cross-signed-bridge-not-yet-valid", about: "a cross-certificate not valid yet", roots: certs(a1.cert), chain: certs(l2, i2.cert, futureCross)},
		{name: "superseded-two-bridges", about: "a rotation superseded mid-way: A3's issuer presented with A3-by-A2 and A2-by-A1, at a pod on A1", roots: certs(a1.cert), chain: certs(l3, i3.cert, cross23, cross12)},
		{name: "superseded-bridges-reversed", about: "the two bridges presented in the other order", roots: certs(a1.cert), chain: certs(l3, i3.cert, cross12, cross23)},
		{name: "superseded-one-bridge-missing", about: "A3's issuer with A3-by-A2 only, at a pod on A1", roots: certs(a1.cert), chain: certs(l3, i3.cert, cross23)},
		{name: "takeover-hand-made-leaf", about: "roots [cert-manager's anchor, Linkerd's hand-made anchor], a leaf of the hand-made issuer (pathLen 0 under pathLen 1)", roots: certs(a1.cert, hand.cert), chain: certs(lHand, handIssuer.cert), bothWays: true},
		{name: "takeover-cert-manager-leaf", about: "the same roots, a leaf of cert-manager's issuer", roots: certs(a1.cert, hand.cert), chain: certs(l1, i1.cert)},
		{name: "takeover-hand-made-roots-only", about: "a cert-manager leaf at a pod still on the hand-made anchor alone", roots: certs(hand.cert), chain: certs(l1, i1.cert)},
		{name: "expired-issuer", about: "the issuer expired, the anchor valid (recovery case 2): the leaf, issued before, still in its validity", roots: certs(a1.cert), chain: certs(m.leaf(expiredIssuer, leafO), expiredIssuer.cert)},
		{name: "expired-anchor", about: "the anchor expired (recovery case 3): webpki never looks at a trust anchor's validity", roots: certs(expiredA1.cert), chain: certs(m.leaf(iUnderExpired, leafO), iUnderExpired.cert), bothWays: true},
		{name: "expired-anchor-recovery-new-leaf", about: "roots [A2, expired A1] during the recovery, a leaf of the new issuer", roots: certs(a2.cert, expiredA1.cert), chain: certs(l2, i2.cert)},
		{name: "expired-anchor-recovery-old-leaf", about: "roots [A2, expired A1], a leaf still valid of the issuer under A1", roots: certs(a2.cert, expiredA1.cert), chain: certs(m.leaf(iUnderExpired, leafO), iUnderExpired.cert)},
		{name: "expired-anchor-bridge", about: "the recovery's bridge (A2's key signed by the expired A1, itself valid) after the new issuer, at a pod that trusts the expired A1 alone: the anchor's validity is not checked, the bridge's is", roots: certs(expiredA1.cert), chain: certs(l2, i2.cert, bridgeFromExpired), bothWays: true},
		{name: "expired-anchor-bridge-expired", about: "the same with the bridge expired too: refused for the bridge's validity", roots: certs(expiredA1.cert), chain: certs(l2, i2.cert, expiredBridgeFromExpired)},
		{name: "expired-anchor-bridge-both-roots", about: "the bridged chain at a pod on [A2, expired A1]", roots: certs(a2.cert, expiredA1.cert), chain: certs(l2, i2.cert, bridgeFromExpired)},
		{name: "expired-leaf", about: "the leaf expired", roots: certs(a1.cert), chain: certs(m.leaf(i1, with(leafO, func(o *certOpts) { o.notAfter = now.Add(-time.Second) })), i1.cert)},
		{name: "not-yet-valid-leaf", about: "a leaf not valid yet (clock skew beyond identity's backdating)", roots: certs(a1.cert), chain: certs(m.leaf(i1, with(leafO, func(o *certOpts) { o.notBefore = now.Add(time.Minute) })), i1.cert)},
		{name: "loop-of-cross-certificates", about: "X by Y and Y by X presented, neither anchored: no path, and the search ends", roots: certs(a1.cert), chain: certs(m.leaf(loopIssuer, leafO), loopIssuer.cert, xByY, yByX)},
		{name: "path-of-six", about: "six certificates between the leaf and the anchor: webpki's most", roots: certs(a1.cert), chain: append(certs(m.leaf(issuer6, leafO), issuer6.cert), line6...)},
		{name: "path-of-seven", about: "seven certificates between the leaf and the anchor: one more than webpki allows", roots: certs(a1.cert), chain: append(certs(m.leaf(issuer7, leafO), issuer7.cert), line7...)},
		{name: "wrong-san", about: "a leaf for another identity: webpki, as the proxy calls it, checks no name (the proxy compares the identity after the handshake, meshtls verifier verify_id)", roots: certs(a1.cert), chain: certs(m.leaf(i1, with(leafO, func(o *certOpts) { o.dns = []string{"evil.example"} })), i1.cert)},
		{name: "ca-false-issuer", about: "the issuer is not a CA (basicConstraints CA:false)", roots: certs(a1.cert), chain: certs(m.leaf(notCA, leafO), notCA.cert)},
		{name: "issuer-without-keycertsign", about: "a CA issuer whose keyUsage lacks keyCertSign", roots: certs(a1.cert), chain: certs(m.leaf(noCertSign, leafO), noCertSign.cert)},
		{name: "leaf-signed-by-anchor", about: "a leaf signed by the anchor directly, presented alone", roots: certs(a1.cert), chain: certs(m.leaf(a1, leafO)), bothWays: true},
		{name: "leaf-is-a-ca", about: "the end entity is a CA certificate", roots: certs(a1.cert), chain: certs(m.leaf(i1, with(leafO, func(o *certOpts) { o.isCA = true; o.keyUsage |= x509.KeyUsageCertSign })), i1.cert)},
		{name: "leaf-server-auth-only", about: "a leaf with extendedKeyUsage serverAuth alone", roots: certs(a1.cert), chain: certs(m.leaf(i1, with(leafO, func(o *certOpts) { o.extKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} })), i1.cert), bothWays: true},
		{name: "leaf-without-eku", about: "a leaf with no extendedKeyUsage extension", roots: certs(a1.cert), chain: certs(m.leaf(i1, with(leafO, func(o *certOpts) { o.extKeyUsage = nil })), i1.cert), bothWays: true},
		{name: "issuer-pathlen-0", about: "an issuer with pathLenConstraint 0 signing the leaf", roots: certs(hand.cert), chain: certs(lHand, handIssuer.cert)},
		{name: "pathlen-0-above-issuer", about: "a CA with pathLenConstraint 0 above the issuer", roots: certs(a1.cert), chain: certs(m.leaf(underPathLen0, leafO), underPathLen0.cert, pathLen0.cert)},
		{name: "rsa-anchor", about: "an ECDSA issuer under an RSA-2048 anchor", roots: certs(rsaRoot.cert), chain: certs(m.leaf(underRSA, leafO), underRSA.cert)},
		{name: "unrelated-anchor", about: "a chain to an anchor the pod does not hold", roots: certs(a3.cert), chain: certs(l1, i1.cert)},
		{name: "issuer-not-presented", about: "the leaf alone, its issuer not presented", roots: certs(a1.cert), chain: certs(l1)},
	}
	rng := mrand.New(mrand.NewPCG(46, 103))
	for i := range 120 {
		g := randomPKI(t, rng, now)
		leaf := g.issue(t, g.head, "leaf", now.Add(-time.Minute), now.Add(time.Hour), false)
		shapes = append(shapes, corpusShape{name: fmt.Sprintf("random-%03d", i), about: "random PKI: " + fmt.Sprint(g.desc),
			roots: g.roots, chain: append([]*x509.Certificate{leaf.cert, g.head.cert}, g.presented...)})
	}
	return shapes
}
