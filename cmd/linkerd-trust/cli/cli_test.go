package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/cmd/internal/version"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestGolden renders every command's every output format over fixed fixtures.
func TestGolden(t *testing.T) {
	cases := map[string]struct {
		setup    func(*fixture)
		args     []string
		wantCode int
	}{
		"bundle-yaml":               {args: []string{"bundle"}},
		"bundle-json":               {args: []string{"bundle", "-o", "json"}},
		"bundle-expanded-yaml":      {setup: (*fixture).midRotation, args: []string{"bundle"}},
		"check-table":               {args: []string{"check"}},
		"check-json":                {args: []string{"check", "-o", "json"}},
		"check-pre-table":           {args: []string{"check", "--pre"}},
		"check-proxy-table":         {setup: (*fixture).midRotation, args: []string{"check", "--proxy"}},
		"check-failing-table":       {setup: breakInstall, args: []string{"check"}, wantCode: 1},
		"check-failing-json":        {setup: breakInstall, args: []string{"check", "--output=json"}, wantCode: 1},
		"check-no-crds-table":       {setup: func(f *fixture) { f.discovery = f.discovery[1:] }, args: []string{"check", "--pre"}, wantCode: 1},
		"check-not-installed-table": {setup: withoutRotationCRD, args: []string{"check"}},
		"check-not-installed-json":  {setup: withoutRotationCRD, args: []string{"check", "-o", "json"}},
		"inspect-table":             {setup: (*fixture).midRotation, args: []string{"inspect"}},
		"inspect-json":              {setup: (*fixture).midRotation, args: []string{"inspect", "-o", "json"}},
		"inspect-synced-table":      {args: []string{"inspect"}},
		"inspect-rejected-table":    {setup: rejectedChains, args: []string{"inspect"}},
		"inspect-linked-table":      {setup: linkedMidRotation, args: []string{"inspect"}},
		"plan-linked-text":          {setup: linkedLive, args: []string{"plan"}},
		"check-linked-table":        {setup: linkedLive, args: []string{"check"}, wantCode: 1},
		"plan-text":                 {setup: (*fixture).midRotation, args: []string{"plan"}},
		"plan-json":                 {setup: (*fixture).midRotation, args: []string{"plan", "-o", "json"}},
		"plan-yaml":                 {setup: (*fixture).midRotation, args: []string{"plan", "-o", "yaml"}},
		"plan-synced-text":          {args: []string{"plan"}},
		"plan-assume-text":          {args: []string{"plan", "--assume-anchor-renewed"}},
		"plan-assume-json":          {args: []string{"plan", "--assume-anchor-renewed", "-o", "json"}},
		"plan-assume-yaml":          {args: []string{"plan", "--assume-anchor-renewed", "-o", "yaml"}},
		"plan-automated-text":       {setup: automated, args: []string{"plan"}},
		// Whole rotations, from Synced to the end, under the automations.
		"plan-assume-automatic-text": {setup: func(f *fixture) { automate(f, v1alpha1.RolloutRestart) }, args: []string{"plan", "--assume-anchor-renewed"}},
		"plan-assume-evict-text":     {setup: func(f *fixture) { automate(f, v1alpha1.Evict) }, args: []string{"plan", "--assume-anchor-renewed"}},
		"plan-assume-automatic-json": {setup: func(f *fixture) { automate(f, v1alpha1.RolloutRestart) }, args: []string{"plan", "--assume-anchor-renewed", "-o", "json"}},
		"plan-early-issuer-text":     {setup: issuerRenewedEarly, args: []string{"plan"}},
		"plan-assume-crosssigned-text": {setup: func(f *fixture) { automate(f, v1alpha1.RolloutRestart); crossSigned(f) },
			args: []string{"plan", "--assume-anchor-renewed"}},
		"inspect-crosssigned-table": {setup: crossSigned, args: []string{"inspect"}},
		"inspect-churn-table":       {setup: churning, args: []string{"inspect"}},
		"plan-superseded-text":      {setup: superseded, args: []string{"plan"}},
		"plan-no-rotation-text":     {setup: func(f *fixture) { delete(f.rotations, "cluster") }, args: []string{"plan"}},
		"extension-metadata":        {args: []string{"_extension-metadata"}},
		"inspect-watch-plain":       {args: []string{"inspect", "--watch"}},
		// The help: the global flags printed once, by the root; each command its own.
		"help-root":    {args: []string{"--help"}},
		"help-bundle":  {args: []string{"bundle", "--help"}},
		"help-check":   {args: []string{"check", "--help"}},
		"help-inspect": {args: []string{"inspect", "--help"}},
		"help-plan":    {args: []string{"plan", "--help"}},
		"help-rotate":  {args: []string{"rotate", "-h"}},
		"help-version": {args: []string{"help", "version"}},
		"help-wait":    {args: []string{"wait", "--help"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			out, errOut, code := f.run(tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, tc.wantCode, errOut)
			}
			if errOut != "" {
				t.Errorf("unexpected stderr:\n%s", errOut)
			}
			golden(t, name, out)
		})
	}
}

// TestWatchOnTerminal draws the live view with progress bars once and stops: the rotation is
// Synced and converged.
func TestWatchOnTerminal(t *testing.T) {
	f := newFixture(t)
	var out, errOut bytes.Buffer
	env := f.env(&out, &errOut)
	env.IsTerminal = func() bool { return true }
	if code := Main(context.Background(), []string{"inspect", "--watch"}, env); code != ExitOK {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	golden(t, "inspect-watch-tty", out.String())
}

// crossSigned sets spec.strategy CrossSigned.
func crossSigned(f *fixture) { f.rotations["cluster"].Spec.Strategy = v1alpha1.StrategyCrossSigned }

// churning is a cross-signed rotation in RemovingOldTrustRoots whose restart is left to churn,
// its deadline passed.
func churning(f *fixture) {
	crossSigned(f)
	tar := f.rotations["cluster"]
	since := metav1.NewTime(testNow.Add(-8 * 24 * time.Hour))
	tar.Status.Phase, tar.Status.LastPhaseTransitionTime = v1alpha1.PhaseRemovingOldTrustRoots, &since
	tar.Status.Checkpoint = &v1alpha1.Checkpoint{Step: steps.StepRemoveOldTrustRoots, Rotation: steps.Fingerprint(cert(f.t, "anchor-old")),
		Strategy: v1alpha1.StrategyCrossSigned, StartTime: &since}
	tar.Status.RestartDeadline = &v1alpha1.RestartDeadline{Deadline: metav1.NewTime(since.Add(7 * 24 * time.Hour)), Since: since,
		ChurnPeriod: metav1.Duration{Duration: 7 * 24 * time.Hour}}
	tar.Status.BlockingMessage = "Waiting for 1 pod(s) to converge on the reduced trust bundle; restart: emojivoto/Deployment/voting (1 pod)"
}

// automated is midRotation with both of the user's parts automated.
func automated(f *fixture) {
	f.midRotation()
	automate(f, v1alpha1.Evict)
}

// automate sets both automations of the spec, with the restart method, and adds the objects
// automatic restarts read: the fixture's workloads (the Deployments of its emojivoto pods), their
// namespace and a PodDisruptionBudget of web.
func automate(f *fixture, method v1alpha1.RestartMethod) {
	spec := &f.rotations["cluster"].Spec
	spec.DataPlaneRestart.Policy, spec.DataPlaneRestart.Method = v1alpha1.Automatic, method
	spec.IdentityIssuerRenewal = v1alpha1.Automatic
	web := available(deployment("emojivoto", "web", nil))
	web.Spec.Replicas = ptr.To[int32](2)
	web.Status.Replicas, web.Status.UpdatedReplicas, web.Status.ReadyReplicas, web.Status.AvailableReplicas = 2, 2, 2, 2
	web.Spec.Template.Labels = map[string]string{"app": "web"}
	f.kube = append(f.kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "emojivoto"}}, web,
		available(deployment("emojivoto", "voting", nil)),
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "emojivoto", Name: "web"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}})
}

// breakInstall removes the identity-issuer Certificate, sets rotationPolicy Never on the anchor,
// makes the anchor expire within the warning window, stops the operator and blocks the rotation.
func breakInstall(f *fixture) {
	t := f.t
	f.remove(&cmapi.Certificate{}, "linkerd", "linkerd-identity-issuer")
	for _, o := range f.cm {
		if c, ok := o.(*cmapi.Certificate); ok && c.Name == "linkerd-trust-anchor" {
			c.Spec.PrivateKey.RotationPolicy = cmapi.RotationPolicyNever
		}
	}
	f.issue("cert-manager", "linkerd-trust-anchor", certPEM(t, "anchor-soon"))
	d := deployment("linkerd", DefaultOperatorDeployment, nil)
	d.Status.Conditions = nil
	f.replace(d)
	since := metav1.NewTime(testNow.Add(-3 * 24 * 3600 * 1e9))
	tar := f.rotations["cluster"]
	tar.Status.Phase = v1alpha1.PhaseWaitingForIdentityRotation
	tar.Status.LastPhaseTransitionTime = &since
	tar.Status.BlockingMessage = "Waiting for the identity issuer to be renewed onto the new trust anchor: cmctl renew -n linkerd linkerd-identity-issuer"
	tar.Status.Conditions = append(tar.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionIdentityIssuerStale, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonIdentityIssuerStale, Message: "linkerd-identity still signs workload certificates with issuer 0a1b2c3d4e5f (expires 2026-06-02T12:00:00Z), not with issuer 5f4e3d2c1b0a ..."},
		metav1.Condition{Type: v1alpha1.ConditionWorkloadCertificatesExpiring, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonWorkloadCertificatesNotRenewed, Message: "1 meshed pod(s) present a workload certificate with less than 9% of its lifetime left: ..."})
	f.replace(ownedBundle(f, owner("helm", "Update", `{"f:data":{"f:ca-bundle.crt":{}}}`)))
}

// ownedBundle is the fixture's trust-bundle ConfigMap with the given managedFields.
func ownedBundle(f *fixture, entries ...metav1.ManagedFieldsEntry) *corev1.ConfigMap {
	for _, o := range f.kube {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == "linkerd-identity-trust-roots" {
			out := cm.DeepCopy()
			out.ManagedFields = entries
			return out
		}
	}
	f.t.Fatal("no trust-bundle ConfigMap in the fixture")
	return nil
}

func owner(manager, op, fields string) metav1.ManagedFieldsEntry {
	at := metav1.NewTime(testNow.Add(-time.Hour))
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationType(op), APIVersion: "v1",
		Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// TestCheckWarnsOfOtherBundleOwners checks that `check` warns, naming them, when field managers
// besides the operator own the trust bundle's ca-bundle.crt: their next write reverts it.
func TestCheckWarnsOfOtherBundleOwners(t *testing.T) {
	const key = `{"f:data":{"f:ca-bundle.crt":{}}}`
	const description = "ConfigMap linkerd-identity-trust-roots is written by the operator alone"
	cases := map[string]struct {
		owners []metav1.ManagedFieldsEntry
		want   []string // in the warning; none: success
	}{
		"the operator alone":       {owners: []metav1.ManagedFieldsEntry{owner(steps.FieldManager, "Apply", key)}},
		"no managedFields":         {},
		"helm owns only metadata":  {owners: []metav1.ManagedFieldsEntry{owner("helm", "Update", `{"f:metadata":{"f:labels":{}}}`), owner(steps.FieldManager, "Apply", key)}},
		"helm shares the bundle":   {owners: []metav1.ManagedFieldsEntry{owner("helm", "Update", key), owner(steps.FieldManager, "Apply", key)}, want: []string{`"helm" (Update at `, "ca-bundle.crt"}},
		"argocd and trust-manager": {owners: []metav1.ManagedFieldsEntry{owner("argocd-controller", "Apply", key), owner("trust-manager", "Apply", key)}, want: []string{`"argocd-controller" (Apply`, `"trust-manager" (Apply`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.replace(ownedBundle(f, tc.owners...))
			out, errOut, code := f.run("check", "--output=json")
			if code != 0 {
				t.Fatalf("exit code %d (a warning must not fail the check); stderr:\n%s", code, errOut)
			}
			var res struct {
				Categories []struct {
					Checks []struct{ Description, Result, Error string }
				}
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			found := false
			for _, cat := range res.Categories {
				for _, ch := range cat.Checks {
					if ch.Description != description {
						continue
					}
					found = true
					if len(tc.want) == 0 {
						if ch.Result != "success" {
							t.Errorf("result %s (%s), want success", ch.Result, ch.Error)
						}
						continue
					}
					if ch.Result != "warning" {
						t.Errorf("result %s, want warning", ch.Result)
					}
					for _, w := range tc.want {
						if !strings.Contains(ch.Error, w) {
							t.Errorf("warning %q does not contain %q", ch.Error, w)
						}
					}
				}
			}
			if !found {
				t.Fatalf("no check %q in:\n%s", description, out)
			}
		})
	}
}

// TestBundleErrors checks that each broken anchor fails with exit 1, a message naming the
// object and what is wrong, and nothing on stdout.
func TestBundleErrors(t *testing.T) {
	adopted := func(f *fixture) {
		// cert-manager adopted an existing Secret without issuing: no CertificateRequest.
		f.remove(&cmapi.CertificateRequest{}, "cert-manager", "linkerd-trust-anchor-1")
		f.certificate("cert-manager", "linkerd-trust-anchor").Status.Revision = nil
	}
	cases := map[string]struct {
		setup func(*fixture)
		want  string
	}{
		"the anchor was never issued": {
			setup: func(f *fixture) {
				f.remove(&cmapi.Certificate{}, "cert-manager", "linkerd-trust-anchor")
				f.remove(&corev1.Secret{}, "cert-manager", "linkerd-trust-anchor")
			},
			want: "trust-anchor Secret cert-manager/linkerd-trust-anchor not found (cert-manager writes it when it issues the Certificate cert-manager/linkerd-trust-anchor)",
		},
		"the CertificateRequest's certificate is not PEM": {
			setup: func(f *fixture) { f.issue("cert-manager", "linkerd-trust-anchor", []byte("garbage")) },
			want:  "trust-anchor Secret cert-manager/linkerd-trust-anchor: CertificateRequest cert-manager/linkerd-trust-anchor-2 status.certificate: no PEM CERTIFICATE block",
		},
		"the adopted Secret's tls.crt is not PEM": {
			setup: func(f *fixture) {
				adopted(f)
				f.replace(secret("cert-manager", "linkerd-trust-anchor", []byte("garbage")))
			},
			want: "trust-anchor Secret cert-manager/linkerd-trust-anchor: tls.crt: no PEM CERTIFICATE block",
		},
		"the anchor is not a CA": {
			setup: func(f *fixture) { f.issue("cert-manager", "linkerd-trust-anchor", certPEM(f.t, "not-ca")) },
			want:  "is not a CA certificate",
		},
		"the anchor expired": {
			setup: func(f *fixture) {
				f.issue("cert-manager", "linkerd-trust-anchor", certPEM(f.t, "anchor-expired"))
			},
			want: "expired at 2025-01-01T00:00:00Z",
		},
		"the previous anchor is broken, and no TrustAnchorRotation names one in the bundle": {
			setup: func(f *fixture) {
				delete(f.rotations, "cluster")
				f.replace(secret("linkerd", "linkerd-previous-anchor", []byte("garbage")))
			},
			want: "previous-anchor Secret linkerd/linkerd-previous-anchor: tls.crt: no PEM CERTIFICATE block (data is not PEM-encoded certificates); fix or delete it",
		},
		"the anchor cannot be read at all": {
			setup: func(f *fixture) {
				adopted(f)
				f.forbid = []string{"secrets"}
			},
			want: "trust-anchor Secret cert-manager/linkerd-trust-anchor: Certificate cert-manager/linkerd-trust-anchor has issued no CertificateRequest (status.revision is not set), and reading the Secret is forbidden: " +
				`secrets "linkerd-trust-anchor" is forbidden: User "alice" cannot get resource "secrets"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			out, errOut, code := f.run("bundle")
			if code != ExitFailure {
				t.Errorf("exit code %d, want %d", code, ExitFailure)
			}
			if out != "" {
				t.Errorf("stdout should be empty, got:\n%s", out)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q does not say %q", errOut, tc.want)
			}
		})
	}
}

// TestUsage checks help and exit codes of bad usage.
func TestUsage(t *testing.T) {
	f := newFixture(t)
	for _, cmd := range []string{"bundle", "check", "inspect", "plan", "version", "_extension-metadata"} {
		for _, flag := range []string{"--help", "-h"} {
			out, _, code := f.run(cmd, flag)
			if code != ExitOK {
				t.Errorf("%s %s: exit code %d", cmd, flag, code)
			}
			if !strings.Contains(out, "Usage:") || (cmd != "_extension-metadata" && !strings.Contains(out, "Examples:")) {
				t.Errorf("%s %s: help without usage or examples:\n%s", cmd, flag, out)
			}
		}
		out, _, code := f.run("help", cmd)
		if code != ExitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("help %s: exit code %d:\n%s", cmd, code, out)
		}
	}
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"check", "--no-such-flag"},
		{"check", "-o", "xml"},
		{"bundle", "-o", "table"},
		{"inspect", "--watch", "-o", "json"},
		{"bundle", "extra"},
		{"check", "--expiry-warning", "soon"},
		{"inspect", "--concurrency", "0"},
		{"bundle", "--linkerd-namespace", ""},
	} {
		_, errOut, code := f.run(args...)
		if code != ExitUsage {
			t.Errorf("%q: exit code %d, want %d; stderr:\n%s", args, code, ExitUsage, errOut)
		}
	}
	if out, _, code := f.run("--help"); code != ExitOK || !strings.Contains(out, "Commands:") {
		t.Errorf("--help: exit code %d:\n%s", code, out)
	}
}

// TestHintsExist checks that every hint anchor of every check is a section of
// docs/troubleshooting.md.
func TestHintsExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	o := &checkOptions{kube: addKubeFlags(newFlagSet("t")), proxy: true}
	cl, err := f.env(nil, nil).clients(o.kube)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cat := range newChecks(o, cl, f.env(nil, nil)).categories() {
		for _, ch := range cat.checkers {
			n++
			if !strings.Contains(string(doc), `<a id="`+ch.hint+`"></a>`) {
				t.Errorf("check %q: hint anchor %q is not in docs/troubleshooting.md", ch.description, ch.hint)
			}
		}
	}
	if n < 15 {
		t.Errorf("only %d checks listed", n)
	}
}

// TestHelpGroupsGlobalFlags: a command's help lists its own flags and names the global ones
// instead of repeating them, the root help prints every global flag once, and every command's
// details link points at a section of docs/cli.md.
func TestHelpGroupsGlobalFlags(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	root, _, _ := f.run("--help")
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	addKubeFlags(global)
	n := 0
	global.VisitAll(func(fl *pflag.Flag) {
		n++
		if !strings.Contains(root, "--"+fl.Name+" ") {
			t.Errorf("root help does not list global flag --%s", fl.Name)
		}
		if !strings.Contains(string(doc), "`--"+fl.Name+"`") && !strings.Contains(string(doc), "/--"+fl.Name+"`") {
			t.Errorf("docs/cli.md does not list global flag --%s", fl.Name)
		}
	})
	if n < 19 {
		t.Errorf("only %d global flags", n)
	}
	for _, c := range commands(f.env(&bytes.Buffer{}, &bytes.Buffer{})) {
		if c.hidden {
			continue
		}
		out, _, code := f.run(c.name, "--help")
		if code != ExitOK {
			t.Fatalf("%s --help: exit code %d", c.name, code)
		}
		for _, name := range []string{"--kubeconfig ", "--trust-roots-configmap ", "--multicluster-namespace "} {
			if strings.Contains(out, name) {
				t.Errorf("%s --help repeats global flag %s:\n%s", c.name, name, out)
			}
		}
		// completion is the one command that reads no cluster.
		if c.name != "completion" && !strings.Contains(out, "Global flags") || !strings.Contains(out, DocsURL+"#"+c.name) {
			t.Errorf("%s --help names neither the global flags nor its details:\n%s", c.name, out)
		}
		if !strings.Contains(string(doc), `<a id="`+c.name+`"></a>`) {
			t.Errorf("docs/cli.md has no section %q", c.name)
		}
		if lines := strings.Count(strings.SplitN(out, "\nUsage:", 2)[0], "\n"); lines > 6 {
			t.Errorf("%s --help: long help of %d lines, want a few", c.name, lines)
		}
	}
}

// TestCheckLinkedClusters: check says, naming the cluster, when a linked cluster has not
// received the new anchor yet (a warning: the rotation waits for it), is on unrelated anchors,
// has no TrustAnchorRotation, or has no operator reporting on it.
func TestCheckLinkedClusters(t *testing.T) {
	unrelated := strings.Repeat("ab", 32)
	cases := map[string]struct {
		remote   func(nw, old string) fakeRotations
		want     string
		wantCode int
	}{
		"behind": {remote: func(nw, old string) fakeRotations { return linkedRemote(old, old) },
			want: "‼ cluster east: on the same trust anchor as this cluster\n    cluster east is still on trust anchor"},
		"unrelated": {remote: func(nw, old string) fakeRotations { return linkedRemote(unrelated, old) }, wantCode: 1,
			want: "× cluster east: on the same trust anchor as this cluster\n    cluster east is on trust anchors [abababababab (current)"},
		"no rotation": {remote: func(nw, old string) fakeRotations { return fakeRotations{} }, wantCode: 1,
			want: "cluster east has no TrustAnchorRotation cluster: install the trust-rotation operator there"},
		"no operator": {remote: func(nw, old string) fakeRotations {
			r := linkedRemote(nw, old)
			r["cluster"].Status = v1alpha1.TrustAnchorRotationStatus{}
			return r
		}, wantCode: 1, want: "cluster east: TrustAnchorRotation cluster has no checkpoint in its status: is its trust-rotation operator running?"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			linkedLive(f)
			f.rotations["cluster"].Spec.RemoteClusters = nil // east alone
			nw, old := steps.Fingerprint(cert(t, "anchor-new")), steps.Fingerprint(cert(t, "anchor-old"))
			f.remotes["east"] = tc.remote(nw, old)
			out, _, code := f.run("check")
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Errorf("exit code %d (want %d), output:\n%s\nwant it to hold %q", code, tc.wantCode, out, tc.want)
			}
		})
	}
}

// TestPlanRenewsTheIssuerCertificate: the manual renewal of the identity issuer names its
// cert-manager Certificate in the Linkerd namespace the flags give, whatever its Secret is called.
func TestPlanRenewsTheIssuerCertificate(t *testing.T) {
	f := newFixture(t)
	f.midRotation()
	out, errOut, code := f.run("plan", "-o", "json", "-L", "other", "--identity-issuer-certificate", "issuer-cert")
	if code != ExitOK {
		t.Fatalf("exit code %d: %s", code, errOut)
	}
	var p plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	const want = "cmctl renew -n other issuer-cert"
	for _, st := range p.Steps {
		if st.Name == steps.StepWaitForIdentityIssuer && st.Manual != want {
			t.Errorf("step %s: manual %q, want %q", st.Name, st.Manual, want)
		}
	}
	// The step's number in the plan is its place in the rotation (1-based), not a constant: a
	// step added before it moves it.
	n := slices.IndexFunc(steps.Rotation(nil), func(st steps.Step) bool { return st.Name == steps.StepWaitForIdentityIssuer }) + 1
	if !slices.Contains(p.ManualActions, fmt.Sprintf("%s (step %d, %s)", want, n, steps.StepWaitForIdentityIssuer)) {
		t.Errorf("manual actions %q do not renew Certificate other/issuer-cert", p.ManualActions)
	}
}

// TestPlanShowsAnotherStep: a step added to the rotation is planned in its place, with its Doc,
// its observation and the user's part, from the Step alone.
func TestPlanShowsAnotherStep(t *testing.T) {
	f := newFixture(t)
	f.midRotation()
	var out, errOut bytes.Buffer
	env := f.env(&out, &errOut)
	env.Rotation = func(w steps.Writer) []steps.Step {
		list := steps.Rotation(w)
		i := slices.IndexFunc(list, func(st steps.Step) bool { return st.Name == steps.StepRestartIdentity })
		return slices.Insert(list, i+1, steps.Step{
			Step: workflow.Step[*steps.State]{
				Name: "verify-extra", Phase: string(v1alpha1.PhaseWaitingForIdentityRotation),
				Doc: "Wait until the extra check passes.",
				Observe: func(*steps.State, string) workflow.Decision {
					return workflow.Waiting("ExtraCheckPending", "Waiting for the extra check")
				},
			},
			Manual: func(s *steps.State) string { return "run the extra check in " + s.Config.LinkerdNamespace },
		})
	}
	if code := Main(context.Background(), []string{"plan", "-o", "json"}, env); code != ExitOK {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	var p plan
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(p.Steps, func(st planStep) bool { return st.Name == "verify-extra" })
	if i < 0 || p.Steps[i-1].Name != steps.StepRestartIdentity || p.Steps[i+1].Name != steps.StepWaitForIdentityIssuer {
		t.Fatalf("plan lists %d steps, verify-extra at %d", len(p.Steps), i)
	}
	st := p.Steps[i]
	if st.Index != i+1 || st.Doc != "Wait until the extra check passes." || st.Status != stepPending || st.Reason != "ExtraCheckPending" ||
		st.Manual != "run the extra check in linkerd" {
		t.Errorf("verify-extra planned as %+v", st)
	}
	if !slices.Contains(p.ManualActions, fmt.Sprintf("run the extra check in linkerd (step %d, verify-extra)", i+1)) {
		t.Errorf("manual actions %q lack the step's", p.ManualActions)
	}
}

// TestPlanAutomaticRestartsForbidden: a user who may not list the workloads still gets a plan,
// with a note saying the operator's restarts are not planned.
func TestPlanAutomaticRestartsForbidden(t *testing.T) {
	f := newFixture(t)
	automated(f)
	f.forbid = append(f.forbid, "poddisruptionbudgets")
	out, errOut, code := f.run("plan")
	if code != ExitOK {
		t.Fatalf("exit code %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Note: spec.dataPlaneRestart.policy is Automatic, but listing poddisruptionbudgets:") || !strings.Contains(out, "the operator's restarts are not planned below") {
		t.Errorf("plan does not say it could not list the workloads:\n%s", out)
	}
}

// TestPlanLooksAhead: with --assume-anchor-renewed, each later step observes the state the
// steps before it leave: reduce-trust-bundle writes the bundle with the new anchor alone, and
// only the next step is observed on the cluster; the waits passed are marked as assumptions.
func TestPlanLooksAhead(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := f.run("plan", "--assume-anchor-renewed", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit code %d: %s", code, errOut)
	}
	var p plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	reduced := "bundle sha256 " + steps.BundleHash(steps.RenderBundle(cert(t, "anchor-new")))
	for _, st := range p.Steps {
		switch {
		case st.Status == stepNext && st.Simulated, st.Status == stepPending && !st.Simulated:
			t.Errorf("step %s (%s): simulated %v", st.Name, st.Status, st.Simulated)
		case st.Name == steps.StepReduceTrustBundle:
			if len(st.Writes) != 1 || st.Writes[0].Detail != reduced {
				t.Errorf("reduce-trust-bundle writes %+v, want the bundle of the new anchor alone (%s)", st.Writes, reduced)
			}
		case st.Name == steps.StepWaitForIdentityIssuer:
			if len(st.Assumptions) != 1 || !strings.Contains(st.Assumptions[0], "assuming the issuer was renewed") {
				t.Errorf("wait-for-identity-issuer assumes %q", st.Assumptions)
			}
		case st.Name == steps.StepPropagateTrustRoots:
			if len(st.Assumptions) != 1 || !strings.Contains(st.Assumptions[0], "assuming your workloads were restarted") {
				t.Errorf("propagate-trust-roots assumes %q", st.Assumptions)
			}
		}
	}
}

// TestMissingBundleNamesTheOneApplyCommand: the missing-bundle failure, the root help and the
// bundle help all tell the user to apply the bundle with the one command under which the
// operator owns it (server-side, its field manager): a plain `kubectl apply` would make the
// owner check warn.
//
// Before the operator is installed (check --pre, the chart's pre-install hook), a missing bundle
// is a warning, not a failure: the operator creates it when it first starts, which is the order
// a GitOps install syncs in (manifests/argocd: the operator, then Linkerd). The issuer must
// still chain to the trust anchor the operator will write.
func TestMissingBundleNamesTheOneApplyCommand(t *testing.T) {
	const want = "linkerd trust bundle | kubectl apply --server-side --field-manager=" + steps.FieldManager + " -f -"
	f := newFixture(t)
	f.remove(&corev1.ConfigMap{}, "linkerd", steps.DefaultTrustRootsConfigMap)
	out, _, code := f.run("check", "--pre")
	if code != 0 || !strings.Contains(out, "‼ ConfigMap linkerd-identity-trust-roots contains the current trust anchor") ||
		!strings.Contains(out, "ConfigMap linkerd/linkerd-identity-trust-roots not found: the operator creates it from the trust anchor") ||
		!strings.Contains(out, "to have it before, run `"+want+"`") || !strings.Contains(out, "√ identity issuer chains to an anchor in the trust bundle") {
		t.Errorf("check --pre without the bundle: exit %d, want 0, a warning that the operator creates it, naming %q, and the issuer chaining to the anchor\n%s", code, want, out)
	}
	out, _, code = f.run("check")
	if code == 0 || !strings.Contains(out, "ConfigMap linkerd/linkerd-identity-trust-roots not found: create it with `"+want+"`") {
		t.Errorf("check without the bundle, the operator installed: exit %d, want a failure naming %q\n%s", code, want, out)
	}
	for _, args := range [][]string{{"--help"}, {"bundle", "--help"}} {
		out, _, _ := f.run(args...)
		if !strings.Contains(out, want) || strings.Contains(out, "bundle | kubectl apply -f -") {
			t.Errorf("%v names another way to apply the bundle than %q:\n%s", args, want, out)
		}
	}

	// An issuer that the anchor did not sign fails --pre, bundle or not: the bundle the operator
	// writes would not verify its certificates.
	f.issue("linkerd", "linkerd-identity-issuer", certPEM(t, "issuer-new"))
	out, _, code = f.run("check", "--pre")
	if code == 0 || !strings.Contains(out, "is not signed by the trust anchor") {
		t.Errorf("check --pre without the bundle, the issuer signed by another anchor: exit %d, want a failure\n%s", code, out)
	}
}

// TestEveryDurationFlagTakesDays: every duration flag of every command takes days (2d, 1d12h),
// as --expiry-warning always did, and a typo such as 30days is refused naming the whole value
// and the units, not as `invalid duration "ays"`.
func TestEveryDurationFlagTakesDays(t *testing.T) {
	f := newFixture(t)
	var errOut bytes.Buffer
	n := 0
	for _, cmd := range commands(f.env(&bytes.Buffer{}, &errOut)) {
		cmd.flags.VisitAll(func(fl *pflag.Flag) {
			if fl.Value.Type() != "duration" {
				return
			}
			n++
			if _, ok := fl.Value.(*duration); !ok {
				t.Errorf("%s --%s is a %T, which takes no days", cmd.name, fl.Name, fl.Value)
				return
			}
			if err := fl.Value.Set("1d12h"); err != nil || fl.Value.String() != "36h" {
				t.Errorf("%s --%s 1d12h: %v, %s", cmd.name, fl.Name, err, fl.Value)
			}
			err := fl.Value.Set("30days")
			if err == nil || !strings.Contains(err.Error(), `"30days"`) || !strings.Contains(err.Error(), "30d") {
				t.Errorf("%s --%s 30days: %v, want a refusal naming the value and the units", cmd.name, fl.Name, err)
			}
		})
	}
	if n < 8 {
		t.Errorf("found %d duration flags, want every one of check, inspect, plan, wait", n)
	}
	for _, v := range []string{"106751991167d", "99999999999999999999d", "1d-1h"} {
		var d duration
		if err := d.Set(v); err == nil {
			t.Errorf("%s: no error, want one (overflow or a negative part)", v)
		}
	}
}

// Global flags are taken before the command too, as kubectl and linkerd take them.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"--context", "prod", "check", "--pre"}, []string{"check", "--context", "prod", "--pre"}},
		{[]string{"-L", "mesh", "--kubeconfig=/k", "plan"}, []string{"plan", "-L", "mesh", "--kubeconfig=/k"}},
		{[]string{"--as-group", "a", "--as-group=b", "inspect", "-o", "json"}, []string{"inspect", "--as-group", "a", "--as-group=b", "-o", "json"}},
		{[]string{"check", "--context", "prod"}, []string{"check", "--context", "prod"}},
		{[]string{"--help"}, []string{"--help"}},
		{[]string{"--no-such-flag", "check"}, []string{"--no-such-flag", "check"}},
	} {
		if got := globalFlagsAfterCommand(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
	f := newFixture(t)
	if out, errOut, code := f.run("--linkerd-namespace", "linkerd", "check", "--pre"); code != ExitOK {
		t.Errorf("a global flag before check: exit %d\n%s%s", code, out, errOut)
	}
}

// version prints the operator's version beside the client's, as linkerd version prints its
// control plane's, or why it is unavailable; --client reads no cluster; check warns when the
// two differ.
func TestVersionNamesTheOperator(t *testing.T) {
	f := newFixture(t)
	out, _, code := f.run("version")
	want := fmt.Sprintf("linkerd-trust version: %s\ntrust-rotation operator version: %s\n", version.String(), version.String())
	if code != ExitOK || out != want {
		t.Errorf("version: exit %d\n%q\nwant\n%q", code, out, want)
	}
	if out, _, _ := f.run("version", "--client"); out != "linkerd-trust version: "+version.String()+"\n" {
		t.Errorf("version --client: %q", out)
	}
	f.remove(&appsv1.Deployment{}, "linkerd", DefaultOperatorDeployment)
	if out, _, code := f.run("version"); code != ExitOK || !strings.Contains(out, "trust-rotation operator version: unavailable (Deployment linkerd/trust-rotation-operator not found") {
		t.Errorf("version without the operator: exit %d\n%s", code, out)
	}

	// A release CLI and an operator of another release: a warning naming both. A CLI built
	// from a checkout compares with nothing.
	defer func(v func() string) { clientVersion = v }(clientVersion)
	clientVersion = func() string { return "v0.1.0" }
	f = newFixture(t)
	f.replace(available(deployment("linkerd", DefaultOperatorDeployment, map[string]string{versionLabel: "v0.0.1"})))
	out, _, code = f.run("check")
	if code != ExitOK || !strings.Contains(out, "‼ trust-rotation operator and CLI versions match") || !strings.Contains(out, "is v0.0.1, this CLI v0.1.0") {
		t.Errorf("check with an operator of another version: exit %d, want a warning naming both\n%s", code, out)
	}
	clientVersion = func() string { return "dev-0123456789ab" }
	if out, _, _ := f.run("check"); !strings.Contains(out, "√ trust-rotation operator and CLI versions match") {
		t.Errorf("check from a development build warned of the version:\n%s", out)
	}
}

// No help line is wider than 100 columns: the root's, and every command's.
func TestHelpFitsIn100Columns(t *testing.T) {
	f := newFixture(t)
	helps := [][]string{{"--help"}}
	for _, c := range commands(f.env(&bytes.Buffer{}, &bytes.Buffer{})) {
		helps = append(helps, []string{c.name, "--help"})
	}
	for _, args := range helps {
		out, _, _ := f.run(args...)
		for i, line := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(line); n > helpColumns {
				t.Errorf("%v, line %d: %d columns: %s", args, i+1, n, line)
			}
		}
	}
}

// Every command with structured output takes the one set of -o values, table, json and yaml
// (bundle, which prints a manifest, json and yaml); plan's former text still means table; and
// check's YAML is its JSON document.
func TestOutputFormatsAreOneSet(t *testing.T) {
	f := newFixture(t)
	var errOut bytes.Buffer
	for _, c := range commands(f.env(&bytes.Buffer{}, &errOut)) {
		fl := c.flags.Lookup("output")
		if fl == nil {
			continue
		}
		want := "output format, one of: table|json|yaml"
		if c.name == "bundle" {
			want = "output format, one of: yaml|json"
		}
		if fl.Usage != want {
			t.Errorf("%s -o: %q, want %q", c.name, fl.Usage, want)
		}
	}
	table, _, _ := f.run("plan")
	if text, _, _ := f.run("plan", "-o", "text"); text != table {
		t.Errorf("plan -o text differs from plan -o table")
	}
	js, _, _ := f.run("check", "-o", "json")
	ya, _, code := f.run("check", "-o", "yaml")
	want, err := yaml.JSONToYAML([]byte(js))
	if err != nil || code != ExitOK || ya != string(want) {
		t.Errorf("check -o yaml: exit %d, %v:\n%s\nwant\n%s", code, err, ya, want)
	}
}
