package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
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

// rotate --emergency prints what it costs before anything is written, even with --yes; sets the
// spec that lifts every wait and records the request in one write, then renews the anchor; and
// inspect --history reads the request back as a post-incident summary once the rotation is on
// record.
func TestEmergencyRotation(t *testing.T) {
	f := newFixture(t)
	f.rotations["cluster"].Spec.DataPlaneRestart.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Sat"}, Start: "02:00", End: "04:00"}}
	out, code, renewed := runRotate(f, "", true, "--emergency", "--dry-run")
	for _, want := range []string{
		"Emergency rotation away from the trust anchor " + steps.ShortFingerprint(steps.Fingerprint(cert(t, "anchor-old"))) + " (compromised), every wait lifted",
		"pods that lose mTLS: none: the standard order keeps every pair of pods verifying each other",
		"the compromised anchor stays trusted by the control plane until refresh-control-plane-reduced, every meshed pod until its restart at remove-old-trust-roots",
		"it restarts: linkerd-identity, linkerd-destination and linkerd-proxy-injector 3 times each; every meshed workload (2, 3 pods) twice",
		"it sets on TrustAnchorRotation cluster: identityIssuerRenewal: Automatic; workloadCertificateRefreshInterval: 10s; dataPlaneRestart: policy Automatic, maxConcurrent 2, maxConcurrentPerNamespace 2, its 1 maintenance window(s) removed",
		"step expand-trust-bundle", "Dry run",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate --emergency --dry-run does not say %q\n%s", want, out)
		}
	}
	if code != ExitOK || renewed || f.rotations["cluster"].Annotations[EmergencyAnnotation] != "" {
		t.Fatalf("--dry-run: exit %d, renewed %v, annotations %v", code, renewed, f.rotations["cluster"].Annotations)
	}

	out, code, renewed = runRotate(f, "", false, "--emergency", "--yes")
	if code != ExitOK || !renewed {
		t.Fatalf("rotate --emergency --yes: exit %d, renewed %v\n%s", code, renewed, out)
	}
	for _, want := range []string{"pods that lose mTLS: none", "Set on TrustAnchorRotation cluster: identityIssuerRenewal: Automatic;",
		`this puts the spec back: kubectl patch trustanchorrotation cluster --type=merge -p '{"spec":{"identityIssuerRenewal":null,"workloadCertificateRefreshInterval":null,"dataPlaneRestart":{"maintenanceWindows":[{"days":["Sat"],"start":"02:00","end":"04:00"}],"maxConcurrent":null,"maxConcurrentPerNamespace":null,"policy":"Manual"}}}'`} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate --emergency --yes does not say %q\n%s", want, out)
		}
	}
	tar := f.rotations["cluster"]
	spec := tar.Spec
	if spec.IdentityIssuerRenewal != v1alpha1.Automatic || spec.DataPlaneRestart.Policy != v1alpha1.Automatic || spec.DataPlaneRestart.MaxConcurrent != 2 ||
		len(spec.DataPlaneRestart.MaintenanceWindows) != 0 || spec.WorkloadCertificateRefreshInterval == nil || spec.WorkloadCertificateRefreshInterval.Duration != 10*time.Second {
		t.Errorf("spec after rotate --emergency: %+v", spec)
	}
	old := steps.Fingerprint(cert(t, "anchor-old"))
	if want := `{"compromised":"` + old + `","requestedAt":"2026-06-01T12:00:00Z"}`; tar.Annotations[EmergencyAnnotation] != want {
		t.Errorf("annotation %s = %q, want %q", EmergencyAnnotation, tar.Annotations[EmergencyAnnotation], want)
	}

	// The operator's record of the rotation it ran.
	start := metav1.NewTime(testNow.Add(5 * time.Second))
	finish := metav1.NewTime(testNow.Add(5*time.Second + 90*time.Second))
	tar.Status.History = []v1alpha1.RotationRecord{{Rotation: steps.Fingerprint(cert(t, "anchor-new")), From: old, StartTime: start, FinishTime: &finish, Outcome: v1alpha1.RotationCompleted,
		Phases: []v1alpha1.PhaseDuration{
			{Phase: v1alpha1.PhaseRefreshingControlPlane, Duration: metav1.Duration{Duration: 5 * time.Second}},
			{Phase: v1alpha1.PhasePropagatingTrustRoots, Duration: metav1.Duration{Duration: 20 * time.Second}},
			{Phase: v1alpha1.PhaseWaitingForIdentityRotation, Duration: metav1.Duration{Duration: 10 * time.Second}},
			{Phase: v1alpha1.PhaseRenewingWorkloadCerts, Duration: metav1.Duration{Duration: 25 * time.Second}},
			{Phase: v1alpha1.PhaseRefreshingControlPlane, Duration: metav1.Duration{Duration: 10 * time.Second}},
			{Phase: v1alpha1.PhaseRemovingOldTrustRoots, Duration: metav1.Duration{Duration: 20 * time.Second}},
		},
		Restarts: []v1alpha1.RestartRecord{{Step: steps.StepPropagateTrustRoots, By: v1alpha1.RestartedByOperator, Acts: 2}}}}
	hist, errOut, code := f.run("inspect", "--history")
	if code != ExitOK {
		t.Fatalf("inspect --history: exit %d\n%s%s", code, hist, errOut)
	}
	for _, want := range []string{
		"Emergency rotation away from the compromised trust anchor " + steps.ShortFingerprint(old) + ", requested at 2026-06-01T12:00:00Z:",
		"rotation started: 2026-06-01T12:00:05Z (5s after the request)",
		"identity signs under the new anchor alone: 2026-06-01T12:00:40Z (40s after the request)",
		"every pod presents a certificate of the new anchor: 2026-06-01T12:01:05Z (1m5s after the request)",
		"no pod trusts the compromised anchor: 2026-06-01T12:01:35Z (1m35s after the request)",
		"outcome: Completed; restarts: propagate-trust-roots by Operator (2); faults: none",
	} {
		if !strings.Contains(hist, want) {
			t.Errorf("inspect --history does not say %q\n%s", want, hist)
		}
	}
}

// rotate --emergency during a rotation: the anchor the rotation moves away from is the one
// retired; the waits are lifted in one write with the request recorded, the anchor is not renewed
// again (that would supersede the rotation), and inspect --history reads the rotation that was in
// progress at the request as the emergency's.
func TestEmergencyDuringRotation(t *testing.T) {
	f := newFixture(t)
	f.midRotation()
	f.rotations["cluster"].Spec.Strategy = v1alpha1.StrategyCrossSigned
	old := steps.Fingerprint(cert(t, "anchor-old"))
	out, code, renewed := runRotate(f, "", true, "--emergency", "--dry-run")
	for _, want := range []string{
		"TrustAnchorRotation cluster is Synced or rotating",
		"Emergency: the rotation in progress away from the trust anchor " + steps.ShortFingerprint(old) + " (compromised) goes on with every wait lifted; the anchor is not renewed again",
		"every meshed pod until its restart at remove-old-trust-roots: the rotation in progress (phase PropagatingTrustRoots, step propagate-trust-roots) goes on from where it is",
		"Dry run: the rotation in progress would go on under the spec above",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate --emergency --dry-run during a rotation does not say %q\n%s", want, out)
		}
	}
	if code != ExitOK || renewed || f.rotations["cluster"].Annotations[EmergencyAnnotation] != "" {
		t.Fatalf("--dry-run: exit %d, renewed %v, annotations %v", code, renewed, f.rotations["cluster"].Annotations)
	}

	out, code, renewed = runRotate(f, "", false, "--emergency", "--yes")
	if code != ExitOK || renewed {
		t.Fatalf("rotate --emergency --yes during a rotation: exit %d, renewed %v (want no renewal)\n%s", code, renewed, out)
	}
	if !strings.Contains(out, "The rotation in progress (phase PropagatingTrustRoots, step propagate-trust-roots) goes on with every wait lifted; the trust anchor was not renewed again.") {
		t.Errorf("rotate --emergency --yes during a rotation does not say it goes on\n%s", out)
	}
	tar := f.rotations["cluster"]
	if spec := tar.Spec; spec.DataPlaneRestart.Policy != v1alpha1.Automatic || spec.IdentityIssuerRenewal != v1alpha1.Automatic || spec.Strategy != v1alpha1.StrategyCrossSigned {
		t.Errorf("spec after rotate --emergency during a rotation: %+v (the strategy is the checkpoint's: kept)", spec)
	}
	if want := `{"compromised":"` + old + `","requestedAt":"2026-06-01T12:00:00Z","duringRotation":true}`; tar.Annotations[EmergencyAnnotation] != want {
		t.Errorf("annotation %s = %q, want %q", EmergencyAnnotation, tar.Annotations[EmergencyAnnotation], want)
	}

	// The rotation started in the very second of the request (a window held it at once): the
	// annotation, not the times, says it was in progress.
	start := metav1.NewTime(testNow)
	finish := metav1.NewTime(testNow.Add(2 * time.Minute))
	tar.Status.History = []v1alpha1.RotationRecord{{Rotation: steps.Fingerprint(cert(t, "anchor-new")), From: old, StartTime: start, FinishTime: &finish, Outcome: v1alpha1.RotationCompleted}}
	hist, _, _ := f.run("inspect", "--history")
	for _, want := range []string{"rotation started: 2026-06-01T12:00:00Z, in progress at the request (its waits lifted then)",
		"no pod trusts the compromised anchor: 2026-06-01T12:02:00Z (2m after the request)"} {
		if !strings.Contains(hist, want) {
			t.Errorf("inspect --history does not say %q\n%s", want, hist)
		}
	}
}
