package faults

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// killPoints are where TestKillAtEveryStep kills the operator, one rotation each:
//   - save:<step>  the operator SIGKILLs itself right after saving the checkpoint, before the act;
//   - write:<step> right after the act's first write (the middle of a multi-write act);
//   - acted:<step> right after the act returned, before the status is projected;
//   - enter:<step> the test SIGKILLs it as soon as the status shows the checkpoint at a step
//     that waits (a step boundary with no act);
//   - early/<point>:<step>@<n> with the identity issuer renewed right after the anchor, at the
//     n-th act of the step: restart-identity then scales identity to 0 (act 1) and back (act 2),
//     and the operator dies before and after each.
func killPoints() []string { return killPointsOf(steps.Rotation(nil)) }

// killPointsOf derives the kill points from the steps: save, write and acted at every step whose
// act runs in every rotation (neither idle nor the user's part, which these rotations leave to
// the test), write only where the act makes more than one; enter at every step that waits on the
// user.
func killPointsOf(rotation []steps.Step) []string {
	var out, enter []string
	for _, st := range rotation {
		switch {
		case st.Idle():
		case st.Manual != nil:
			enter = append(enter, "enter:"+st.Name)
		case st.Act != nil:
			out = append(out, "save:"+st.Name)
			if st.WritesMany {
				out = append(out, "write:"+st.Name)
			}
			out = append(out, "acted:"+st.Name)
		}
	}
	out = append(out, enter...)
	for _, act := range []string{"1", "2"} {
		out = append(out, earlyIssuer+"save:"+steps.StepRestartIdentity+"@"+act, earlyIssuer+"acted:"+steps.StepRestartIdentity+"@"+act)
	}
	return out
}

// earlyIssuer prefixes a kill point whose rotation has the issuer renewed right after the anchor.
const earlyIssuer = "early/"

// TestKillAtEveryStep kills the operator with SIGKILL at every step boundary and in the middle
// of every act, one full rotation per point, on one shared environment. Expected: the restarted
// operator resumes from the checkpoint and the rotation completes; no destructive write is
// repeated (each control-plane Deployment restarted exactly 3 times, 2 bundles and 1 previous
// anchor written, one act token per step; with the issuer renewed early, identity restarted
// twice and scaled to 0 and back to its replicas once instead of its first restart); the oracle
// sees 0 mTLS violations; no key material in the operator's logs. TRUST_ROTATION_KILL_POINTS
// (comma-separated) limits the points.
func TestKillAtEveryStep(t *testing.T) {
	e := sharedEnv(t)
	points := killPoints()
	if only := os.Getenv("TRUST_ROTATION_KILL_POINTS"); only != "" {
		points = strings.Split(only, ",")
	}
	start := time.Now()
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			e := *e
			e.T = t
			repeatOnReissue(t, func() string {
				runStart := time.Now()
				sup := newSupervisor(t, &e)
				defer sup.stop()
				l := newLedger(t, &e)
				defer l.stop()
				var o driveOpts
				hook, early := strings.CutPrefix(point, earlyIssuer)
				o.earlyIssuer = early
				kind, step, _ := strings.Cut(hook, ":")
				killed := false
				if kind == "enter" {
					sup.start("")
					o.onPoll = func(tar *v1alpha1.TrustAnchorRotation) {
						if !killed && stepOf(tar) == step {
							killed = true
							sup.kill()
						}
					}
				} else {
					first := sup.start(hook)
					o.onPoll = func(*v1alpha1.TrustAnchorRotation) { killed = killed || first.Exited() }
				}
				drive(t, &e, sup, o)
				if !killed {
					t.Fatalf("the operator was never killed at %s", point)
				}
				checkOracle(t, &e, runStart)
				if why := l.reissued(t, &e, 1); why != "" {
					return why
				}
				l.checkNoRepeats(t, early)
				checkPreviousAnchorHasNoKey(t, &e)
				t.Logf("%s: rotation complete in %s; %s", point, time.Since(runStart).Round(time.Second), l.summary())
				return ""
			})
		})
		if t.Failed() {
			break
		}
	}
	checkOracle(t, e, start)
}
