package steps

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"testing"

	"github.com/linkerd/trust-rotation/workflow"
)

// liveOn is the probed pods presenting certificates from an issuer (LiveChain: the first name
// in order is the example).
func liveOn(iss *testCA, pods ...string) stateOpt {
	return func(s *State) {
		s.LiveChains = append(s.LiveChains, LiveChain{Certs: []*x509.Certificate{iss.cert}, Pods: len(pods), Example: slices.Min(pods)})
	}
}

// retiring is the checkpoint's rotation from retire-previous-anchor on (State.Retiring).
func retiring(c *testCA) stateOpt { return func(s *State) { s.Retiring = Fingerprint(c.cert) } }

// TestBundleWritesKeepTheAnchorsInUse: expand-trust-bundle and reduce-trust-bundle refuse to
// write a bundle that lacks the anchor the identity issuer, or a probed live certificate, chains
// to — linkerd-previous-anchor overwritten with a copy of the current anchor (the blog's
// CronJob) makes the rendered bundle the new anchor alone — and wait with a message naming the
// anchor, what holds on to it, and the Secret to fix; the act refuses too and writes nothing.
func TestBundleWritesKeepTheAnchorsInUse(t *testing.T) {
	p := newPKI(t)
	newFP, oldFP := ShortFingerprint(Fingerprint(p.newAnchor.cert)), ShortFingerprint(Fingerprint(p.oldAnchor.cert))
	cases := map[string]struct {
		step  string
		state *State
		want  []string
	}{
		"expand with linkerd-previous-anchor overwritten by the current anchor, issuer on the old one": {
			step:  StepExpandTrustBundle,
			state: rotatingState(p, previous(p.newAnchor), bundleOf(p.oldAnchor), liveOn(p.oldIssuer, "emojivoto/web-1", "emojivoto/web-0")),
			want: []string{"refusing to write [" + newFP + "]", "drop anchor " + oldFP, "identity issuer in Secret linkerd/linkerd-identity-issuer chains to",
				"2 meshed pods present live certificates", "emojivoto/web-0 among them",
				"Secret linkerd/linkerd-previous-anchor holds " + newFP + ", the current trust anchor", "overwritten", "put anchor " + oldFP},
		},
		"expand with linkerd-previous-anchor overwritten by an anchor the bundle does not hold": {
			step:  StepExpandTrustBundle,
			state: rotatingState(p, previous(p.stranger), bundleOf(p.oldAnchor)),
			want:  []string{"drop anchor " + oldFP, "holds " + ShortFingerprint(Fingerprint(p.stranger.cert)) + ", an anchor ConfigMap linkerd/linkerd-identity-trust-roots does not hold", "overwritten"},
		},
		"reduce while probed pods still present certificates from the old issuer": {
			step: StepReduceTrustBundle,
			state: rotatingState(p, previous(p.newAnchor), issuer(p.newIssuer), retiring(p.newAnchor),
				liveOn(p.newIssuer, "a/x"), liveOn(p.oldIssuer, "emojivoto/vote-0")),
			want: []string{"refusing to write [" + newFP + "]", "drop anchor " + oldFP, "1 meshed pod present", "emojivoto/vote-0", "restart those pods"},
		},
		"reduce while the issuer is still on the old anchor": {
			step:  StepReduceTrustBundle,
			state: rotatingState(p, previous(p.newAnchor), retiring(p.newAnchor)),
			want:  []string{"drop anchor " + oldFP, "identity issuer in Secret linkerd/linkerd-identity-issuer chains to", "renew the identity issuer"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := stepNamed(t, tc.step)
			d := st.Observe(tc.state, "")
			if d.Outcome != workflow.Wait || d.Reason != ReasonWouldDropAnchor {
				t.Fatalf("got %v %s %q; want Wait %s", d.Outcome, d.Reason, d.Message, ReasonWouldDropAnchor)
			}
			for _, w := range tc.want {
				if !strings.Contains(d.Message, w) {
					t.Errorf("message %q does not contain %q", d.Message, w)
				}
			}
			before := tc.state.Bundle.Data
			w := newConvergingWriter(tc.state)
			for _, s := range Rotation(w) {
				if s.Name == tc.step {
					if err := s.Act(context.Background(), tc.state, "t"); err == nil || !strings.Contains(err.Error(), "drop anchor "+oldFP) {
						t.Errorf("act: %v; want a refusal", err)
					}
				}
			}
			if tc.state.Bundle.Data != before || len(w.log) != 0 {
				t.Errorf("the act wrote %v", w.log)
			}
		})
	}
}

// TestBundleWritesGoOnWhenNothingIsDropped: the expansion and the reduction of a rotation as it
// should be, live certificates included, write their bundle.
func TestBundleWritesGoOnWhenNothingIsDropped(t *testing.T) {
	p := newPKI(t)
	cases := map[string]struct {
		step  string
		state *State
	}{
		"expand, pods on the old issuer": {StepExpandTrustBundle, rotatingState(p, bundleOf(p.oldAnchor), liveOn(p.oldIssuer, "a/x"))},
		"expand, issuer renewed early":   {StepExpandTrustBundle, rotatingState(p, bundleOf(p.oldAnchor), issuer(p.newIssuer), liveOn(p.oldIssuer, "a/x"))},
		"reduce, every pod on the new anchor": {StepReduceTrustBundle,
			rotatingState(p, previous(p.newAnchor), issuer(p.newIssuer), retiring(p.newAnchor), liveOn(p.newIssuer, "a/x", "a/y"))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := stepNamed(t, tc.step).Observe(tc.state, ""); d.Outcome != workflow.Act {
				t.Fatalf("got %v %s %q; want Act", d.Outcome, d.Reason, d.Message)
			}
		})
	}
}

// TestDriftRewriteKeepsTheAnchorsInUse: at a step after the expansion, linkerd-previous-anchor
// overwritten by the current anchor makes the rotation's bundle the new anchor alone and the
// ConfigMap look drifted. While pods still present certificates that chain to the old anchor,
// the operator must not "repair" the bundle to the new anchor alone: it waits, naming the
// Secret; once every probed pod is on the new anchor, dropping the old one is safe.
func TestDriftRewriteKeepsTheAnchorsInUse(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, previous(p.newAnchor), issuer(p.newIssuer), liveOn(p.oldIssuer, "emojivoto/web-0"), liveOn(p.newIssuer, "linkerd/identity-0"))
	d, ok := CheckBundle(rotationSteps, s, StepRenewWorkloadCertificates)
	if !ok || d.Rewrite != "" || d.Reason != ReasonWouldDropAnchor || d.StartOver {
		t.Fatalf("CheckBundle = %+v, %v; want a wait with nothing to rewrite", d, ok)
	}
	for _, w := range []string{"linkerd/linkerd-previous-anchor", "emojivoto/web-0", "overwritten"} {
		if !strings.Contains(d.Message, w) {
			t.Errorf("message %q does not contain %q", d.Message, w)
		}
	}
	if got := stepNamed(t, StepRenewWorkloadCertificates).Observe(s, ""); got.Reason != ReasonWouldDropAnchor {
		t.Errorf("renew-workload-certificates: %v %s %q", got.Outcome, got.Reason, got.Message)
	}

	s.LiveChains = s.LiveChains[1:]
	if d, ok := CheckBundle(rotationSteps, s, StepRenewWorkloadCertificates); !ok || d.Rewrite != RenderBundle(p.newAnchor.cert) {
		t.Fatalf("every pod on the new anchor: CheckBundle = %+v, %v; want a rewrite to the new anchor alone", d, ok)
	}
}
