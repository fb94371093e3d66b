package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// fixtureDeadline is a status.nextRotation whose deadline is at.
func fixtureDeadline(at time.Time) *v1alpha1.NextRotation {
	return &v1alpha1.NextRotation{Deadline: metav1.NewTime(at), AnchorNotAfter: metav1.NewTime(at.Add(48 * time.Hour)),
		Margin: metav1.Duration{Duration: 24 * time.Hour}, RotationDuration: metav1.Duration{Duration: 24 * time.Hour}, Basis: "spec.expectedRotationDuration 24h0m0s"}
}

const deadlineCheck = "the next rotation can still start in time"

func TestCheckRotationDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     time.Duration // from testNow to the deadline; 0: none reported
		flags  []string
		result string
		error  string
	}{
		{name: "far ahead", in: 200 * 24 * time.Hour, result: "success"},
		{name: "within --expiry-warning", in: 20 * 24 * time.Hour, result: "warning", error: "within --expiry-warning 30d"},
		{name: "passed, no --fail-within", in: -time.Hour, result: "warning", error: "passed 1h ago"},
		{name: "within --fail-within", in: 5 * 24 * time.Hour, flags: []string{"--fail-within", "7d"}, result: "error", error: "within --fail-within 7d"},
		{name: "outside --fail-within, within --expiry-warning", in: 10 * 24 * time.Hour, flags: []string{"--fail-within", "7d"}, result: "warning"},
		{name: "not reported", result: "warning", error: "reports no next-rotation deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.rotations["cluster"].Status.NextRotation = nil
			if tc.in != 0 {
				f.rotations["cluster"].Status.NextRotation = fixtureDeadline(testNow.Add(tc.in))
			}
			out, _, _ := f.run(append([]string{"check", "-o", "json"}, tc.flags...)...)
			var co struct {
				Categories []struct {
					Checks []struct{ Description, Result, Error string }
				}
			}
			if err := json.Unmarshal([]byte(out), &co); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			found := false
			for _, cat := range co.Categories {
				for _, ch := range cat.Checks {
					if ch.Description != deadlineCheck {
						continue
					}
					found = true
					if ch.Result != tc.result || !strings.Contains(ch.Error, tc.error) {
						t.Errorf("%s: %q, want %s %q", ch.Result, ch.Error, tc.result, tc.error)
					}
				}
			}
			if !found {
				t.Fatalf("no %q check in %s", deadlineCheck, out)
			}
		})
	}
}

func TestInspectHistory(t *testing.T) {
	f := newFixture(t)
	start := metav1.NewTime(testNow.Add(-50 * time.Hour))
	end := metav1.NewTime(start.Add(3 * time.Hour))
	f.rotations["cluster"].Status.History = []v1alpha1.RotationRecord{
		{Rotation: "bbbbbbbbbbbbbbbb", StartTime: metav1.NewTime(testNow.Add(-10 * time.Minute)), Outcome: v1alpha1.RotationInProgress,
			Phases: []v1alpha1.PhaseDuration{{Phase: v1alpha1.PhaseRefreshingControlPlane}}},
		{Rotation: "aaaaaaaaaaaaaaaa", From: "9999999999999999", StartTime: start, FinishTime: &end, Outcome: v1alpha1.RotationCompleted,
			Phases: []v1alpha1.PhaseDuration{
				{Phase: v1alpha1.PhasePropagatingTrustRoots, Duration: metav1.Duration{Duration: time.Hour}},
				{Phase: v1alpha1.PhaseRenewingWorkloadCerts, Duration: metav1.Duration{Duration: 2 * time.Hour}}},
			Restarts: []v1alpha1.RestartRecord{{Step: "restart-identity", By: v1alpha1.RestartedByOperator, Acts: 1}, {Step: "propagate-trust-roots", By: v1alpha1.RestartedByUser}},
			Faults:   []string{"TrustBundleDrifted"}},
	}
	out, errOut, code := f.run("inspect", "--history")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Next rotation: start by 2026-12-18T12:00:00Z (in 200d)",
		"InProgress", "10m",
		"Completed", "3h", "999999999999", "PropagatingTrustRoots 1h, RenewingWorkloadCerts 2h",
		"restart-identity by Operator (1), propagate-trust-roots by User", "TrustBundleDrifted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "InProgress") > strings.Index(out, "Completed") {
		t.Errorf("not latest first:\n%s", out)
	}
	for _, format := range []string{"json", "yaml"} {
		out, errOut, code := f.run("inspect", "--history", "-o", format)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", format, code, errOut)
		}
		var v historyView
		if err := yaml.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if len(v.History) != 2 || v.History[1].Phases[1].Duration.Duration != 2*time.Hour || v.NextRotation == nil {
			t.Errorf("%s: %+v", format, v)
		}
	}
	if _, errOut, code := f.run("inspect", "--history", "--watch"); code == ExitOK || !strings.Contains(errOut, "--history") {
		t.Errorf("--history --watch: exit %d, %s", code, errOut)
	}
}

func TestConvergenceLineSaysNotProbedYet(t *testing.T) {
	for _, tc := range []struct {
		c    v1alpha1.ConvergenceStatus
		want string
	}{
		{v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 11, TargetPods: 11}, "11/11 meshed pods converged (Converged)"},
		{v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 3, TargetPods: 11, NotProbedPods: 8}, "3/11 meshed pods converged, 8 not probed yet"},
		{v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 3, TargetPods: 11, NotProbedPods: 2}, "3/11 meshed pods converged (Converging), 2 not probed yet"},
	} {
		if got := convergenceLine(&tc.c, "meshed pods"); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}

func TestNextRotationLineNamesTheBridge(t *testing.T) {
	n := fixtureDeadline(testNow.Add(24 * time.Hour))
	if got := nextRotationLine(n, testNow); !strings.Contains(got, "anchor expires "+n.AnchorNotAfter.UTC().Format(time.RFC3339)) {
		t.Errorf("without a bridge: %q", got)
	}
	bridge := metav1.NewTime(testNow.Add(72 * time.Hour))
	n.BridgeNotAfter = &bridge
	got := nextRotationLine(n, testNow)
	if want := "a bridge certificate of the anchor's chain expires " + bridge.UTC().Format(time.RFC3339) + ", before the anchor"; !strings.Contains(got, want) ||
		!strings.Contains(got, "the next rotation must be Standard") {
		t.Errorf("with a bridge: %q, want %q and the strategy", got, want)
	}
}
