package steps

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// syncedOn is a Synced mesh on p's new anchor, its identity issuer iss, identity started two
// hours ago.
func syncedOn(p pki, iss *testCA, opts ...stateOpt) *State {
	base := []stateOpt{previous(p.newAnchor), issuer(iss), bundleOf(p.newAnchor), identityPods(1, "linkerd-identity-a")}
	return rotatingState(p, append(base, opts...)...)
}

func staleLeaves(signer *testCA, pods int, latest time.Duration) stateOpt {
	return func(s *State) {
		s.StaleLeaves = append(s.StaleLeaves, StaleLeaves{Signer: signer.cert, Pods: pods, Example: "app/web-1", Latest: s.Now.Add(latest)})
	}
}

// TestStaleIssuer: certificates another issuer signed after identity should have loaded the one
// in the Secret say identity serves a stale issuer, while an identity pod that could have signed
// them runs, and only between rotations.
func TestStaleIssuer(t *testing.T) {
	p := newPKI(t)
	renewed := newCert(t, "renewed-issuer", p.newAnchor, true, time.Now().Add(2*time.Hour))
	cases := map[string]struct {
		step  string
		state *State
		want  *testCA
	}{
		"signed by the issuer before, after identity started": {
			StepDetectAnchorRotation, syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -time.Minute)), p.newIssuer,
		},
		"signed by the issuer in the Secret": {
			StepDetectAnchorRotation, syncedOn(p, renewed, staleLeaves(renewed, 3, -time.Minute)), nil,
		},
		"signed before every identity pod running now started": {
			StepDetectAnchorRotation, syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -3*time.Hour)), nil,
		},
		"an identity pod restarted since, the other not": {
			StepDetectAnchorRotation, syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -time.Hour), identityPod("linkerd-identity-b", -time.Minute, "")), p.newIssuer,
		},
		"of two stale issuers, the one that signed last": {
			StepDetectAnchorRotation, syncedOn(p, renewed, staleLeaves(p.oldIssuer, 1, -2*time.Minute), staleLeaves(p.newIssuer, 1, -time.Minute)), p.newIssuer,
		},
		"during a rotation": {
			StepDetectAnchorRotation, rotatingState(p, issuer(renewed), identityPods(1, "linkerd-identity-a"), staleLeaves(p.oldIssuer, 3, -time.Minute)), nil,
		},
		"at a rotation's step": {
			StepRenewWorkloadCertificates, syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -time.Minute)), nil,
		},
		"at bootstrap": {
			StepBootstrap, syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -time.Minute)), nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.state.StaleIssuer(tc.step)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("StaleIssuer = %s, want none", ShortFingerprint(Fingerprint(got.Signer)))
			case tc.want != nil && (got == nil || Fingerprint(got.Signer) != Fingerprint(tc.want.cert)):
				t.Fatalf("StaleIssuer = %+v, want the one signed by %s", got, tc.want.cert.Subject.CommonName)
			}
		})
	}
}

// TestIssuerObservedAt: the status's time holds for the issuer it names; a new issuer, or a status
// that names none, is observed now.
func TestIssuerObservedAt(t *testing.T) {
	p := newPKI(t)
	s := syncedOn(p, p.newIssuer)
	then := s.Now.Add(-time.Hour)
	s.IssuerObserved = IssuerObservation{Fingerprint: Fingerprint(p.newIssuer.cert), At: then}
	if got := s.IssuerObservedAt(s.Now); !got.Equal(then) {
		t.Errorf("same issuer: observed at %s, want the status's %s", got, then)
	}
	s.IssuerObserved.Fingerprint = Fingerprint(p.oldIssuer.cert)
	if got := s.IssuerObservedAt(s.Now); !got.Equal(s.Now) {
		t.Errorf("another issuer in the status: observed at %s, want now", got)
	}
	s.IssuerObserved = IssuerObservation{}
	if got := s.IssuerObservedAt(s.Now); !got.Equal(s.Now) {
		t.Errorf("no status: observed at %s, want now", got)
	}
	issuer(nil)(s)
	if got := s.IssuerObservedAt(s.Now); !got.IsZero() {
		t.Errorf("no issuer: observed at %s, want zero", got)
	}
}

// TestStaleIssuerRestart drives detect-anchor-rotation through the engine: Manual reports and
// writes nothing; Automatic restarts identity once per stale issuer — not again when the operator
// resumes from the checkpoint of the restart, nor while the pods it restarted roll — and never
// onto an issuer identity would refuse at start.
func TestStaleIssuerRestart(t *testing.T) {
	p := newPKI(t)
	renewed := newCert(t, "renewed-issuer", p.newAnchor, true, time.Now().Add(2*time.Hour))
	advance := func(t *testing.T, s *State, cp workflow.Checkpoint) (*convergingWriter, workflow.Result) {
		t.Helper()
		w := newConvergingWriter(s)
		wf, err := NewWorkflow(Rotation(w))
		if err != nil {
			t.Fatal(err)
		}
		res, err := wf.Advance(context.Background(), cp, s, func(context.Context, workflow.Checkpoint) error { return nil },
			func() string { return NewActStamp(s.Now) })
		if err != nil {
			t.Fatal(err)
		}
		return w, res
	}
	detect := workflow.Checkpoint{Step: StepDetectAnchorRotation}

	t.Run("Manual", func(t *testing.T) {
		s := syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -time.Minute))
		w, res := advance(t, s, detect)
		if res.Acted || w.restarts["linkerd-identity"] != 0 {
			t.Fatalf("Manual restarted identity (%+v)", res.Decision)
		}
		d := res.Decision
		for _, want := range []string{ShortFingerprint(Fingerprint(p.newIssuer.cert)), ShortFingerprint(Fingerprint(renewed.cert)), "3 pod(s)", "app/web-1",
			"kubectl rollout restart -n linkerd deploy/linkerd-identity", "spec.staleIssuerRestart: Automatic"} {
			if !strings.Contains(d.Message, want) {
				t.Errorf("message does not say %q: %s", want, d.Message)
			}
		}
		if d.Outcome != workflow.Wait || d.Reason != v1alpha1.ReasonIdentityIssuerStale {
			t.Errorf("decision %v %s, want a wait for %s", d.Outcome, d.Reason, v1alpha1.ReasonIdentityIssuerStale)
		}
	})

	t.Run("Automatic", func(t *testing.T) {
		s := syncedOn(p, renewed, staleLeaves(p.newIssuer, 3, -time.Minute), func(s *State) { s.Spec.StaleIssuerRestart = v1alpha1.Automatic })
		// The rollout is not over yet: the restarted template's pod has not replaced the old one.
		w := newConvergingWriter(s)
		wf, err := NewWorkflow(Rotation(stalledRollout{w}))
		if err != nil {
			t.Fatal(err)
		}
		save := func(context.Context, workflow.Checkpoint) error { return nil }
		res, err := wf.Advance(context.Background(), detect, s, save, func() string { return NewActStamp(s.Now) })
		if err != nil || !res.Acted {
			t.Fatalf("Automatic did not act: %+v %v", res.Decision, err)
		}
		tok, err := ParseActToken(res.Checkpoint.Token)
		if err != nil || tok.Verb != TokenStaleIssuer || tok.Args[0] != ShortFingerprint(Fingerprint(p.newIssuer.cert)) {
			t.Fatalf("token %q does not name the stale issuer (%v)", res.Checkpoint.Token, err)
		}
		if got := s.ControlPlane["linkerd-identity"].RestartedAt; got != res.Checkpoint.Token {
			t.Fatalf("identity restarted under %q, want the checkpoint's token %q", got, res.Checkpoint.Token)
		}
		// Killed after the act, before the status: the next operator resumes from the checkpoint
		// and waits, the old identity pod still up.
		for range 2 {
			res, err = wf.Advance(context.Background(), res.Checkpoint, s, save, func() string { return NewActStamp(s.Now.Add(time.Minute)) })
			if err != nil || res.Acted || res.Decision.Outcome != workflow.Wait || !strings.Contains(res.Decision.Message, "was restarted for it") {
				t.Fatalf("resumed: %+v (%v), want a wait for the restarted identity", res.Decision, err)
			}
		}
		if w.restarts["linkerd-identity"] != 1 {
			t.Fatalf("identity restarted %d times, want once", w.restarts["linkerd-identity"])
		}
		// The rollout ends: no identity pod that signed with the stale issuer is left.
		w.rollOut("linkerd-identity")
		if l := s.StaleIssuer(StepDetectAnchorRotation); l != nil {
			t.Fatalf("stale issuer still reported once identity rolled: %+v", l)
		}
		// Another stale issuer later on: a restart of its own.
		s.Now = s.Now.Add(time.Hour)
		staleLeaves(renewed, 1, -time.Minute)(s)
		issuer(newCert(t, "renewed-again", p.newAnchor, true, time.Now().Add(3*time.Hour)))(s)
		first := res.Checkpoint.Token
		res, err = wf.Advance(context.Background(), res.Checkpoint, s, save, func() string { return NewActStamp(s.Now) })
		if err != nil || !res.Acted || res.Checkpoint.Token == first || w.restarts["linkerd-identity"] != 2 {
			t.Fatalf("another stale issuer: %+v (%v), token %q after %q, %d restarts", res.Decision, err, res.Checkpoint.Token, first, w.restarts["linkerd-identity"])
		}
	})

	t.Run("AutomaticOntoAnIssuerIdentityWouldRefuse", func(t *testing.T) {
		stranger := newCert(t, "stranger-issuer", p.stranger, true, time.Now().Add(2*time.Hour))
		s := syncedOn(p, stranger, staleLeaves(p.newIssuer, 3, -time.Minute), func(s *State) { s.Spec.StaleIssuerRestart = v1alpha1.Automatic })
		w, res := advance(t, s, detect)
		if res.Acted || w.restarts["linkerd-identity"] != 0 || !strings.Contains(res.Decision.Message, "a restarted identity would refuse it") {
			t.Fatalf("restart onto an issuer off the bundle: acted %v, %+v", res.Acted, res.Decision)
		}
	})
}

// stalledRollout is a convergingWriter whose identity rollout does not finish by itself: the
// test ends it (rollOut).
type stalledRollout struct{ *convergingWriter }

func (w stalledRollout) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	return w.Simulated.RestartDeployment(ctx, namespace, name, token)
}

// TestStaleIssuerCarriedOverARestart: a new leader keeps the condition the previous one left
// True until it has probed every pod again, and waits meanwhile; then what it reads decides.
func TestStaleIssuerCarriedOverARestart(t *testing.T) {
	p := newPKI(t)
	renewed := newCert(t, "renewed-issuer", p.newAnchor, true, time.Now().Add(2*time.Hour))
	const reported = "linkerd-identity still signs workload certificates with issuer 0a1b2c3d4e5f ..."
	s := syncedOn(p, renewed, func(s *State) { s.StaleReported, s.StaleLeavesPartial = reported, true })
	prev := v1alpha1.TrustAnchorRotationStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionIdentityIssuerStale, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonIdentityIssuerStale, Message: reported}}}
	project := func() *metav1.Condition {
		res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepDetectAnchorRotation}, Phase: string(v1alpha1.PhaseSynced), Decision: observeDetect(s, "")}
		st := Project(rotationSteps, prev, s.Spec, 1, s, res, s.Now)
		return meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionIdentityIssuerStale)
	}
	if d := observeDetect(s, ""); d.Outcome != workflow.Wait || !strings.HasPrefix(d.Message, reported) {
		t.Errorf("while probing again: %+v, want a wait with the reported message", d)
	}
	if c := project(); c == nil || c.Status != metav1.ConditionTrue || c.Message != reported {
		t.Errorf("while probing again: condition %+v, want the previous one", c)
	}
	s.StaleLeavesPartial = false
	if d := observeDetect(s, ""); d.Reason != "TrustAnchorUnchanged" {
		t.Errorf("every pod probed again, none stale: %+v, want Synced", d)
	}
	if c := project(); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("every pod probed again, none stale: condition %+v, want False", c)
	}
}
