package steps

import (
	"fmt"
	"strings"
	"testing"
)

// TestStageFacts pins the facts each step of the rotation takes from its place in the order:
// the stages it is in say them (stage.go), and this table is what they must come to.
func TestStageFacts(t *testing.T) {
	// B: BeforeIssuerSwitch, W: IdentityMustWait, E: NeedsExpandedPods, U: UrgentProbes,
	// R: Retiring.
	want := map[string]string{
		StepBootstrap:                  "",
		StepDetectAnchorRotation:       "",
		StepRenewIssuerFirst:           "",
		StepExpandTrustBundle:          "BW",
		StepRestartIdentityFirst:       "",
		StepRefreshControlPlane:        "BW",
		StepPropagateTrustRoots:        "BW",
		StepWaitForRemoteTrustRoots:    "BE",
		StepRestartIdentity:            "BE",
		StepWaitForIdentityIssuer:      "E",
		StepRestartIdentityOnNewIssuer: "EU",
		StepRefreshControlPlaneCerts:   "EU",
		StepRenewWorkloadCertificates:  "EU",
		StepWaitForRemoteCertificates:  "E",
		StepRetirePreviousAnchor:       "ER",
		StepReduceTrustBundle:          "R",
		StepRefreshControlPlaneReduced: "R",
		StepRemoveOldTrustRoots:        "R",
	}
	list := Rotation(nil)
	if len(list) != len(want) {
		t.Fatalf("%d steps, the table has %d", len(list), len(want))
	}
	for _, st := range list {
		var got strings.Builder
		for _, f := range []struct {
			letter string
			holds  bool
		}{{"B", st.BeforeIssuerSwitch}, {"W", st.IdentityMustWait}, {"E", st.NeedsExpandedPods}, {"U", st.UrgentProbes}, {"R", st.Retiring}} {
			if f.holds {
				got.WriteString(f.letter)
			}
		}
		if w, ok := want[st.Name]; !ok || got.String() != w {
			t.Errorf("%s: facts %q, want %q", st.Name, got.String(), w)
		}
	}
}

// TestStepDeclaringItsPosition: a step that says where it sits is refused, since its stages say
// it and would disagree with it the day it moves.
func TestStepDeclaringItsPosition(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "step reduce-trust-bundle declares its Position") {
			t.Errorf("recovered %v", r)
		}
	}()
	st := reduceTrustBundleStep(nil)
	st.Retiring = true
	Stage{Name: "retire", Holds: Position{Retiring: true}, Parts: []part{st}}.Steps()
}
