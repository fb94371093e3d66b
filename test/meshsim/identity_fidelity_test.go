package meshsim

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
}
