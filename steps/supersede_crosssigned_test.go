package steps

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestCrossSignedSupersededAfterReduction: a cross-signed rotation A -> B superseded by a
// renewal to C (signed by B) at refresh-control-plane-reduced, its bundle already reduced to [B].
// The round finishes on B and jumps to the next one from remove-old-trust-roots, so the pods
// still injected with [A] never got the round's one restart. The next round, cross-signed too,
// passes over the expansion (its bundle stays [B]); from wait-for-remote-trust-roots on, every
// pod must run with that bundle. The soak found the rotation waiting there for good: the step
// that restarts pods onto the bundle, propagate-trust-roots, had been passed over too, so with
// automatic restarts no one restarted them. The pods behind are restarted at
// propagate-trust-roots instead, by the operator or by the user it names them to, and the
// rotation goes on to the issuer switch.
func TestCrossSignedSupersededAfterReduction(t *testing.T) {
	a := anchorCA(t, "anchor")
	b := newCert(t, "anchor", a, true, time.Now().Add(24*time.Hour))
	c := newCert(t, "anchor", b, true, time.Now().Add(48*time.Hour))
	issuerB := newCert(t, "issuer", b, true, time.Now().Add(time.Hour))
	apps := []string{"apps/Deployment/web", "apps/Deployment/api", "jobs/StatefulSet/db"}

	for name, automaticRestarts := range map[string]bool{"automatic restarts": true, "manual restarts": false} {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			opts := []stateOpt{anchor(c), previous(b), issuer(issuerB), bundleOf(b), certPods(6, 6), at(now),
				func(s *State) { s.Spec.Strategy = v1alpha1.StrategyCrossSigned }}
			if automaticRestarts {
				opts = append(opts, automatic())
				for _, key := range apps {
					ref, _ := ParseWorkload(key)
					opts = append(opts, workload(key, behindPods(ref.Name+"-0", ref.Name+"-1")))
				}
			}
			s := rotatingState(pki{oldAnchor: b, newAnchor: c, oldIssuer: issuerB}, opts...)
			// Six pods, two per workload, were injected with [A]: behind the bundle [B].
			behind := func() {
				n := 0
				var counts []WorkloadCount
				for _, key := range apps {
					if w := s.Workloads[key]; w == nil || len(w.BundleBehind) > 0 {
						n += 2
						counts = append(counts, WorkloadCount{Workload: key, Pods: 2})
					}
				}
				s.TrustBundle = Convergence{Converged: 6 - n, Target: 6, Behind: counts, BehindWorkloads: len(counts)}
			}
			behind()
			st := v1alpha1.TrustAnchorRotationStatus{Checkpoint: &v1alpha1.Checkpoint{
				Step: StepRefreshControlPlaneReduced, Rotation: Fingerprint(b.cert), Strategy: v1alpha1.StrategyCrossSigned}}

			w := newConvergingWriter(s)
			wf, err := NewWorkflow(Rotation(w))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			advance := func() workflow.Result {
				t.Helper()
				if err := s.FromStatus(rotationSteps, &st); err != nil {
					t.Fatal(err)
				}
				res, err := wf.Advance(context.Background(), WorkflowCheckpoint(st.Checkpoint), s, func(_ context.Context, next workflow.Checkpoint) error {
					SaveCheckpoint(rotationSteps, &st, next, s, s.Now)
					return nil
				}, func() string { n++; return NewActStamp(now.Add(time.Duration(n) * time.Second)) })
				if err != nil {
					t.Fatal(err)
				}
				st = Project(rotationSteps, st, s.Spec, 1, s, res, s.Now) // as the operator publishes it
				// A workload the operator restarted rolls out at once, its pods on the current bundle.
				for _, wl := range s.Workloads {
					if wl.RestartedAt != "" && !wl.RolledOut {
						wl.RolledOut, wl.BundleBehind = true, nil
					}
				}
				behind()
				s.Now = s.Now.Add(time.Second)
				return res
			}

			var res workflow.Result
			var path []string
			// Thirty passes: with automatic restarts nothing but the operator acts, so a rotation
			// that waits after them waits for good.
			for range 30 {
				res = advance()
				if p := res.Checkpoint.Step + " " + res.Decision.Reason; len(path) == 0 || path[len(path)-1] != p {
					path = append(path, p)
				}
				if !automaticRestarts && !res.Acted && res.Jumped == nil {
					break
				}
			}
			if !automaticRestarts {
				// The user is asked, at the step whose restarts the pods need, to restart them.
				if res.Checkpoint.Step != StepPropagateTrustRoots || res.Decision.Outcome != workflow.Wait ||
					!strings.Contains(res.Decision.Message, "restart: apps/Deployment/web") {
					t.Fatalf("stopped at %s: %v %s %q, want a wait at %s naming the workloads behind\npath: %s",
						res.Checkpoint.Step, res.Decision.Outcome, res.Decision.Reason, res.Decision.Message, StepPropagateTrustRoots, strings.Join(path, "; "))
				}
				// The user restarts them: the rotation goes on.
				s.TrustBundle = Convergence{Converged: 6, Target: 6}
				for range 10 {
					if res = advance(); !res.Acted && res.Jumped == nil {
						break
					}
				}
			}
			if st.Checkpoint.Rotation != Fingerprint(c.cert) || st.Checkpoint.Strategy != v1alpha1.StrategyCrossSigned {
				t.Fatalf("the next round did not start cross-signed towards C: %+v\npath: %s", st.Checkpoint, strings.Join(path, "; "))
			}
			if res.Checkpoint.Step != StepWaitForIdentityIssuer {
				t.Fatalf("stopped at %s: %s %q, want %s (the issuer renewal onto C)\npath: %s",
					res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message, StepWaitForIdentityIssuer, strings.Join(path, "; "))
			}
			if automaticRestarts {
				for _, key := range apps {
					if w.restarts[key] != 1 {
						t.Errorf("%s restarted %d time(s), want 1: %v", key, w.restarts[key], w.restarts)
					}
				}
			}
			if s.Bundle.Data != RenderBundle(b.cert) {
				t.Errorf("the bundle is %s, want [B] until the next round retires B", fingerprints(s.Bundle.Certs))
			}
		})
	}
}
