package steps

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// reverted is a bundle another field manager wrote back: the old anchor alone.
func reverted(p pki, manager string) stateOpt {
	return func(s *State) {
		bundleOf(p.oldAnchor)(s)
		s.Bundle.Owners = []FieldOwner{{Manager: manager, Operation: "Update", Time: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}}
	}
}

// TestBundleStepsWaitOnADriftedBundle: every step after the expansion that relies on the trust
// bundle, observing a ConfigMap reverted by another field manager in a state where it would
// otherwise act or pass, waits with a message naming that manager, and the drift says what to
// rewrite.
func TestBundleStepsWaitOnADriftedBundle(t *testing.T) {
	p := newPKI(t)
	expanded := []stateOpt{issuer(p.newIssuer), bundlePods(4, 4), certPods(4, 4)}
	reduced := append([]stateOpt{previous(p.newAnchor)}, expanded...)
	cases := []struct {
		step string
		opts []stateOpt
		want string // the bundle to rewrite
	}{
		{StepRefreshControlPlane, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepPropagateTrustRoots, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepRestartIdentity, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepWaitForIdentityIssuer, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepRestartIdentityOnNewIssuer, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepRefreshControlPlaneCerts, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepRenewWorkloadCertificates, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepRetirePreviousAnchor, expanded, RenderBundle(p.newAnchor.cert, p.oldAnchor.cert)},
		{StepRefreshControlPlaneReduced, reduced, RenderBundle(p.newAnchor.cert)},
		{StepRemoveOldTrustRoots, reduced, RenderBundle(p.newAnchor.cert)},
	}
	for _, tc := range cases {
		t.Run(tc.step, func(t *testing.T) {
			s := rotatingState(p, append(append([]stateOpt{}, tc.opts...), reverted(p, "argocd-controller"))...)
			d := stepNamed(t, tc.step).Observe(s, "")
			if d.Outcome != workflow.Wait || d.Reason != "TrustBundleDrifted" {
				t.Fatalf("got %v %s %q; want Wait TrustBundleDrifted", d.Outcome, d.Reason, d.Message)
			}
			for _, w := range []string{`field manager "argocd-controller" (Update at 2026-06-01T12:00:00Z)`, "linkerd/linkerd-identity-trust-roots", "rewrites it"} {
				if !strings.Contains(d.Message, w) {
					t.Errorf("message %q does not contain %q", d.Message, w)
				}
			}
			drift, ok := CheckBundle(rotationSteps, s, tc.step)
			if !ok || drift.Rewrite != tc.want {
				t.Fatalf("CheckBundle = %+v, %v; want a rewrite to the rotation's bundle", drift, ok)
			}
			if want := stepNamed(t, tc.step).ReloadsBundle; drift.StartOver != want {
				t.Errorf("StartOver = %v, want %v", drift.StartOver, want)
			}
			// Rewritten: the step observes as before.
			s.Bundle = Bundle{Found: true, Data: tc.want}
			s.Bundle.Certs, _ = ParseCertificates([]byte(tc.want))
			if d := stepNamed(t, tc.step).Observe(s, ""); d.Reason == "TrustBundleDrifted" || d.Outcome == workflow.Wait && strings.Contains(d.Message, "argocd") {
				t.Errorf("after the rewrite: %v %s %q", d.Outcome, d.Reason, d.Message)
			}
		})
	}
}

func TestCheckBundleLeavesAlone(t *testing.T) {
	p := newPKI(t)
	cases := map[string]struct {
		step  string
		state *State
	}{
		"the expansion writes the bundle itself": {StepExpandTrustBundle, rotatingState(p, reverted(p, "helm"))},
		"the reduction writes the bundle itself": {StepReduceTrustBundle, rotatingState(p, previous(p.newAnchor), reverted(p, "helm"))},
		"retired: the reduction comes next":      {StepRetirePreviousAnchor, rotatingState(p, previous(p.newAnchor))},
		"the bundle the rotation wants":          {StepRestartIdentity, rotatingState(p)},
		"no usable anchor: the step says so":     {StepRestartIdentity, rotatingState(p, anchor(nil), reverted(p, "helm"))},
		"Synced: detect-anchor-rotation handles": {StepDetectAnchorRotation, rotatingState(p, previous(p.newAnchor), reverted(p, "helm"))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d, ok := CheckBundle(rotationSteps, tc.state, tc.step); ok {
				t.Fatalf("drift %+v", d)
			}
		})
	}
}

// TestDeletedBundleIsRewritten: a ConfigMap deleted mid-rotation is a drift too.
func TestDeletedBundleIsRewritten(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, noBundle())
	d, ok := CheckBundle(rotationSteps, s, StepPropagateTrustRoots)
	if !ok || d.Rewrite != RenderBundle(p.newAnchor.cert, p.oldAnchor.cert) || !strings.Contains(d.Message, "was deleted") {
		t.Fatalf("CheckBundle = %+v, %v", d, ok)
	}
}

// TestDriftKeepsTheIssuersAnchor: a bundle changed to trust the anchor the identity issuer now
// chains to, which the rotation's bundle lacks, is not rewritten (that would drop it): the
// rotation waits for a person.
func TestDriftKeepsTheIssuersAnchor(t *testing.T) {
	p := newPKI(t)
	strangerIssuer := newCert(t, "stranger-issuer", p.stranger, true, time.Now().Add(time.Hour))
	s := rotatingState(p, issuer(strangerIssuer), bundleOf(p.stranger, p.newAnchor, p.oldAnchor))
	d, ok := CheckBundle(rotationSteps, s, StepRenewWorkloadCertificates)
	if !ok || d.Rewrite != "" || d.Reason != "TrustBundleDriftKept" {
		t.Fatalf("CheckBundle = %+v, %v; want a drift kept", d, ok)
	}
	if got := stepNamed(t, StepRenewWorkloadCertificates).Observe(s, ""); got.Reason != "TrustBundleDriftKept" {
		t.Fatalf("got %v %s %q", got.Outcome, got.Reason, got.Message)
	}
}

// TestPodsInjectedWithADriftedBundleCountAsBehind: from restart-identity to the retirement of the
// previous anchor, a pod no longer on the expanded bundle (injected while the bundle had
// drifted) holds the rotation, named for a restart, though the ConfigMap is right again.
func TestPodsInjectedWithADriftedBundleCountAsBehind(t *testing.T) {
	p := newPKI(t)
	behind := WorkloadCount{Workload: "emojivoto/Deployment/web", Pods: 1}
	for _, step := range []string{StepRestartIdentity, StepWaitForIdentityIssuer, StepRestartIdentityOnNewIssuer,
		StepRefreshControlPlaneCerts, StepRenewWorkloadCertificates, StepRetirePreviousAnchor} {
		t.Run(step, func(t *testing.T) {
			s := rotatingState(p, issuer(p.newIssuer), bundlePods(3, 4, behind), certPods(4, 4))
			d := stepNamed(t, step).Observe(s, "")
			if d.Outcome != workflow.Wait || d.Reason != "TrustBundleRegressed" || !strings.Contains(d.Message, "restart: emojivoto/Deployment/web (1 pod)") {
				t.Fatalf("got %v %s %q; want Wait TrustBundleRegressed naming the workload", d.Outcome, d.Reason, d.Message)
			}
		})
	}
}

// TestRevertAtEveryStep runs whole rotations over a simulated cluster in which another field
// manager reverts the ConfigMap to the old anchor alone at one step of each, the operator
// rewriting it as its controller does (a step that restarted pods starts over first, the
// workflow's jump; then CheckBundle and the bundle writer), and a pod injected meanwhile with the reverted bundle: no
// control-plane restart ever happens while the ConfigMap holds another bundle than the
// rotation's, the rotation parks with a message naming the manager and waits for the pod, and
// completes.
func TestRevertAtEveryStep(t *testing.T) {
	for _, at := range []string{StepRefreshControlPlane, StepPropagateTrustRoots, StepRestartIdentity, StepWaitForIdentityIssuer,
		StepRestartIdentityOnNewIssuer, StepRefreshControlPlaneCerts, StepRenewWorkloadCertificates,
		StepRefreshControlPlaneReduced, StepRemoveOldTrustRoots} {
		// (retire-previous-anchor acts as soon as it is reached; a revert after that is undone by
		// reduce-trust-bundle, and TestBundleStepsWaitOnADriftedBundle covers one before.)
		t.Run(at, func(t *testing.T) {
			p := newPKI(t)
			s := rotatingState(p, anchor(p.oldAnchor), previous(nil), noBundle(), bundlePods(4, 4), certPods(4, 4))
			w, cp, advance := driveRotation(t, s)
			for range 10 {
				if !advance().Acted {
					break
				}
			}
			if cp.Step != StepDetectAnchorRotation {
				t.Fatalf("bootstrap stopped at %s", cp.Step)
			}
			s.Anchor = src("cert-manager", "linkerd-trust-anchor", p.newAnchor)
			s.TrustBundle = Convergence{Converged: 0, Target: 4}
			revertedAt, parked, regressed := false, false, false
			for i := 0; ; i++ {
				if i == 200 {
					t.Fatalf("no completion; at %s", cp.Step)
				}
				res := advance()
				if res.Completed {
					break
				}
				if cp.Step == at && !revertedAt {
					revertedAt = true
					reverted(p, "argocd-controller")(s)
					if stepNamed(t, at).NeedsExpandedPods || at == StepRemoveOldTrustRoots || at == StepPropagateTrustRoots {
						s.TrustBundle.Converged = min(s.TrustBundle.Converged, 3) // a pod injected meanwhile
					}
					before := w.restarts["linkerd-identity"] + w.restarts["linkerd-destination"] + len(w.deleted)
					token := cp.Token
					res = advance()
					if _, due := mustDrift(t, s, at).StartsOver(at, token); due {
						// A step that restarted pods starts over first: the workflow's jump to
						// itself, saved before the bundle is rewritten.
						if j := res.Jumped; j == nil || j.From != at || j.To != at || j.Reason != ReasonStepStartedOver || res.Acted {
							t.Fatalf("after the revert at %s: jumped %v acted %v; want %s starting over", at, res.Jumped, res.Acted, at)
						}
						if want := StartOverToken(at, token); cp.Token != want || cp.Acts != 0 {
							t.Fatalf("started over under %q (%d acts), want %q", cp.Token, cp.Acts, want)
						}
						res = advance()
					} else if res.Jumped != nil {
						t.Fatalf("after the revert at %s: jumped %v; want no start over under token %q", at, res.Jumped, token)
					}
					if res.Acted || res.Decision.Reason != "TrustBundleDrifted" || !strings.Contains(res.Decision.Message, `"argocd-controller"`) {
						t.Fatalf("after the revert at %s: acted %v, %s %q", at, res.Acted, res.Decision.Reason, res.Decision.Message)
					}
					if after := w.restarts["linkerd-identity"] + w.restarts["linkerd-destination"] + len(w.deleted); after != before {
						t.Fatalf("restarted the control plane on a reverted bundle")
					}
					parked = true
					// The operator's repair.
					drift, ok := CheckBundle(rotationSteps, s, cp.Step)
					if !ok || drift.Rewrite == "" {
						t.Fatalf("CheckBundle = %+v, %v", drift, ok)
					}
					if _, due := drift.StartsOver(cp.Step, cp.Token); due {
						t.Fatalf("a start over is still due at %s under %q after the jump", cp.Step, cp.Token)
					}
					if err := w.WriteTrustRoots(context.Background(), drift.Rewrite); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if res.Acted {
					continue
				}
				// The world: the user does what the rotation waits for.
				switch res.Decision.Reason {
				case "TrustBundleConverging":
					s.TrustBundle.Converged = s.TrustBundle.Target
				case "TrustBundleRegressed":
					regressed = true
					s.TrustBundle.Converged = s.TrustBundle.Target
				case "WaitingForIssuerRenewal":
					s.Issuer = src("linkerd", "linkerd-identity-issuer", p.newIssuer)
					s.Certificates = Convergence{Converged: 0, Target: 4}
				case "WorkloadCertificatesRenewing":
					s.Certificates = Convergence{Converged: 4, Target: 4}
				default:
					t.Fatalf("stuck at %s: %s %q", cp.Step, res.Decision.Reason, res.Decision.Message)
				}
			}
			if !parked {
				t.Fatalf("the rotation never reached %s", at)
			}
			if stepNamed(t, at).NeedsExpandedPods && !regressed {
				t.Errorf("the pod injected with the reverted bundle did not hold the rotation")
			}
			if len(w.badRestarts) > 0 {
				t.Errorf("control-plane restarts on a bundle other than the rotation's: %v", w.badRestarts)
			}
			if s.Bundle.Data != RenderBundle(p.newAnchor.cert) {
				t.Errorf("the rotation ended with another bundle than the new anchor alone")
			}
		})
	}
}

func mustDrift(t *testing.T, s *State, step string) BundleDrift {
	t.Helper()
	drift, ok := CheckBundle(rotationSteps, s, step)
	if !ok {
		t.Fatalf("no drift at %s", step)
	}
	return drift
}
