package steps

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// renewSameKey re-issues a self-signed anchor with its key and subject, as cert-manager does
// for a Certificate with rotationPolicy Never.
func renewSameKey(t *testing.T, ca *testCA) *testCA {
	t.Helper()
	serial++
	tmpl := *ca.cert
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotAfter = ca.cert.NotAfter.Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: ca.key}
}

func inFlight(cs ...*testCA) stateOpt {
	return func(s *State) {
		s.InFlight = nil
		for _, c := range cs {
			s.InFlight = append(s.InFlight, c.cert)
		}
	}
}

// TestObserveBadInput covers the decisions on hostile or unusual input: each must say what is
// wrong, and none may write a bundle that drops an anchor a live certificate may chain to.
func TestObserveBadInput(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	thirdIssuer := newCert(t, "third-issuer", third, true, time.Now().Add(time.Hour))
	renewed := renewSameKey(t, p.oldAnchor)
	strangerIssuer := newCert(t, "stranger-issuer", p.stranger, true, time.Now().Add(time.Hour))
	synced := func(opts ...stateOpt) *State {
		return rotatingState(p, append([]stateOpt{anchor(p.oldAnchor), previous(p.oldAnchor), bundleOf(p.oldAnchor)}, opts...)...)
	}
	cases := map[string]struct {
		step        string
		state       *State
		wantOutcome workflow.Outcome
		wantReason  string
		wantInMsg   string
	}{
		"detect says an anchor renewed with the same key needs no rotation, and updates it in place": {
			step: StepDetectAnchorRotation, state: synced(anchor(renewed)),
			wantOutcome: workflow.Act, wantReason: "TrustAnchorRenewedSameKey", wantInMsg: "no rotation needed",
		},
		"detect is quiet once an in-place renewal was written": {
			step: StepDetectAnchorRotation, state: synced(anchor(renewed), previous(renewed), bundleOf(renewed)),
			wantOutcome: workflow.Wait, wantReason: "TrustAnchorUnchanged",
		},
		"detect restores a bundle edited by hand to add an anchor nothing chains to": {
			step: StepDetectAnchorRotation, state: synced(bundleOf(p.oldAnchor, p.stranger)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleDrifted",
		},
		"detect restores a bundle edited by hand to drop the anchor": {
			step: StepDetectAnchorRotation, state: synced(bundleOf(p.stranger)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleDrifted",
		},
		"detect parks rather than drop a hand-added anchor that signs the issuer": {
			step: StepDetectAnchorRotation, state: synced(bundleOf(p.oldAnchor, p.stranger), issuer(strangerIssuer)),
			wantOutcome: workflow.Wait, wantReason: "TrustBundleDriftKept", wantInMsg: "would drop it",
		},
		"detect waits, naming the Secret, when the previous anchor is gone": {
			step: StepDetectAnchorRotation, state: synced(previous(nil)),
			wantOutcome: workflow.Wait, wantReason: "PreviousAnchorUnavailable", wantInMsg: "linkerd/linkerd-previous-anchor not found",
		},
		"expand never writes a bundle without the previous anchor": {
			step: StepExpandTrustBundle, state: rotatingState(p, previous(nil), bundleOf(p.oldAnchor)),
			wantOutcome: workflow.Wait, wantReason: "PreviousAnchorUnavailable",
		},
		"expand keeps an in-flight anchor between the new and the previous one": {
			step: StepExpandTrustBundle, state: rotatingState(p, anchor(third), inFlight(p.newAnchor), bundleOf(p.newAnchor, p.oldAnchor)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleOutdated",
		},
		"expand is done when the bundle holds the in-flight anchor too": {
			step: StepExpandTrustBundle, state: rotatingState(p, anchor(third), inFlight(p.newAnchor), bundleOf(third, p.newAnchor, p.oldAnchor)),
			wantOutcome: workflow.Done, wantInMsg: "(in flight)",
		},
		"the issuer step waits for cmctl renew while the issuer is on an in-flight anchor": {
			step: StepWaitForIdentityIssuer, state: rotatingState(p, anchor(third), inFlight(p.newAnchor), bundleOf(third, p.newAnchor, p.oldAnchor), issuer(p.newIssuer)),
			wantOutcome: workflow.Wait, wantReason: "WaitingForIssuerRenewal",
		},
		"the issuer step reports an issuer from no kept anchor": {
			step: StepWaitForIdentityIssuer, state: rotatingState(p, anchor(third), inFlight(p.newAnchor), bundleOf(third, p.newAnchor, p.oldAnchor), issuer(strangerIssuer)),
			wantOutcome: workflow.Wait, wantReason: "IssuerUnrelated", wantInMsg: "signed by neither",
		},
		"the issuer step is done with the issuer on the newest anchor": {
			step: StepWaitForIdentityIssuer, state: rotatingState(p, anchor(third), inFlight(p.newAnchor), bundleOf(third, p.newAnchor, p.oldAnchor), issuer(thirdIssuer)),
			wantOutcome: workflow.Done,
		},
		"reduction drops the in-flight anchors once the previous anchor is retired": {
			step: StepReduceTrustBundle, state: rotatingState(p, anchor(third), previous(third), issuer(thirdIssuer), inFlight(p.newAnchor), bundleOf(third, p.newAnchor, p.oldAnchor)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleOutdated",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := stepNamed(t, tc.step).Observe(tc.state, "")
			if d.Outcome != tc.wantOutcome || (tc.wantReason != "" && d.Reason != tc.wantReason) || !strings.Contains(d.Message, tc.wantInMsg) {
				t.Fatalf("got %v %s %q; want %v %s containing %q", d.Outcome, d.Reason, d.Message, tc.wantOutcome, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

func TestDesiredBundle(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	renewed := renewSameKey(t, p.oldAnchor)
	cases := map[string]struct {
		state *State
		want  string
	}{
		"a rotation trusts the new and the previous anchor": {
			state: rotatingState(p), want: RenderBundle(p.newAnchor.cert, p.oldAnchor.cert),
		},
		"a superseded rotation keeps its anchor between the newest and the previous one": {
			state: rotatingState(p, anchor(third), inFlight(p.newAnchor)), want: RenderBundle(third.cert, p.newAnchor.cert, p.oldAnchor.cert),
		},
		"a retired previous anchor leaves the current one alone, in-flight ones included": {
			state: rotatingState(p, previous(p.newAnchor), inFlight(third)), want: RenderBundle(p.newAnchor.cert),
		},
		"an anchor renewed with the same key replaces the old certificate in place": {
			state: rotatingState(p, anchor(renewed), previous(p.oldAnchor)), want: RenderBundle(renewed.cert),
		},
		"an unusable anchor renders nothing": {
			state: rotatingState(p, anchor(nil)), want: "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.state.DesiredBundle(); got != tc.want {
				t.Fatalf("bundle has %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
}

// advanceOnce runs the workflow once from st's checkpoint over s, as the operator does: the
// state holds what the status says of the rotation, and a checkpoint the engine saves goes
// into st (SaveCheckpoint). It returns the result and the checkpoints saved.
func advanceOnce(t *testing.T, st *v1alpha1.TrustAnchorRotationStatus, s *State, now time.Time) (workflow.Result, []workflow.Checkpoint) {
	t.Helper()
	s.Retiring, s.Rotation = RetiringTo(rotationSteps, st.Checkpoint), "" // as the controller's snapshot sets them
	if st.Checkpoint != nil {
		s.Rotation = st.Checkpoint.Rotation
	}
	wf, err := NewWorkflow(Rotation(newConvergingWriter(s)))
	if err != nil {
		t.Fatal(err)
	}
	var saved []workflow.Checkpoint
	save := func(_ context.Context, next workflow.Checkpoint) error {
		saved = append(saved, next)
		SaveCheckpoint(rotationSteps, st, next, s, now)
		return nil
	}
	res, err := wf.Advance(context.Background(), WorkflowCheckpoint(st.Checkpoint), s, save, func() string { return "t1" })
	if err != nil {
		t.Fatal(err)
	}
	return res, saved
}

// TestSupersedeAtRemoval: the anchor renewed again while pods move onto the reduced bundle. The
// desired bundle is then the next round's, which only that round writes; the soak found
// remove-old-trust-roots waiting for it forever. The workflow jumps to the next round.
func TestSupersedeAtRemoval(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	retired := Fingerprint(p.newAnchor.cert)
	for name, tc := range map[string]struct {
		state       *State
		wantRestart bool
	}{
		"renewed again":            {state: rotatingState(p, anchor(third), previous(p.newAnchor), bundleOf(p.newAnchor)), wantRestart: true},
		"not renewed: waits on":    {state: rotatingState(p, previous(p.newAnchor), bundleOf(p.newAnchor))},
		"the anchor Secret is bad": {state: rotatingState(p, anchor(nil), previous(p.newAnchor), bundleOf(p.newAnchor))},
	} {
		t.Run(name, func(t *testing.T) {
			st := v1alpha1.TrustAnchorRotationStatus{Checkpoint: &v1alpha1.Checkpoint{Step: StepRemoveOldTrustRoots, Token: "t", Rotation: retired}}
			res, saved := advanceOnce(t, &st, tc.state, now)
			if restarted := res.Jumped != nil; restarted != tc.wantRestart {
				t.Fatalf("jumped %v (%v), want a jump %v", res.Jumped, res.Decision, tc.wantRestart)
			}
			if !tc.wantRestart {
				// The step observes as it would: it waits, or passes on to the idle steps.
				if len(saved) != 0 || res.Decision.Outcome == workflow.Jump {
					t.Errorf("saved %v, decided %v: the checkpoint jumped", saved, res.Decision)
				}
				return
			}
			if j := res.Jumped; j.From != StepRemoveOldTrustRoots || j.To != StepDetectAnchorRotation || j.Reason != ReasonRotationSuperseded {
				t.Errorf("jump %v, want %s -> %s (%s)", j, StepRemoveOldTrustRoots, StepDetectAnchorRotation, ReasonRotationSuperseded)
			}
			if len(saved) != 1 || st.Checkpoint.Step != StepDetectAnchorRotation || st.Checkpoint.Token != "" || st.Checkpoint.Rotation != "" || st.Checkpoint.StartTime != nil {
				t.Errorf("saved %d checkpoints, the last %+v; want one fresh at %s", len(saved), st.Checkpoint, StepDetectAnchorRotation)
			}
			if !strings.Contains(res.Jumped.Message, "renewed again") || len(st.InFlightAnchors) != 0 {
				t.Errorf("message %q, in flight %d", res.Jumped.Message, len(st.InFlightAnchors))
			}
			// The next round takes it from there: detect sees the renewal.
			if res, _ := advanceOnce(t, &st, tc.state, now); res.Jumped != nil || !slices.Contains(res.Passed, StepDetectAnchorRotation) {
				t.Errorf("after the jump: jumped %v, passed %v; want detect-anchor-rotation passed", res.Jumped, res.Passed)
			}
		})
	}
}

func TestSupersede(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(step, rotation string, inFlight ...string) v1alpha1.TrustAnchorRotationStatus {
		return v1alpha1.TrustAnchorRotationStatus{InFlightAnchors: inFlight,
			Checkpoint: &v1alpha1.Checkpoint{Step: step, Token: "t", Acts: 1, Rotation: rotation}}
	}
	newFP := Fingerprint(p.newAnchor.cert)
	cases := map[string]struct {
		status       v1alpha1.TrustAnchorRotationStatus
		state        *State
		wantRestart  bool
		wantInFlight int
		// wantBundle is the desired bundle when the rotation goes on.
		wantBundle []*testCA
	}{
		"a rotation towards the current anchor goes on": {
			status: at(StepPropagateTrustRoots, newFP), state: rotatingState(p),
		},
		"a synced checkpoint has no rotation to supersede": {
			status: at(StepDetectAnchorRotation, ""), state: rotatingState(p, anchor(third)),
		},
		"a third anchor restarts the rotation and keeps the in-flight one the bundle trusts": {
			status: at(StepRenewWorkloadCertificates, newFP), state: rotatingState(p, anchor(third)),
			wantRestart: true, wantInFlight: 1,
		},
		"an in-flight anchor the bundle never held is not kept": {
			status: at(StepExpandTrustBundle, newFP), state: rotatingState(p, anchor(third), bundleOf(p.oldAnchor)),
			wantRestart: true,
		},
		"a third anchor after the previous one was retired: the round finishes on the retired anchor alone": {
			status: at(StepReduceTrustBundle, newFP), state: rotatingState(p, anchor(third), previous(p.newAnchor)),
			wantBundle: []*testCA{p.newAnchor},
		},
		"a third anchor right after retire acted: the round finishes on the retired anchor alone": {
			status: at(StepRetirePreviousAnchor, newFP), state: rotatingState(p, anchor(third), previous(p.newAnchor)),
			wantBundle: []*testCA{p.newAnchor},
		},
		"a third anchor once reduced: the control plane restarts onto the retired anchor alone": {
			status: at(StepRefreshControlPlaneReduced, newFP), state: rotatingState(p, anchor(third), previous(p.newAnchor), bundleOf(p.newAnchor)),
			wantBundle: []*testCA{p.newAnchor},
		},
		"an anchor already kept is not kept twice": {
			status: at(StepPropagateTrustRoots, newFP, string(EncodePEM(p.newAnchor.cert))),
			state:  rotatingState(p, anchor(third), inFlight(p.newAnchor)), wantRestart: true, wantInFlight: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := *tc.status.DeepCopy()
			res, saved := advanceOnce(t, &st, tc.state, now)
			restarted := res.Jumped != nil
			if restarted != tc.wantRestart || len(st.InFlightAnchors) != tc.wantInFlight {
				t.Fatalf("jumped %v with %d in flight (%v); want a jump %v with %d", res.Jumped, len(st.InFlightAnchors), res.Decision, tc.wantRestart, tc.wantInFlight)
			}
			if !restarted {
				for _, cp := range saved {
					if cp.Jump != nil {
						t.Errorf("saved a jump %v", cp.Jump)
					}
				}
				if tc.wantBundle != nil {
					var certs []*x509.Certificate
					for _, c := range tc.wantBundle {
						certs = append(certs, c.cert)
					}
					if got := tc.state.DesiredBundle(); got != RenderBundle(certs...) {
						t.Errorf("desired bundle %s, want %s", fingerprintsOf(got), fingerprints(certs))
					}
				}
				return
			}
			// One save, the jump's, with the in-flight anchor: nothing acted before it.
			if len(saved) != 1 || saved[0].Jump == nil || len(res.Passed) != 0 || res.Acted {
				t.Fatalf("saved %+v, passed %v, acted %v; want the jump's checkpoint alone", saved, res.Passed, res.Acted)
			}
			if st.Checkpoint.Step != StepExpandTrustBundle || st.Checkpoint.Token != "" || st.Checkpoint.Rotation != Fingerprint(third.cert) || !st.Checkpoint.StartTime.Time.Equal(now) {
				t.Errorf("checkpoint = %+v, want a new rotation at %s", st.Checkpoint, StepExpandTrustBundle)
			}
			if !strings.Contains(res.Jumped.Message, "renewed again") || res.Jumped.Reason != ReasonRotationSuperseded || res.Jumped.From != tc.status.Checkpoint.Step {
				t.Errorf("jump %v", res.Jumped)
			}
			if kept, err := ParseInFlight(st.InFlightAnchors); err != nil || len(kept) > 0 && Fingerprint(kept[0]) != newFP {
				t.Errorf("in flight = %v, %v", kept, err)
			}
			// The next pass, over the state the saved status gives, expands the bundle towards
			// the third anchor, keeping the in-flight one.
			if err := tc.state.FromStatus(rotationSteps, &st); err != nil {
				t.Fatal(err)
			}
			want := RenderBundle(third.cert, p.oldAnchor.cert)
			if tc.wantInFlight > 0 {
				want = RenderBundle(third.cert, p.newAnchor.cert, p.oldAnchor.cert)
			}
			if res, _ := advanceOnce(t, &st, tc.state, now); res.Jumped != nil || !res.Acted || res.Checkpoint.Step != StepExpandTrustBundle || tc.state.Bundle.Data != want {
				t.Errorf("after the jump: jumped %v, acted %v at %s, bundle %s; want %s written", res.Jumped, res.Acted, res.Checkpoint.Step,
					fingerprintsOf(tc.state.Bundle.Data), fingerprintsOf(want))
			}
		})
	}
}

// Superseded while restart-identity holds identity at 0 (a scale token): the workflow waits for
// its pods to go, then scales it back as the step's own act, under its checkpoint, and only then
// jumps.
func TestSupersedeScalesIdentityBackFirst(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	token := NewActStamp(now.Add(-time.Minute)) + " scale 3"
	st := v1alpha1.TrustAnchorRotationStatus{Checkpoint: &v1alpha1.Checkpoint{Step: StepRestartIdentity, Token: token, Acts: 1, Rotation: Fingerprint(p.newAnchor.cert)}}
	s := rotatingState(p, anchor(third), issuer(p.newIssuer))
	identity := s.ControlPlane["linkerd-identity"]
	identity.Replicas, identity.Members = 0, []ControlPlanePod{{Name: "linkerd-identity-old", Terminating: true}}
	s.ControlPlane["linkerd-identity"] = identity

	res, saved := advanceOnce(t, &st, s, now)
	if res.Jumped != nil || res.Acted || len(saved) != 0 || res.Decision.Outcome != workflow.Wait || !strings.Contains(res.Decision.Message, "renewed again") {
		t.Fatalf("with an identity pod left: jumped %v acted %v saved %d decision %v; want a wait naming the renewal", res.Jumped, res.Acted, len(saved), res.Decision)
	}

	identity.Members = nil
	s.ControlPlane["linkerd-identity"] = identity
	w := newConvergingWriter(s)
	wf, err := NewWorkflow(Rotation(w))
	if err != nil {
		t.Fatal(err)
	}
	s.Rotation = st.Checkpoint.Rotation
	var cps []workflow.Checkpoint
	res, err = wf.Advance(context.Background(), WorkflowCheckpoint(st.Checkpoint), s, func(_ context.Context, next workflow.Checkpoint) error {
		cps = append(cps, next)
		SaveCheckpoint(rotationSteps, &st, next, s, now)
		return nil
	}, func() string { return "unused" })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acted || res.Jumped != nil || len(cps) != 1 || cps[0].Step != StepRestartIdentity || cps[0].Token != token+" up" || cps[0].Acts != 2 {
		t.Fatalf("acted %v jumped %v, checkpoints %+v; want restart-identity's act 2 under %q", res.Acted, res.Jumped, cps, token+" up")
	}
	if !slices.Equal(w.scales, []string{"linkerd-identity=3"}) {
		t.Errorf("scales %v, want identity back to 3", w.scales)
	}

	identity.Replicas = 3
	s.ControlPlane["linkerd-identity"] = identity
	res, saved = advanceOnce(t, &st, s, now)
	if res.Jumped == nil || res.Jumped.To != StepExpandTrustBundle || len(saved) != 1 || st.Checkpoint.Token != "" {
		t.Errorf("identity back: jumped %v, saved %d, checkpoint %+v; want the jump to %s", res.Jumped, len(saved), st.Checkpoint, StepExpandTrustBundle)
	}
}

func TestRecreatePrevious(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	cases := map[string]struct {
		state *State
		step  string // of the checkpoint
		want  *testCA
	}{
		"deleted mid-rotation: the other anchor of the bundle": {
			state: rotatingState(p, previous(nil)), want: p.oldAnchor,
		},
		"deleted before expansion: the anchor the bundle trusts": {
			state: rotatingState(p, previous(nil), bundleOf(p.oldAnchor)), want: p.oldAnchor,
		},
		"deleted once synced: the current anchor": {
			state: rotatingState(p, previous(nil), bundleOf(p.newAnchor)), want: p.newAnchor,
		},
		"in-flight anchors are not candidates": {
			state: rotatingState(p, anchor(third), previous(nil), inFlight(p.newAnchor), bundleOf(third, p.newAnchor, p.oldAnchor)), want: p.oldAnchor,
		},
		"an ambiguous bundle is left to bootstrap's message": {
			state: rotatingState(p, previous(nil), bundleOf(p.newAnchor, p.oldAnchor, p.stranger)),
		},
		"present: nothing to do": {
			state: rotatingState(p),
		},
		"no bundle: bootstrap creates both": {
			state: rotatingState(p, previous(nil), noBundle()),
		},
		"no bundle mid-rotation: nothing says which anchor was the previous one": {
			state: rotatingState(p, previous(nil), noBundle(), issuer(p.newIssuer)), step: StepRenewWorkloadCertificates,
		},
		"no bundle once synced: the current anchor, which signs the issuer": {
			state: rotatingState(p, previous(nil), noBundle(), issuer(p.newIssuer)), step: StepDetectAnchorRotation, want: p.newAnchor,
		},
		"no bundle once synced, but the issuer is on another anchor: nothing": {
			state: rotatingState(p, previous(nil), noBundle()), step: StepDetectAnchorRotation,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := RecreatePrevious(tc.state, tc.step)
			if ok != (tc.want != nil) || ok && Fingerprint(got) != Fingerprint(tc.want.cert) {
				t.Fatalf("got %v %v, want %v", got != nil, ok, tc.want != nil)
			}
		})
	}
}

func TestProjectKeepsInFlightAnchorsUntilRetired(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	now := time.Now()
	kept := []string{string(EncodePEM(p.newAnchor.cert))}
	prev := v1alpha1.TrustAnchorRotationStatus{InFlightAnchors: kept, Checkpoint: &v1alpha1.Checkpoint{Step: StepRetirePreviousAnchor, Rotation: Fingerprint(third.cert), StartTime: &metav1.Time{Time: now}}}
	res := func(step string) workflow.Result {
		return workflow.Result{Checkpoint: workflow.Checkpoint{Step: step}, Decision: workflow.Waiting("R", "")}
	}
	st := Project(rotationSteps, prev, v1alpha1.TrustAnchorRotationSpec{}, 1, rotatingState(p, anchor(third)), res(StepRetirePreviousAnchor), now)
	if len(st.InFlightAnchors) != 1 {
		t.Fatalf("in-flight anchors dropped before retirement")
	}
	st = Project(rotationSteps, prev, v1alpha1.TrustAnchorRotationSpec{}, 1, rotatingState(p, anchor(third), previous(nil)), res(StepRetirePreviousAnchor), now)
	if len(st.InFlightAnchors) != 1 {
		t.Fatalf("in-flight anchors dropped while the previous anchor is missing")
	}
	st = Project(rotationSteps, prev, v1alpha1.TrustAnchorRotationSpec{}, 1, rotatingState(p, anchor(third), previous(third)), res(StepReduceTrustBundle), now)
	if len(st.InFlightAnchors) != 0 {
		t.Fatalf("in-flight anchors kept after retirement")
	}
}

// TestAnchorRenewedAtReduction: cert-manager renews the anchor (third) after
// retire-previous-anchor wrote previous := the rotation's anchor and before the round finished.
// The round must finish on the bundle it was reducing to — the retired anchor alone — restart
// the control plane onto it, and only then start the next round, whose expanded bundle is the
// first to hold the third anchor. Each case starts at one checkpoint of that window and runs
// the workflow as the controller does (Supersede, Advance, Project) until the next round waits
// for the data plane.
func TestAnchorRenewedAtReduction(t *testing.T) {
	p := newPKI(t)
	third := anchorCA(t, "third-anchor")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	fp, thirdFP := Fingerprint(p.newAnchor.cert), Fingerprint(third.cert)
	reduced := "bundle [" + ShortFingerprint(fp) + "]"
	expanded := "bundle [" + ShortFingerprint(thirdFP) + ", " + ShortFingerprint(fp) + "]"
	onReduced := func(d string) string { return "restart " + d + " on [" + ShortFingerprint(fp) + "]" }
	restartsOnReduced := []string{onReduced("linkerd-identity"), onReduced("linkerd-destination"), onReduced("linkerd-proxy-injector")}
	// The next round: identity is left alone until the data plane trusts the third anchor.
	next := []string{expanded, "restart linkerd-destination on [" + ShortFingerprint(thirdFP) + ", " + ShortFingerprint(fp) + "]",
		"restart linkerd-proxy-injector on [" + ShortFingerprint(thirdFP) + ", " + ShortFingerprint(fp) + "]"}
	for name, tc := range map[string]struct {
		cp     v1alpha1.Checkpoint
		bundle []*testCA
		want   []string
	}{
		"retire acted, not yet observed": {
			cp: v1alpha1.Checkpoint{Step: StepRetirePreviousAnchor, Token: "t0", Acts: 1}, bundle: []*testCA{p.newAnchor, p.oldAnchor},
			want: append(append([]string{reduced}, restartsOnReduced...), next...),
		},
		"retire observed, reduce not run": {
			cp: v1alpha1.Checkpoint{Step: StepReduceTrustBundle}, bundle: []*testCA{p.newAnchor, p.oldAnchor},
			want: append(append([]string{reduced}, restartsOnReduced...), next...),
		},
		"reduce saved its checkpoint, did not write": {
			cp: v1alpha1.Checkpoint{Step: StepReduceTrustBundle, Token: "t0", Acts: 1}, bundle: []*testCA{p.newAnchor, p.oldAnchor},
			want: append(append([]string{reduced}, restartsOnReduced...), next...),
		},
		"reduced, control plane not restarted yet": {
			cp: v1alpha1.Checkpoint{Step: StepRefreshControlPlaneReduced}, bundle: []*testCA{p.newAnchor},
			want: append(restartsOnReduced, next...),
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := rotatingState(p, anchor(third), previous(p.newAnchor), issuer(p.newIssuer), bundleOf(tc.bundle...),
				bundlePods(0, 4), certPods(4, 4))
			w := newConvergingWriter(s)
			wf, err := NewWorkflow(Rotation(w))
			if err != nil {
				t.Fatal(err)
			}
			cp := tc.cp
			cp.Rotation = fp
			st := v1alpha1.TrustAnchorRotationStatus{Checkpoint: &cp}
			n := 0
			for range 30 {
				if err := s.FromStatus(rotationSteps, &st); err != nil {
					t.Fatal(err)
				}
				res, err := wf.Advance(context.Background(), WorkflowCheckpoint(st.Checkpoint), s,
					func(_ context.Context, next workflow.Checkpoint) error {
						SaveCheckpoint(rotationSteps, &st, next, s, now)
						return nil
					},
					func() string { n++; return time.Unix(int64(n), 0).String() })
				if err != nil {
					t.Fatal(err)
				}
				if res.Jumped != nil {
					continue
				}
				st = Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, now)
				if !res.Acted && res.Decision.Outcome == workflow.Wait && res.Checkpoint.Step == StepPropagateTrustRoots {
					break
				}
			}
			if got := strings.Join(w.log, "\n"); got != strings.Join(tc.want, "\n") {
				t.Errorf("writes:\n%s\nwant:\n%s", got, strings.Join(tc.want, "\n"))
			}
			if st.Checkpoint.Step != StepPropagateTrustRoots || st.Checkpoint.Rotation != thirdFP {
				t.Errorf("stopped at %s of the rotation to %.12s, want %s of the next round, to %.12s",
					st.Checkpoint.Step, st.Checkpoint.Rotation, StepPropagateTrustRoots, thirdFP)
			}
		})
	}
}

func fingerprintsOf(bundle string) string {
	certs, _ := ParseCertificates([]byte(bundle))
	return fingerprints(certs)
}
