package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
)

// runRotate runs rotate over the fixture with stdin, a terminal or not, and reports whether it
// renewed the trust anchor's Certificate (a write to it), with its output and exit code.
func runRotate(f *fixture, stdin string, terminal bool, args ...string) (out string, code int, renewed bool) {
	var stdout, stderr bytes.Buffer
	env := f.env(&stdout, &stderr)
	env.In, env.InIsTerminal = strings.NewReader(stdin), func() bool { return terminal }
	var cms []*cmfake.Clientset
	clients := env.Clients
	env.Clients = func(k *KubeFlags) (*Clients, error) {
		cl, err := clients(k)
		if err == nil {
			cms = append(cms, cl.CertManager.(*cmfake.Clientset))
		}
		return cl, err
	}
	code = Main(context.Background(), append([]string{"rotate"}, args...), env)
	for _, cm := range cms {
		for _, a := range cm.Actions() {
			if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetResource().Resource == "certificates" {
				renewed = true
			}
		}
	}
	return stdout.String() + stderr.String(), code, renewed
}

// rotate previews the rotation on a terminal: it prints the plan and renews only once the user
// says yes; --dry-run prints the plan and renews nothing; --yes, or no terminal (a script, the
// chart's CronJob), renews without asking or planning.
func TestRotatePreviewsAndAsks(t *testing.T) {
	const plan = "step expand-trust-bundle"
	cases := []struct {
		name     string
		stdin    string
		terminal bool
		args     []string
		renews   bool
		says     []string
		code     int
	}{
		{name: "terminal, no", stdin: "n\n", terminal: true, says: []string{plan, "[y/N]", "Not rotating: not confirmed"}, code: ExitFailure},
		{name: "terminal, nothing typed", stdin: "", terminal: true, says: []string{plan, "Not rotating: not confirmed"}, code: ExitFailure},
		{name: "terminal, yes", stdin: "yes\n", terminal: true, renews: true, says: []string{plan, "[y/N]", "Triggered the renewal"}},
		{name: "dry run", terminal: true, args: []string{"--dry-run"}, says: []string{plan, "Dry run", "Nothing was changed"}},
		{name: "dry run, no terminal", args: []string{"--dry-run"}, says: []string{plan, "Dry run"}},
		{name: "terminal, --yes", terminal: true, args: []string{"--yes"}, renews: true, says: []string{"Triggered the renewal"}},
		{name: "no terminal", renews: true, says: []string{"Triggered the renewal"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			out, code, renewed := runRotate(f, tc.stdin, tc.terminal, tc.args...)
			if code != tc.code || renewed != tc.renews {
				t.Fatalf("exit %d, renewed %t; want exit %d, renewed %t\n%s", code, renewed, tc.code, tc.renews, out)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			if !tc.terminal || tc.stdin == "" && len(tc.args) > 0 {
				if strings.Contains(out, "[y/N]") {
					t.Errorf("asked without a terminal, or with --yes/--dry-run:\n%s", out)
				}
			}
		})
	}
	f := newFixture(t)
	if _, code, renewed := runRotate(f, "", false, "--yes", "--dry-run"); code != ExitUsage || renewed {
		t.Errorf("--yes --dry-run: exit %d, renewed %t; want a usage error", code, renewed)
	}
}
