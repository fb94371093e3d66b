package meshsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// TestIdentityMatchesLinkerd replays what the real identity controller did with each issuer of
// reallinkerd.IssuerCases — started with it, and hot-reloaded to it from one that verifies —
// recorded in testdata/linkerd-identity/issuers.json (test/reallinkerd records it again with
// -update), against the simulator's identity: whether it accepts the issuer, and the message
// it logs (at start the cause of its exit, at a reload its Event's message).
func TestIdentityMatchesLinkerd(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "linkerd-identity", "issuers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Comment, Linkerd string
		Cases            []struct {
			Issuer, At, Message string
			Accepted            bool
		}
		Certify certifyRecord
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	rootsPEM, cases, err := reallinkerd.IssuerCases()
	if err != nil {
		t.Fatal(err)
	}
	roots, err := parseRoots(string(rootsPEM))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]reallinkerd.IssuerCase{}
	for _, c := range cases {
		byName[c.Name] = c
	}
	if len(rec.Cases) != 2*len(cases) {
		t.Errorf("the recording has %d verdicts, want a start and a reload for each of the %d issuers", len(rec.Cases), len(cases))
	}
	const startPrefix = "Failed to initialize identity service: "
	for _, r := range rec.Cases {
		ic, ok := byName[r.Issuer]
		if !ok {
			t.Errorf("the recording names an issuer %q that reallinkerd.IssuerCases no longer makes: record again", r.Issuer)
			continue
		}
		_, err := loadIssuer(ic.Crt, ic.Key, roots.pool, issuerExpectedName(DefaultLinkerdNamespace, DefaultTrustDomain), time.Now())
		var msg string
		switch r.At {
		case "start":
			if err != nil {
				msg = startPrefix + err.Error()
			}
		case "reload":
			msg = issuerReloadMessage(err)
		default:
			t.Errorf("%q: unknown moment %q", r.Issuer, r.At)
			continue
		}
		if accepted := err == nil; accepted != r.Accepted {
			t.Errorf("issuer %q at %s: accepted: simulator %v, linkerd %s %v", r.Issuer, r.At, accepted, rec.Linkerd, r.Accepted)
		}
		if msg != r.Message {
			t.Errorf("issuer %q at %s: message: simulator %q, linkerd %s %q", r.Issuer, r.At, msg, rec.Linkerd, r.Message)
		}
	}
	if !strings.HasPrefix(rec.Comment, "Recorded by") {
		t.Errorf("the recording has no header saying how it was made")
	}
	got, err := certifyLikeTheRecording(roots, byName[rec.Certify.Issuer], rec.Certify.Identity)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffFields(got, &rec.Certify) {
		t.Errorf("Certify with issuer %q: %s (linkerd %s)", rec.Certify.Issuer, d, rec.Linkerd)
	}
}

// certifyRecord is what the real identity returned to Certify, in terms of the issuer's tls.crt
// (test/reallinkerd recordCertify). The leaf's CN is the CSR's subject, which the recording's
// client sets to the identity.
type certifyRecord struct {
	Issuer                   string   `json:"issuer"`
	Identity                 string   `json:"identity"`
	LeafDNSNames             []string `json:"leafDNSNames"`
	LeafCommonName           string   `json:"leafCommonName"`
	Validity                 string   `json:"validity"`
	ValidUntilIsLeafNotAfter bool     `json:"validUntilIsLeafNotAfter"`
	KeyUsage                 int      `json:"keyUsage"`
	ExtKeyUsage              string   `json:"extKeyUsage"`
	Intermediates            []string `json:"intermediates"`
}

// certifyLikeTheRecording signs a certificate with the simulator's identity (certify's
// signLeaf, with the lifetime and skew the recorded install renders: 24h and 20s) and
// describes it as the recording does. The simulator's validUntil is its leaf's NotAfter.
func certifyLikeTheRecording(roots *rootSet, ic reallinkerd.IssuerCase, identity string) (*certifyRecord, error) {
	creds, err := loadIssuer(ic.Crt, ic.Key, roots.pool, issuerExpectedName(DefaultLinkerdNamespace, DefaultTrustDomain), time.Now())
	if err != nil {
		return nil, err
	}
	key, err := newLeafKey()
	if err != nil {
		return nil, err
	}
	chain, err := signLeaf(creds, identity, &key.PublicKey, time.Now(), 24*time.Hour, 20*time.Second)
	if err != nil {
		return nil, err
	}
	leaf := chain[0]
	r := &certifyRecord{Issuer: ic.Name, Identity: identity, LeafDNSNames: leaf.DNSNames, LeafCommonName: leaf.Subject.CommonName,
		Validity: leaf.NotAfter.Sub(leaf.NotBefore).String(), ValidUntilIsLeafNotAfter: true,
		KeyUsage: int(leaf.KeyUsage), ExtKeyUsage: fmt.Sprint(leaf.ExtKeyUsage)}
	tlsCrt, err := ParseCertificates(ic.Crt)
	if err != nil {
		return nil, err
	}
	for _, c := range chain[1:] {
		where := "not in tls.crt"
		for i, t := range tlsCrt {
			if t.Equal(c) {
				where = fmt.Sprintf("tls.crt[%d]", i)
			}
		}
		r.Intermediates = append(r.Intermediates, where)
	}
	return r, nil
}

// diffFields lists the JSON fields where got and want differ.
func diffFields(got, want *certifyRecord) []string {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gm, wm map[string]any
	_ = json.Unmarshal(g, &gm)
	_ = json.Unmarshal(w, &wm)
	var diffs []string
	for k, wv := range wm {
		if fmt.Sprint(gm[k]) != fmt.Sprint(wv) {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %v, linkerd %v", k, gm[k], wv))
		}
	}
	sort.Strings(diffs)
	return diffs
}
