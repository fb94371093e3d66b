package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// TestIdentityRestartedEarly: identity pods started after the expansion, while the data plane
// has not converged and the issuer is on the new anchor, are reported; in no other case.
func TestIdentityRestartedEarly(t *testing.T) {
	p := newPKI(t)
	behind := bundlePods(3, 5, WorkloadCount{"a/Deployment/x", 2})
	early := identityPod("linkerd-identity-new", -10*time.Minute, "") // the rotation started an hour ago
	cases := map[string]struct {
		step  string
		state *State
		want  string
	}{
		"restarted after the expansion, issuer on the new anchor, data plane behind": {
			StepPropagateTrustRoots, rotatingState(p, issuer(p.newIssuer), behind, identityPods(1, "linkerd-identity-old"), early),
			"linkerd/linkerd-identity-new",
		},
		"while the control plane is refreshed": {
			StepRefreshControlPlane, rotatingState(p, issuer(p.newIssuer), behind, early), "linkerd/linkerd-identity-new",
		},
		"the issuer still on the old anchor: identity keeps signing with it": {
			StepPropagateTrustRoots, rotatingState(p, behind, early), "",
		},
		"the data plane converged": {
			StepPropagateTrustRoots, rotatingState(p, issuer(p.newIssuer), bundlePods(5, 5), early), "",
		},
		"identity started before the expansion": {
			StepPropagateTrustRoots, rotatingState(p, issuer(p.newIssuer), behind, identityPods(1, "linkerd-identity-old")), "",
		},
		"identity started within the second of the expansion": {
			StepPropagateTrustRoots, rotatingState(p, issuer(p.newIssuer), behind, func(s *State) {
				s.RotationStart = s.Now.Add(-time.Hour).Truncate(time.Second)
				identityPod("linkerd-identity-new", -time.Hour, "")(s)
				d := s.ControlPlane["linkerd-identity"]
				d.Members[0].Started = s.RotationStart.Add(500 * time.Millisecond)
				s.ControlPlane["linkerd-identity"] = d
			}), "",
		},
		"restart-identity: the operator's own restart, once the data plane converged": {
			StepRestartIdentity, rotatingState(p, issuer(p.newIssuer), behind, early), "",
		},
		"when the rotation started is unknown": {
			StepPropagateTrustRoots, rotatingState(p, issuer(p.newIssuer), behind, early, func(s *State) { s.RotationStart = time.Time{} }), "",
		},
		"no rotation under way": {
			StepDetectAnchorRotation, rotatingState(p, previous(p.newAnchor), issuer(p.newIssuer), behind, early), "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := strings.Join(tc.state.IdentityRestartedEarly(rotationSteps, tc.step), ",")
			if got != tc.want {
				t.Fatalf("IdentityRestartedEarly(%s) = %q, want %q", tc.step, got, tc.want)
			}
		})
	}
}

func TestIdentityRestartedEarlyMessage(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, issuer(p.newIssuer), bundlePods(3, 5), identityPod("linkerd-identity-new", -time.Minute, ""))
	pods := s.IdentityRestartedEarly(rotationSteps, StepPropagateTrustRoots)
	msg := s.IdentityRestartedEarlyMessage(pods)
	for _, want := range []string{"identity pod(s) linkerd/linkerd-identity-new started after the trust bundle was expanded",
		"new-anchor certificates, which the 2 meshed pod(s) not yet on the expanded trust bundle do not trust", "restart the workloads not yet on the expanded bundle now"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	s.Spec.DataPlaneRestart.Policy = "Automatic"
	if msg := s.IdentityRestartedEarlyMessage(pods); !strings.Contains(msg, "restarts the workloads not yet on the expanded bundle first") {
		t.Errorf("automatic restarts: message %q does not say the operator restarts them first", msg)
	}
	if msg := s.IdentityRestartedEarlyMessage(nil); msg != "" {
		t.Errorf("no pod: message %q, want none", msg)
	}
}

// TestRestartIdentityDecidesAtEachAct: whether restart-identity rolls identity or scales it to 0
// and back follows the issuer at each act, not at the first: an issuer renewed during the
// rolling restart turns the rest of it into a scale-down, recorded in the token it had.
func TestRestartIdentityDecidesAtEachAct(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, identityPods(2, "id-a", "id-b"))
	s.ControlPlane["linkerd-identity"] = withReplicas(s.ControlPlane["linkerd-identity"], 2)
	w, _, cp, advance := restartIdentityDriver(t, s)

	// The issuer is on the old anchor: a rolling restart.
	if res := advance(); !res.Acted || w.restarts["linkerd-identity"] != 1 || len(w.scales) != 0 {
		t.Fatalf("issuer on the old anchor: %v, restarts %v, scales %v; want a rolling restart", res.Decision, w.restarts, w.scales)
	}
	stamp := cp.Token
	// One pod rolled, one old pod left; the issuer is renewed onto the new anchor meanwhile.
	d := s.ControlPlane["linkerd-identity"]
	d.RolledOut, d.Progress = false, "1 old replicas are pending termination"
	d.Pods = []string{"id-a", "id-c"}
	d.Members = []ControlPlanePod{{Name: "id-a", Started: s.Now.Add(-2 * time.Hour)}, {Name: "id-c", Started: s.Now.Add(time.Second), RestartedAt: stamp}}
	s.ControlPlane["linkerd-identity"] = d
	if res := advance(); res.Acted || res.Decision.Outcome != workflow.Wait {
		t.Fatalf("rolling, issuer still old: %v, want to wait for the rollout", res.Decision)
	}
	s.Issuer = src("linkerd", "linkerd-identity-issuer", p.newIssuer)
	if res := advance(); !res.Acted || res.Decision.Reason != "ScalingIdentityDown" {
		t.Fatalf("issuer renewed during the rolling restart: %v, want a scale-down", res.Decision)
	}
	if cp.Token != stamp+" scale 2" || strings.Join(w.scales, " ") != "linkerd-identity=0" || w.restarts["linkerd-identity"] != 1 {
		t.Fatalf("token %q, scales %v, restarts %v; want the replicas recorded in the rolling restart's token, then a scale to 0", cp.Token, w.scales, w.restarts)
	}
}

// TestRestartIdentityScalesToZeroAndBack drives restart-identity with the issuer already on the
// new anchor through the engine, killing the operator at every point (a save or an act
// rerun from the saved checkpoint): identity is scaled to 0, no pod is started while one is
// left, and it is scaled back to the replicas it had — once each, whatever the crash point.
func TestRestartIdentityScalesToZeroAndBack(t *testing.T) {
	for _, crash := range []string{"", "after-save-1", "after-act-1", "after-save-2", "after-act-2"} {
		t.Run("crash "+crash, func(t *testing.T) {
			p := newPKI(t)
			s := rotatingState(p, issuer(p.newIssuer), identityPods(3, "id-a", "id-b", "id-c"))
			s.ControlPlane["linkerd-identity"] = withReplicas(s.ControlPlane["linkerd-identity"], 3)
			w, wf, cp, _ := restartIdentityDriver(t, s)
			var saved workflow.Checkpoint
			saves := 0
			step := func() workflow.Result {
				t.Helper()
				save := func(_ context.Context, c workflow.Checkpoint) error {
					saved = c
					saves++
					if crash == fmt.Sprintf("after-save-%d", saves) {
						return errCrash
					}
					return nil
				}
				res, err := wf.Advance(context.Background(), *cp, s, save, func() string { return "T" })
				if errors.Is(err, errCrash) || err == nil && crash == fmt.Sprintf("after-act-%d", saves) && res.Acted {
					crash = "" // killed: a new operator resumes from the saved checkpoint
					*cp = saved
					return workflow.Result{Acted: true}
				}
				if err != nil {
					t.Fatal(err)
				}
				*cp = res.Checkpoint
				return res
			}
			var res workflow.Result
			for range 10 {
				res = step()
				d := s.ControlPlane["linkerd-identity"]
				if d.Replicas > 0 && len(d.Members) > 0 && d.Members[0].Terminating {
					t.Fatalf("identity scaled up while a pod it had is still terminating: %+v", d)
				}
				if !res.Acted && res.Decision.Reason == "IdentityScalingDown" {
					// The ReplicaSet deletes the last pods.
					d.Pods, d.Members = nil, nil
					s.ControlPlane["linkerd-identity"] = d
				}
				if res.Passed != nil {
					break
				}
			}
			if len(res.Passed) != 1 {
				t.Fatalf("not done: %v", res.Decision)
			}
			if got := strings.Join(w.scales, " "); got != "linkerd-identity=0 linkerd-identity=3" {
				t.Fatalf("scales %q, want one to 0 and one back to 3", got)
			}
			if saved.Token != "T scale 3 up" || w.restarts["linkerd-identity"] != 0 || len(w.deleted) != 0 {
				t.Fatalf("token %q, restarts %v, deleted %v; want the scale token, no restart, no deletion", saved.Token, w.restarts, w.deleted)
			}
		})
	}
}

func withReplicas(d Deployment, n int32) Deployment { d.Replicas = n; return d }

// scaledIdentity sets linkerd-identity's desired replicas and adds the given pods.
func scaledIdentity(replicas int32, pods ...ControlPlanePod) stateOpt {
	return func(s *State) {
		d := s.ControlPlane["linkerd-identity"]
		d.Replicas = replicas
		for _, p := range pods {
			d.Pods = append(d.Pods, p.Name)
			d.Members = append(d.Members, p)
		}
		s.ControlPlane["linkerd-identity"] = d
	}
}

func terminatingIdentityPod(name string) ControlPlanePod {
	return ControlPlanePod{Name: name, Started: time.Now().Add(-2 * time.Hour), Terminating: true}
}

// restartIdentityDriver runs restart-identity alone through the engine over s.
func restartIdentityDriver(t *testing.T, s *State) (*convergingWriter, *workflow.Workflow[*State], *workflow.Checkpoint, func() workflow.Result) {
	t.Helper()
	w := newConvergingWriter(s)
	var st Step
	for _, x := range Rotation(w) {
		if x.Name == StepRestartIdentity {
			st = x
		}
	}
	wf, err := NewWorkflow([]Step{st})
	if err != nil {
		t.Fatal(err)
	}
	cp := &workflow.Checkpoint{Step: StepRestartIdentity}
	return w, wf, cp, func() workflow.Result {
		t.Helper()
		res, err := wf.Advance(context.Background(), *cp, s, func(context.Context, workflow.Checkpoint) error { return nil },
			func() string { return NewActStamp(s.Now) })
		if err != nil {
			t.Fatal(err)
		}
		*cp = res.Checkpoint
		return res
	}
}

// TestRestartIdentityTokens: the token grammar round-trips, the replicas are recorded only before
// a scale-down, a legacy replace token is kept as it is, and a start-over keeps the replicas.
func TestRestartIdentityTokens(t *testing.T) {
	p := newPKI(t)
	old := rotatingState(p, issuer(p.newIssuer), identityPods(3, "id-a", "id-b", "id-c"), scaledIdentity(3))
	gone := rotatingState(p, issuer(p.newIssuer), scaledIdentity(0))
	leaving := rotatingState(p, issuer(p.newIssuer), scaledIdentity(0, terminatingIdentityPod("id-a")))
	rolling := rotatingState(p, identityPods(3, "id-a", "id-b", "id-c"), scaledIdentity(3))
	for _, tc := range []struct {
		name         string
		s            *State
		token, want  string
		replicas     int32
		up, scaleTok bool
	}{
		{"the replicas are recorded before the scale-down", old, "T", "T scale 3", 3, false, true},
		{"a scale token is kept while pods are left", leaving, "T scale 3", "T scale 3", 3, false, true},
		{"no pod left: the scale-up is recorded", gone, "T scale 3", "T scale 3 up", 3, true, true},
		{"a scale-up token is kept", gone, "T scale 3 up", "T scale 3 up", 3, true, true},
		{"a rolling restart keeps its stamp", rolling, "T", "T", 0, false, false},
		{"a legacy replace token is kept", old, "T replace id-a,id-b", "T replace id-a,id-b", 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := restartIdentityToken(tc.s, tc.token)
			if got != tc.want {
				t.Fatalf("token %q -> %q, want %q", tc.token, got, tc.want)
			}
			sc, ok := parseIdentityScale(got)
			if ok != tc.scaleTok || sc.replicas != tc.replicas || sc.up != tc.up {
				t.Fatalf("parse %q: %+v %v, want replicas %d up %v scale %v", got, sc, ok, tc.replicas, tc.up, tc.scaleTok)
			}
		})
	}
	if _, ok := podsToReplace("T scale 3"); ok {
		t.Fatal("a scale token parsed as a replace token")
	}
	for token, want := range map[string]string{"T scale 3 up": "T scale 3", "T scale 3": "T scale 3", "T": "", "T replace a": ""} {
		if got := StartOverToken(StepRestartIdentity, token); got != want {
			t.Errorf("StartOverToken(%q) = %q, want %q", token, got, want)
		}
	}
	if got := StartOverToken(StepRefreshControlPlane, "T scale 3"); got != "" {
		t.Errorf("StartOverToken at another step = %q, want none", got)
	}
	if n, ok := IdentityScaleToRestore(gone, StepRestartIdentity, "T scale 3 up"); !ok || n != 3 {
		t.Errorf("IdentityScaleToRestore, identity at 0: %d %v, want 3", n, ok)
	}
	if _, ok := IdentityScaleToRestore(old, StepRestartIdentity, "T scale 3"); ok {
		t.Error("IdentityScaleToRestore before the scale-down: want nothing to restore")
	}
}
