package faults

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow"
)

// TestKillPointsFollowTheSteps: the kill points come from the steps themselves, so a step added
// to the rotation is killed at like the others (no cluster needed).
func TestKillPointsFollowTheSteps(t *testing.T) {
	base := killPointsOf(steps.Rotation(nil))
	for _, want := range []string{"save:" + steps.StepExpandTrustBundle, "write:" + steps.StepRefreshControlPlane,
		"acted:" + steps.StepRetirePreviousAnchor, "enter:" + steps.StepPropagateTrustRoots} {
		if !slices.Contains(base, want) {
			t.Errorf("no kill point %s in %v", want, base)
		}
	}
	for _, st := range steps.Rotation(nil) {
		for _, p := range base {
			if st.Idle() && strings.HasSuffix(p, ":"+st.Name) {
				t.Errorf("kill point %s at an idle step", p)
			}
			if st.CrossSignedSkips != "" && strings.HasPrefix(p, crossSigned) && strings.HasSuffix(p, ":"+st.Name) {
				t.Errorf("kill point %s at a step a cross-signed rotation passes over", p)
			}
		}
	}
	// A cross-signed rotation is killed at every step it acts at or waits in, as a standard one.
	for _, want := range []string{"save:" + steps.StepRestartIdentityOnNewIssuer, "write:" + steps.StepRefreshControlPlaneCerts,
		"acted:" + steps.StepRetirePreviousAnchor, "acted:" + steps.StepReduceTrustBundle, "write:" + steps.StepRefreshControlPlaneReduced,
		"enter:" + steps.StepWaitForIdentityIssuer, "enter:" + steps.StepRenewWorkloadCertificates, "enter:" + steps.StepRemoveOldTrustRoots} {
		if !slices.Contains(base, crossSigned+want) {
			t.Errorf("no kill point %s%s in %v", crossSigned, want, base)
		}
	}

	act := func(context.Context, *steps.State, string) error { return nil }
	wait := func(*steps.State, string) workflow.Decision { return workflow.Waiting("Pending", "") }
	acting := steps.Step{Step: workflow.Step[*steps.State]{Name: "write-extra", Phase: "RefreshingControlPlane", Observe: wait, Act: act}, WritesMany: true}
	waiting := steps.Step{Step: workflow.Step[*steps.State]{Name: "await-extra", Phase: "RefreshingControlPlane", Observe: wait},
		Manual: func(*steps.State) string { return "do it" }}
	got := killPointsOf(append(steps.Rotation(nil), acting, waiting))
	for _, want := range []string{"save:write-extra", "write:write-extra", "acted:write-extra", "enter:await-extra"} {
		for _, p := range []string{want, crossSigned + want} {
			if !slices.Contains(got, p) {
				t.Errorf("no kill point %s for the added steps in %v", p, got)
			}
		}
	}
	if len(got) != len(base)+8 {
		t.Errorf("%d kill points with two more steps, want %d (4 in each strategy)", len(got), len(base)+8)
	}
}
