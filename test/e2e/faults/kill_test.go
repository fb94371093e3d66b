package faults

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// killPoints are where TestKillAtEveryStep kills the operator, one rotation each: the points
// e2e.StepKillPoints derives from the steps (save, write, acted, enter), then
//   - early/<point>:<step>@<n> with the identity issuer renewed right after the anchor, at the
//     n-th act of the step: restart-identity then scales identity to 0 (act 1) and back (act 2),
//     and the operator dies before and after each;
//   - crossSigned/<point>:<step> in a rotation with spec.strategy CrossSigned, at each of the
//     points above of the steps that strategy runs (the steps it passes over never save a
//     checkpoint nor act).
func killPoints() []string { return killPointsOf(steps.Rotation(nil)) }

// killPointsOf derives the kill points from the steps: save, write and acted at every step whose
// act runs in every rotation (neither idle nor the user's part, which these rotations leave to
// the test), write only where the act makes more than one; enter at every step that waits on the
// user; then the early points, then the same points again in a cross-signed rotation, without
// the steps it passes over (Step.CrossSignedSkips).
func killPointsOf(rotation []steps.Step) []string {
	out := e2e.StepKillPoints(rotation)
	for _, act := range []string{"1", "2"} {
		out = append(out, earlyIssuer+"save:"+steps.StepRestartIdentity+"@"+act, earlyIssuer+"acted:"+steps.StepRestartIdentity+"@"+act)
	}
	for _, p := range e2e.StepKillPoints(crossSignedSteps(rotation)) {
		out = append(out, crossSigned+p)
	}
	return out
}

// crossSignedSteps are the steps a cross-signed rotation runs.
func crossSignedSteps(rotation []steps.Step) []steps.Step {
	var out []steps.Step
	for _, st := range rotation {
		if st.CrossSignedSkips == "" {
			out = append(out, st)
		}
	}
	return out
}

// earlyIssuer prefixes a kill point whose rotation has the issuer renewed right after the anchor.
const earlyIssuer = "early/"

// crossSigned prefixes a kill point whose rotation runs spec.strategy CrossSigned.
const crossSigned = "crossSigned/"

// pointStrategy splits a kill point into its rotation's strategy and the point in it.
func pointStrategy(point string) (v1alpha1.RotationStrategy, string) {
	if p, ok := strings.CutPrefix(point, crossSigned); ok {
		return v1alpha1.StrategyCrossSigned, p
	}
	return v1alpha1.StrategyStandard, point
}

// TestKillAtEveryStep kills the operator with SIGKILL at every step boundary and in the middle
// of every act, one full rotation per point, on one shared environment. Expected: the restarted
// operator resumes from the checkpoint and the rotation completes; no destructive write is
// repeated (each control-plane Deployment restarted exactly 3 times, 2 bundles and 1 previous
// anchor written, one act token per step; with the issuer renewed early, identity restarted
// twice and scaled to 0 and back to its replicas once instead of its first restart; in a
// cross-signed rotation, which keeps its strategy throughout, twice each and 1 bundle); the
// oracle sees 0 mTLS violations; no key material in the operator's logs.
// TRUST_ROTATION_KILL_POINTS (comma-separated) limits the points. The cross-signed points come
// last: the first of them re-issues the anchor from linkerd-pki-cross-signed.yaml, and the test
// ends with a standard rotation back onto the self-signed anchor the other tests expect.
func TestKillAtEveryStep(t *testing.T) {
	e := SharedEnv(t)
	points := killPoints()
	if only := os.Getenv("TRUST_ROTATION_KILL_POINTS"); only != "" {
		points = strings.Split(only, ",")
	}
	start := time.Now()
	defer restoreStandard(t, e)
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			e := *e
			e.T = t
			RepeatOnReissue(t, func() string {
				runStart := time.Now()
				sup := NewSupervisor(t, &e)
				defer sup.Stop()
				l := NewLedger(t, &e)
				defer l.Close()
				var o DriveOpts
				strategy, at := pointStrategy(point)
				hook, early := strings.CutPrefix(at, earlyIssuer)
				o.earlyIssuer, o.strategy = early, strategy
				kind, step, _ := strings.Cut(hook, ":")
				killed := false
				if kind == "enter" {
					sup.Start("")
					o.onPoll = func(tar *v1alpha1.TrustAnchorRotation) {
						if !killed && stepOf(tar) == step {
							killed = true
							sup.Kill()
						}
					}
				} else {
					first := sup.Start(hook)
					o.onPoll = func(*v1alpha1.TrustAnchorRotation) { killed = killed || first.Exited() }
				}
				Drive(t, &e, sup, o)
				if !killed {
					t.Fatalf("the operator was never killed at %s", point)
				}
				CheckOracle(t, &e, runStart)
				if why := l.Reissued(t, &e, 1); why != "" {
					return why
				}
				l.CheckNoRepeats(t, early)
				l.CheckStrategy(t, strategy)
				CheckPreviousAnchorHasNoKey(t, &e)
				t.Logf("%s: rotation complete in %s; %s", point, time.Since(runStart).Round(time.Second), l.Summary())
				return ""
			})
		})
		if t.Failed() {
			break
		}
	}
	CheckOracle(t, e, start)
}

// restoreStandard drives a standard rotation back onto the self-signed anchor of
// linkerd-pki.yaml when the trust anchor is issued for the cross-signed strategy: the other
// tests of the package count the writes of standard rotations.
func restoreStandard(t *testing.T, e *e2e.Env) {
	t.Helper()
	if e.AnchorIssuedFor() != v1alpha1.StrategyCrossSigned {
		return
	}
	start := time.Now()
	sup := NewSupervisor(t, e)
	defer sup.Stop()
	Drive(t, e, sup, DriveOpts{strategy: v1alpha1.StrategyStandard})
	CheckOracle(t, e, start)
	t.Logf("back on a self-signed anchor with spec.strategy Standard in %s", time.Since(start).Round(time.Second))
}
