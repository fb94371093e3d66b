package steps

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// pki is a rotation's worth of certificates: old and new anchors and an issuer under each.
type pki struct {
	oldAnchor, newAnchor, oldIssuer, newIssuer, stranger *testCA
}

func newPKI(t testing.TB) pki {
	p := pki{oldAnchor: anchorCA(t, "old-anchor"), newAnchor: anchorCA(t, "new-anchor"), stranger: anchorCA(t, "stranger")}
	p.oldIssuer = newCert(t, "old-issuer", p.oldAnchor, true, time.Now().Add(time.Hour))
	p.newIssuer = newCert(t, "new-issuer", p.newAnchor, true, time.Now().Add(time.Hour))
	return p
}

type stateOpt func(*State)

func src(ns, name string, c *testCA) Source {
	s := Source{Namespace: ns, Name: name, Found: c != nil}
	if c != nil {
		s.Cert = c.cert
	}
	return s
}

func anchor(c *testCA) stateOpt {
	return func(s *State) { s.Anchor = src("cert-manager", "linkerd-trust-anchor", c) }
}
func previous(c *testCA) stateOpt {
	return func(s *State) { s.Previous = src("linkerd", "linkerd-previous-anchor", c) }
}
func issuer(c *testCA) stateOpt {
	return func(s *State) { s.Issuer = src("linkerd", "linkerd-identity-issuer", c) }
}
func bundleOf(cs ...*testCA) stateOpt {
	return func(s *State) {
		var certs []*x509.Certificate
		for _, c := range cs {
			certs = append(certs, c.cert)
		}
		s.Bundle = Bundle{Found: true, Data: RenderBundle(certs...), Certs: certs}
	}
}
func noBundle() stateOpt { return func(s *State) { s.Bundle = Bundle{} } }
func deploy(name, restartedAt string, rolledOut bool) stateOpt {
	return func(s *State) {
		s.ControlPlane[name] = Deployment{Namespace: "linkerd", Name: name, Found: true, RestartedAt: restartedAt, RolledOut: rolledOut, Progress: "1 of 1 updated replicas are available"}
	}
}

// identityPods gives linkerd-identity alive pods started long before the rotation (rotatingState
// started it an hour ago), running of them running.
func identityPods(running int, names ...string) stateOpt {
	return func(s *State) {
		d := s.ControlPlane["linkerd-identity"]
		d.Pods, d.RunningPods, d.Replicas, d.Members = names, running, 1, nil
		for _, n := range names {
			d.Members = append(d.Members, ControlPlanePod{Name: n, Started: s.Now.Add(-2 * time.Hour)})
		}
		s.ControlPlane["linkerd-identity"] = d
	}
}

// identityPod adds an alive, running linkerd-identity pod that started at the given offset from
// now, from the template restart restartedAt ("" for none).
func identityPod(name string, started time.Duration, restartedAt string) stateOpt {
	return func(s *State) {
		d := s.ControlPlane["linkerd-identity"]
		d.Pods = append(d.Pods, name)
		d.RunningPods++
		d.Replicas = int32(len(d.Pods))
		d.Members = append(d.Members, ControlPlanePod{Name: name, Started: s.Now.Add(started), RestartedAt: restartedAt})
		s.ControlPlane["linkerd-identity"] = d
	}
}

func bundlePods(converged, target int, behind ...WorkloadCount) stateOpt {
	return func(s *State) {
		s.TrustBundle = Convergence{Converged: converged, Target: target, Behind: behind, BehindWorkloads: len(behind)}
	}
}
func certPods(converged, target int) stateOpt {
	return func(s *State) { s.Certificates = Convergence{Converged: converged, Target: target} }
}

// mid-rotation defaults: new anchor, old previous, old issuer, expanded bundle, everything rolled out.
func rotatingState(p pki, opts ...stateOpt) *State {
	now := time.Now()
	s := &State{Config: DefaultConfig(), Now: now, ControlPlane: map[string]Deployment{}, RotationStart: now.Add(-time.Hour)}
	for _, o := range []stateOpt{anchor(p.newAnchor), previous(p.oldAnchor), issuer(p.oldIssuer), bundleOf(p.newAnchor, p.oldAnchor),
		deploy("linkerd-identity", "", true), deploy("linkerd-destination", "", true), deploy("linkerd-proxy-injector", "", true)} {
		o(s)
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// rotationSteps is the rotation's steps, which the tests look the checkpoints' steps up in; a
// test that runs another list passes its own (see withStep).
var rotationSteps = Facts()

func stepNamed(t *testing.T, name string) Step {
	t.Helper()
	for _, st := range Rotation(nil) {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no step %q", name)
	return Step{}
}

func TestObserve(t *testing.T) {
	p := newPKI(t)
	t1 := NewActStamp(time.Now().Add(-time.Minute))
	expired := newCert(t, "expired", nil, true, time.Now().Add(-time.Minute))
	notCA := newCert(t, "leaf", nil, false, time.Now().Add(time.Hour))
	cases := map[string]struct {
		step        string
		state       *State
		token       string
		wantOutcome workflow.Outcome
		wantReason  string
		wantInMsg   string
	}{
		"bootstrap waits, naming the Secret, when the anchor Secret is missing": {
			step: StepBootstrap, state: rotatingState(p, anchor(nil)),
			wantOutcome: workflow.Wait, wantReason: "TrustAnchorUnavailable", wantInMsg: "cert-manager/linkerd-trust-anchor not found",
		},
		"bootstrap refuses an expired anchor": {
			step: StepBootstrap, state: rotatingState(p, anchor(expired)),
			wantOutcome: workflow.Wait, wantReason: "TrustAnchorInvalid", wantInMsg: "expired",
		},
		"bootstrap refuses an anchor that is not a CA": {
			step: StepBootstrap, state: rotatingState(p, anchor(notCA)),
			wantOutcome: workflow.Wait, wantReason: "TrustAnchorInvalid", wantInMsg: "not a CA",
		},
		"bootstrap creates a missing previous anchor": {
			step: StepBootstrap, state: rotatingState(p, previous(nil)),
			wantOutcome: workflow.Act, wantReason: "PreviousAnchorMissing",
		},
		"bootstrap waits when the previous anchor cannot be chosen from the bundle": {
			step: StepBootstrap, state: rotatingState(p, previous(nil), bundleOf(p.newAnchor, p.oldAnchor, p.stranger)),
			wantOutcome: workflow.Wait, wantReason: "AmbiguousTrustBundle", wantInMsg: "2 anchors besides the current one",
		},
		"bootstrap creates a missing trust bundle": {
			step: StepBootstrap, state: rotatingState(p, noBundle()),
			wantOutcome: workflow.Act, wantReason: "TrustRootsMissing",
		},
		"bootstrap is done when both exist": {
			step: StepBootstrap, state: rotatingState(p), wantOutcome: workflow.Done,
		},
		"detect waits quietly while the anchor is unchanged": {
			step: StepDetectAnchorRotation, state: rotatingState(p, previous(p.newAnchor), bundleOf(p.newAnchor)),
			wantOutcome: workflow.Wait, wantReason: "TrustAnchorUnchanged",
		},
		"detect restores a trust bundle edited by hand": {
			step: StepDetectAnchorRotation, state: rotatingState(p, previous(p.newAnchor), bundleOf(p.stranger)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleDrifted",
		},
		"detect starts a rotation when the anchor differs from the previous one": {
			step: StepDetectAnchorRotation, state: rotatingState(p, bundleOf(p.oldAnchor)),
			wantOutcome: workflow.Done, wantReason: "TrustAnchorRenewed",
		},
		"expand writes the bundle when it lacks the new anchor": {
			step: StepExpandTrustBundle, state: rotatingState(p, bundleOf(p.oldAnchor)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleOutdated",
		},
		"expand is done when the bundle holds both anchors": {
			step: StepExpandTrustBundle, state: rotatingState(p), wantOutcome: workflow.Done,
		},
		"a control-plane restart acts when it has no token yet": {
			step: StepRefreshControlPlane, state: rotatingState(p),
			wantOutcome: workflow.Act, wantReason: "RestartNeeded", wantInMsg: "linkerd-destination, linkerd-proxy-injector",
		},
		"a control-plane restart acts again, with its token, when the patch did not land": {
			step: StepRefreshControlPlane, token: "t1", state: rotatingState(p, deploy("linkerd-destination", "t1", false)),
			wantOutcome: workflow.Act, wantReason: "RestartNeeded", wantInMsg: "linkerd-proxy-injector",
		},
		"a control-plane restart waits for the rollout": {
			step: StepRefreshControlPlane, token: "t1", state: rotatingState(p, deploy("linkerd-destination", "t1", false), deploy("linkerd-proxy-injector", "t1", true)),
			wantOutcome: workflow.Wait, wantReason: "ControlPlaneRollingOut", wantInMsg: "linkerd/linkerd-destination",
		},
		"a control-plane restart is done when restarted with its token and rolled out": {
			step: StepRefreshControlPlane, token: "t1", state: rotatingState(p, deploy("linkerd-destination", "t1", true), deploy("linkerd-proxy-injector", "t1", true)),
			wantOutcome: workflow.Done,
		},
		"an older restart does not count for this pass": {
			step: StepRestartIdentityOnNewIssuer, token: "t2", state: rotatingState(p, issuer(p.newIssuer), deploy("linkerd-identity", "t1", true)),
			wantOutcome: workflow.Act, wantReason: "RestartNeeded",
		},
		"a missing control-plane Deployment is named": {
			step: StepRefreshControlPlane, state: func() *State { s := rotatingState(p); delete(s.ControlPlane, "linkerd-destination"); return s }(),
			wantOutcome: workflow.Wait, wantReason: "ControlPlaneMissing", wantInMsg: "linkerd/linkerd-destination not found",
		},
		"restart-identity rolls identity while the issuer is still on the old anchor": {
			step: StepRestartIdentity, state: rotatingState(p, identityPods(1, "id-a")), wantOutcome: workflow.Act, wantReason: "RestartNeeded",
		},
		"restart-identity scales identity to 0 when the issuer is already on the new anchor": {
			step: StepRestartIdentity, state: rotatingState(p, issuer(p.newIssuer), identityPods(2, "id-a", "id-b")),
			wantOutcome: workflow.Act, wantReason: "ScalingIdentityDown", wantInMsg: "(id-a, id-b)",
		},
		"restart-identity scales identity to 0 under its scale token until the scale-down is seen": {
			step: StepRestartIdentity, token: "t1 scale 3", state: rotatingState(p, issuer(p.newIssuer), identityPods(3, "id-a", "id-b", "id-c")),
			wantOutcome: workflow.Act, wantReason: "ScalingIdentityDown", wantInMsg: "back to 3 replica(s)",
		},
		"restart-identity waits for every identity pod to go, terminating ones included, before scaling back": {
			step: StepRestartIdentity, token: "t1 scale 3", state: rotatingState(p, issuer(p.newIssuer), scaledIdentity(0, terminatingIdentityPod("id-a"))),
			wantOutcome: workflow.Wait, wantReason: "IdentityScalingDown", wantInMsg: "back to 3 replica(s): id-a",
		},
		"restart-identity scales identity back to the recorded replicas once none of its pods is left": {
			step: StepRestartIdentity, token: "t1 scale 3", state: rotatingState(p, issuer(p.newIssuer), scaledIdentity(0)),
			wantOutcome: workflow.Act, wantReason: "ScalingIdentityUp", wantInMsg: "back to 3 replica(s)",
		},
		"restart-identity scales back up again when the scale-up did not land": {
			step: StepRestartIdentity, token: "t1 scale 3 up", state: rotatingState(p, issuer(p.newIssuer), scaledIdentity(0)),
			wantOutcome: workflow.Act, wantReason: "ScalingIdentityUp", wantInMsg: "back to 3 replica(s)",
		},
		"restart-identity never scales down again once it scaled back up": {
			step: StepRestartIdentity, token: "t1 scale 3 up", state: rotatingState(p, issuer(p.newIssuer), deploy("linkerd-identity", "", false),
				identityPods(0, "id-a", "id-b", "id-c"), scaledIdentity(3)),
			wantOutcome: workflow.Wait, wantReason: "ControlPlaneRollingOut", wantInMsg: "scaled back to 3 replica(s)",
		},
		"restart-identity holding identity at 0 says so while the data plane regressed": {
			step: StepRestartIdentity, token: "t1 scale 3", state: rotatingState(p, issuer(p.newIssuer), scaledIdentity(0), bundlePods(4, 5)),
			wantOutcome: workflow.Wait, wantReason: "TrustBundleRegressed", wantInMsg: "linkerd/linkerd-identity stays scaled to 0 until then (back to 3 replica(s) after)",
		},
		"restart-identity is done once identity is scaled back and rolled out": {
			step: StepRestartIdentity, token: "t1 scale 3 up", state: rotatingState(p, issuer(p.newIssuer), identityPods(3, "id-x", "id-y", "id-z"), scaledIdentity(3)),
			wantOutcome: workflow.Done, wantReason: "ControlPlaneRestarted",
		},
		"restart-identity waits for its rolling restart while the issuer is on the old anchor": {
			step: StepRestartIdentity, token: t1, state: rotatingState(p, deploy("linkerd-identity", t1, false),
				identityPod("id-old", -2*time.Hour, ""), identityPod("id-new", 0, t1)),
			wantOutcome: workflow.Wait, wantReason: "ControlPlaneRollingOut",
		},
		"restart-identity scales identity to 0 when the issuer is renewed during its rolling restart": {
			step: StepRestartIdentity, token: t1, state: rotatingState(p, issuer(p.newIssuer), deploy("linkerd-identity", t1, false),
				identityPod("id-old", -2*time.Hour, ""), identityPod("id-new", 0, t1)),
			wantOutcome: workflow.Act, wantReason: "ScalingIdentityDown", wantInMsg: "(id-old)",
		},
		"restart-identity waits for the replaced pods to terminate": {
			step: StepRestartIdentity, token: t1, state: rotatingState(p, issuer(p.newIssuer), identityPod("id-new", 0, ""),
				func(s *State) {
					d := s.ControlPlane["linkerd-identity"]
					d.Members = append(d.Members, ControlPlanePod{Name: "id-old", Started: s.Now.Add(-2 * time.Hour), Terminating: true})
					s.ControlPlane["linkerd-identity"] = d
				}),
			wantOutcome: workflow.Wait, wantReason: "ControlPlaneRollingOut", wantInMsg: "id-old",
		},
		"restart-identity has nothing to restart when every identity pod started after the expansion": {
			step: StepRestartIdentity, state: rotatingState(p, identityPod("id-a", -30*time.Minute, "")),
			wantOutcome: workflow.Done, wantReason: "IdentityOnExpandedRoots",
		},
		"restart-identity deletes the identity pods named in its token that are still there": {
			step: StepRestartIdentity, token: "t1 replace id-a,id-b", state: rotatingState(p, issuer(p.newIssuer), identityPods(1, "id-b", "id-c")),
			wantOutcome: workflow.Act, wantReason: "ReplacingIdentityPods", wantInMsg: "(id-b)",
		},
		"restart-identity waits for the replacements to run": {
			step: StepRestartIdentity, token: "t1 replace id-a", state: rotatingState(p, issuer(p.newIssuer), identityPods(0, "id-c")),
			wantOutcome: workflow.Wait, wantReason: "ControlPlaneRollingOut",
		},
		"restart-identity is done once every named pod was replaced": {
			step: StepRestartIdentity, token: "t1 replace id-a", state: rotatingState(p, issuer(p.newIssuer), identityPods(1, "id-c")),
			wantOutcome: workflow.Done,
		},
		"propagation waits, naming the workloads to restart": {
			step: StepPropagateTrustRoots, state: rotatingState(p, bundlePods(10, 12, WorkloadCount{"emojivoto/Deployment/web", 2})),
			wantOutcome: workflow.Wait, wantReason: "TrustBundleConverging", wantInMsg: "Waiting for 2 pod(s) to converge on the expanded trust bundle; restart: emojivoto/Deployment/web (2 pods)",
		},
		"propagation is done when every pod has the bundle": {
			step: StepPropagateTrustRoots, state: rotatingState(p, bundlePods(12, 12)), wantOutcome: workflow.Done,
		},
		"the issuer step waits for cmctl renew": {
			step: StepWaitForIdentityIssuer, state: rotatingState(p),
			wantOutcome: workflow.Wait, wantReason: "WaitingForIssuerRenewal", wantInMsg: "cmctl renew -n linkerd linkerd-identity-issuer",
		},
		"the issuer step reports an issuer from neither anchor": {
			step: StepWaitForIdentityIssuer, state: rotatingState(p, issuer(newCert(t, "rogue", p.stranger, true, time.Now().Add(time.Hour)))),
			wantOutcome: workflow.Wait, wantReason: "IssuerUnrelated",
		},
		"the issuer step is done once the issuer is signed by the new anchor": {
			step: StepWaitForIdentityIssuer, state: rotatingState(p, issuer(p.newIssuer)), wantOutcome: workflow.Done,
		},
		"certificate renewal waits for pods on the old issuer": {
			step: StepRenewWorkloadCertificates, state: rotatingState(p, issuer(p.newIssuer), certPods(3, 5)),
			wantOutcome: workflow.Wait, wantReason: "WorkloadCertificatesRenewing", wantInMsg: "Waiting for 2 pod(s)",
		},
		"certificate renewal stops if the issuer left the current anchor": {
			step: StepRenewWorkloadCertificates, state: rotatingState(p, certPods(5, 5)),
			wantOutcome: workflow.Wait, wantReason: "IssuerNotOnCurrentAnchor",
		},
		"certificate renewal is done when every pod presents a new certificate": {
			step: StepRenewWorkloadCertificates, state: rotatingState(p, issuer(p.newIssuer), certPods(5, 5)), wantOutcome: workflow.Done,
		},
		"retiring copies the current anchor into the previous-anchor Secret": {
			step: StepRetirePreviousAnchor, state: rotatingState(p, issuer(p.newIssuer)),
			wantOutcome: workflow.Act, wantReason: "PreviousAnchorOutdated",
		},
		"retiring is done when the previous anchor is the current one": {
			step: StepRetirePreviousAnchor, state: rotatingState(p, previous(p.newAnchor)), wantOutcome: workflow.Done,
		},
		"reduction writes the bundle with the new anchor alone": {
			step: StepReduceTrustBundle, state: rotatingState(p, previous(p.newAnchor), issuer(p.newIssuer)),
			wantOutcome: workflow.Act, wantReason: "TrustBundleOutdated",
		},
		"removal waits for the final data-plane restart": {
			step: StepRemoveOldTrustRoots, state: rotatingState(p, previous(p.newAnchor), bundleOf(p.newAnchor), bundlePods(0, 3, WorkloadCount{"a/Deployment/x", 3})),
			wantOutcome: workflow.Wait, wantInMsg: "reduced trust bundle; restart: a/Deployment/x (3 pods)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := stepNamed(t, tc.step).Observe(tc.state, tc.token)
			if d.Outcome != tc.wantOutcome || (tc.wantReason != "" && d.Reason != tc.wantReason) || !strings.Contains(d.Message, tc.wantInMsg) {
				t.Fatalf("got %v %s %q; want %v %s containing %q", d.Outcome, d.Reason, d.Message, tc.wantOutcome, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

var errCrash = errors.New("crashed")

// driveRotation runs the whole rotation workflow over s with a convergingWriter: each advance is one
// Advance from cp (which it moves), with saves that succeed and tokens a second apart.
func driveRotation(t *testing.T, s *State) (*convergingWriter, *workflow.Checkpoint, func() workflow.Result) {
	w := newConvergingWriter(s)
	wf, err := NewWorkflow(Rotation(w))
	if err != nil {
		t.Fatal(err)
	}
	cp := &workflow.Checkpoint{}
	n := 0
	return w, cp, func() workflow.Result {
		t.Helper()
		res, err := wf.Advance(context.Background(), *cp, s, func(context.Context, workflow.Checkpoint) error { return nil },
			func() string { n++; return time.Unix(int64(n), 0).String() })
		if err != nil {
			t.Fatal(err)
		}
		*cp = res.Checkpoint
		return res
	}
}

// TestRotationOrder drives the whole workflow over a simulated cluster in which pods converge
// as soon as asked, and checks the phases and restarts it goes through.
func TestRotationOrder(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, anchor(p.oldAnchor), previous(nil), noBundle(), bundlePods(4, 4), certPods(4, 4))
	w, _, advance := driveRotation(t, s)
	until := func(step string) workflow.Result {
		t.Helper()
		for range 20 {
			if res := advance(); !res.Acted {
				if res.Checkpoint.Step != step {
					t.Fatalf("stopped at %s (%s), want %s", res.Checkpoint.Step, res.Decision.Message, step)
				}
				return res
			}
		}
		t.Fatalf("no progress towards %s", step)
		return workflow.Result{}
	}

	until(StepDetectAnchorRotation)
	if !s.Previous.Usable() || s.Bundle.Data != RenderBundle(p.oldAnchor.cert) {
		t.Fatal("bootstrap did not create the previous anchor and the bundle")
	}
	// cert-manager renews the anchor: the pods have not seen the expanded bundle.
	s.Anchor = src("cert-manager", "linkerd-trust-anchor", p.newAnchor)
	s.TrustBundle = Convergence{Converged: 0, Target: 4}
	if res := until(StepPropagateTrustRoots); res.Phase != "PropagatingTrustRoots" {
		t.Fatalf("phase %s", res.Phase)
	}
	if w.restarts["linkerd-identity"] != 0 || w.restarts["linkerd-destination"] != 1 {
		t.Fatalf("restarts before the data plane converged: %v (identity must not restart yet)", w.restarts)
	}
	s.TrustBundle = Convergence{Converged: 4, Target: 4}
	until(StepWaitForIdentityIssuer)
	if w.restarts["linkerd-identity"] != 1 || len(w.deleted) != 0 {
		t.Fatalf("identity was not rolled once the data plane converged: %v, deleted %v", w.restarts, w.deleted)
	}
	// cmctl renew the issuer; pods still hold old certificates.
	s.Issuer = src("linkerd", "linkerd-identity-issuer", p.newIssuer)
	s.Certificates = Convergence{Converged: 0, Target: 4}
	if res := until(StepRenewWorkloadCertificates); res.Phase != "RenewingWorkloadCerts" {
		t.Fatalf("phase %s", res.Phase)
	}
	if w.restarts["linkerd-identity"] != 2 || w.restarts["linkerd-destination"] != 2 {
		t.Fatalf("restarts after the issuer switch: %v", w.restarts)
	}
	s.Certificates = Convergence{Converged: 4, Target: 4} // (the reduced bundle is new to every pod: see Simulated)
	if res := until(StepRemoveOldTrustRoots); res.Phase != "RemovingOldTrustRoots" {
		t.Fatalf("phase %s", res.Phase)
	}
	if s.Bundle.Data != RenderBundle(p.newAnchor.cert) || Fingerprint(s.Previous.Cert) != Fingerprint(p.newAnchor.cert) {
		t.Fatal("the bundle was not reduced to the new anchor")
	}
	s.TrustBundle = Convergence{Converged: 4, Target: 4}
	res := until(StepDetectAnchorRotation)
	if !res.Completed || res.Phase != "Synced" {
		t.Fatalf("rotation did not complete: %+v", res)
	}
	want := map[string]int{"linkerd-identity": 3, "linkerd-destination": 3, "linkerd-proxy-injector": 3}
	for k, v := range want {
		if w.restarts[k] != v {
			t.Errorf("%s restarted %d times, want %d", k, w.restarts[k], v)
		}
	}
}
