package cli

import (
	"encoding/json"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// readOnlyCommands are the commands that only read the cluster, in each output format.
var readOnlyCommands = [][]string{
	{"bundle"}, {"bundle", "-o", "json"},
	{"check"}, {"check", "--pre"}, {"check", "--proxy", "-o", "json"},
	{"inspect"}, {"inspect", "-o", "json"},
	{"plan"}, {"plan", "-o", "json"},
}

// adoptCertificates makes the anchor's and the issuer's Certificates look as cert-manager leaves
// Secrets it adopted without issuing: no status.revision, no CertificateRequest. Only the
// Secrets hold the certificates then.
func adoptCertificates(f *fixture) {
	for _, ref := range [][2]string{{"cert-manager", "linkerd-trust-anchor"}, {"linkerd", "linkerd-identity-issuer"}} {
		f.remove(&cmapi.CertificateRequest{}, ref[0], ref[1]+"-1")
		f.certificate(ref[0], ref[1]).Status.Revision = nil
	}
}

// The read-only commands take the certificates from the CertificateRequests, the trust bundle
// and the TrustAnchorRotation: not one request for a Secret, in a rotation or out of one. Where
// only the Secrets hold them, the same commands do read the Secrets (so this test can fail).
func TestReadOnlyCommandsReadNoSecret(t *testing.T) {
	for name, setup := range map[string]func(*fixture){
		"synced":         func(*fixture) {},
		"mid-rotation":   (*fixture).midRotation,
		"plan a renewal": nil,
	} {
		t.Run(name, func(t *testing.T) {
			cmds := readOnlyCommands
			if setup == nil {
				setup, cmds = func(*fixture) {}, [][]string{{"plan", "--assume-anchor-renewed"}}
			}
			for _, args := range cmds {
				f := newFixture(t)
				setup(f)
				if _, errOut, code := f.run(args...); code != ExitOK {
					t.Fatalf("%v: exit code %d: %s", args, code, errOut)
				}
				if got := f.secretRequests(); len(got) > 0 {
					t.Errorf("%v requested Secrets: %v", args, got)
				}
			}
		})
	}
	f := newFixture(t)
	adoptCertificates(f)
	if _, errOut, code := f.run("check"); code != ExitOK {
		t.Fatalf("check on adopted Secrets: exit code %d: %s", code, errOut)
	}
	want := []string{"get cert-manager/linkerd-trust-anchor", "get linkerd/linkerd-identity-issuer"}
	if got := f.secretRequests(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("check on adopted Secrets requested %v, want %v", got, want)
	}
}

// A Secret the user may not read, where nothing else holds its certificate, is a warning that
// names it and says why, not a failure; except for bundle, which cannot render without the
// anchor.
func TestForbiddenSecretsAreWarnings(t *testing.T) {
	newForbidden := func(t *testing.T) *fixture {
		f := newFixture(t)
		adoptCertificates(f)
		f.forbid = []string{"secrets"}
		return f
	}
	const anchorProblem = "trust-anchor Secret cert-manager/linkerd-trust-anchor: Certificate cert-manager/linkerd-trust-anchor has issued no CertificateRequest (status.revision is not set), and reading the Secret is forbidden"
	const issuerProblem = "identity-issuer Secret linkerd/linkerd-identity-issuer: Certificate linkerd/linkerd-identity-issuer has issued no CertificateRequest (status.revision is not set), and reading the Secret is forbidden"

	t.Run("check", func(t *testing.T) {
		out, errOut, code := newForbidden(t).run("check", "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit code %d, want %d: %s\n%s", code, ExitOK, errOut, out)
		}
		var co struct {
			Categories []struct {
				Checks []struct{ Description, Result, Error string } `json:"checks"`
			} `json:"categories"`
		}
		if err := json.Unmarshal([]byte(out), &co); err != nil {
			t.Fatal(err)
		}
		warned := map[string]string{}
		for _, cat := range co.Categories {
			for _, ch := range cat.Checks {
				if ch.Result != "success" {
					warned[ch.Description] = ch.Result + ": " + ch.Error
				}
			}
		}
		for desc, want := range map[string]string{
			"trust anchor is a valid CA certificate":                                   anchorProblem,
			"trust anchor is not about to expire":                                      anchorProblem,
			"ConfigMap linkerd-identity-trust-roots contains the current trust anchor": anchorProblem,
			"identity issuer is valid and renewed on time":                             issuerProblem,
			"identity issuer chains to an anchor in the trust bundle":                  issuerProblem,
		} {
			if got := warned[desc]; !strings.HasPrefix(got, "warning: "+want) {
				t.Errorf("%s: %q, want a warning %q", desc, got, want)
			}
			delete(warned, desc)
		}
		if len(warned) > 0 {
			t.Errorf("other checks did not pass: %v", warned)
		}
	})
	t.Run("inspect", func(t *testing.T) {
		out, errOut, code := newForbidden(t).run("inspect", "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit code %d: %s", code, errOut)
		}
		var in inspection
		if err := json.Unmarshal([]byte(out), &in); err != nil {
			t.Fatal(err)
		}
		if len(in.Live.Problems) != 2 || !strings.HasPrefix(in.Live.Problems[0], anchorProblem) || !strings.HasPrefix(in.Live.Problems[1], issuerProblem) {
			t.Errorf("problems %q, want the anchor's and the issuer's", in.Live.Problems)
		}
	})
	t.Run("plan", func(t *testing.T) {
		out, errOut, code := newForbidden(t).run("plan", "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit code %d: %s", code, errOut)
		}
		var p plan
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.TrustAnchor.Problem, "Secret cert-manager/linkerd-trust-anchor: Certificate") || !strings.Contains(p.TrustAnchor.Problem, "forbidden") {
			t.Errorf("trust anchor problem %q", p.TrustAnchor.Problem)
		}
		if len(p.Notes) != 2 || !strings.HasPrefix(p.Notes[0], anchorProblem) || !strings.HasPrefix(p.Notes[1], issuerProblem) {
			t.Errorf("notes %q, want the anchor's and the issuer's", p.Notes)
		}
	})
	t.Run("bundle without the anchor fails", func(t *testing.T) {
		out, errOut, code := newForbidden(t).run("bundle")
		if code != ExitFailure || out != "" || !strings.Contains(errOut, anchorProblem) {
			t.Errorf("exit code %d, stdout %q, stderr %q; want %d, nothing, %q", code, out, errOut, ExitFailure, anchorProblem)
		}
	})
	t.Run("bundle without the previous anchor warns", func(t *testing.T) {
		f := newFixture(t)
		delete(f.rotations, "cluster") // nothing names the previous anchor in the bundle
		f.forbid = []string{"secrets"}
		out, errOut, code := f.run("bundle", "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit code %d: %s", code, errOut)
		}
		var m configMapManifest
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		if got, want := m.Data[steps.TrustRootsKey], steps.RenderBundle(cert(t, "anchor-old")); got != want {
			t.Errorf("bundle %q, want the anchor alone", got)
		}
		want := "Warning: previous-anchor Secret linkerd/linkerd-previous-anchor: there is no TrustAnchorRotation status naming the previous anchor, and reading the Secret is forbidden"
		if !strings.HasPrefix(errOut, want) {
			t.Errorf("stderr %q, want %q", errOut, want)
		}
	})
	t.Run("bundle without the trust bundle reads the previous anchor's Secret", func(t *testing.T) {
		f := newFixture(t)
		f.midRotation()
		f.forbid = []string{"configmaps"}
		out, errOut, code := f.run("bundle", "-o", "json")
		if code != ExitOK || errOut != "" {
			t.Fatalf("exit code %d: %s", code, errOut)
		}
		var m configMapManifest
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		if got, want := m.Data[steps.TrustRootsKey], steps.RenderBundle(cert(t, "anchor-new"), cert(t, "anchor-old")); got != want {
			t.Errorf("bundle %q, want the new anchor and the previous one", got)
		}
		if got := f.secretRequests(); strings.Join(got, ",") != "get linkerd/linkerd-previous-anchor" {
			t.Errorf("Secret requests %v, want the previous anchor's alone", got)
		}
	})
}
