package steps

import (
	"strings"
	"testing"
	"time"
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
			got := strings.Join(tc.state.IdentityRestartedEarly(tc.step), ",")
			if got != tc.want {
				t.Fatalf("IdentityRestartedEarly(%s) = %q, want %q", tc.step, got, tc.want)
			}
		})
	}
}

func TestIdentityRestartedEarlyMessage(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, issuer(p.newIssuer), bundlePods(3, 5), identityPod("linkerd-identity-new", -time.Minute, ""))
	pods := s.IdentityRestartedEarly(StepPropagateTrustRoots)
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
