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
		}
	}

	act := func(context.Context, *steps.State, string) error { return nil }
	wait := func(*steps.State, string) workflow.Decision { return workflow.Waiting("Pending", "") }
	acting := steps.Step{Step: workflow.Step[*steps.State]{Name: "write-extra", Phase: "RefreshingControlPlane", Observe: wait, Act: act}, WritesMany: true}
	waiting := steps.Step{Step: workflow.Step[*steps.State]{Name: "await-extra", Phase: "RefreshingControlPlane", Observe: wait},
		Manual: func(*steps.State) string { return "do it" }}
	got := killPointsOf(append(steps.Rotation(nil), acting, waiting))
	for _, want := range []string{"save:write-extra", "write:write-extra", "acted:write-extra", "enter:await-extra"} {
		if !slices.Contains(got, want) {
			t.Errorf("no kill point %s for the added steps in %v", want, got)
		}
	}
	if len(got) != len(base)+4 {
		t.Errorf("%d kill points with two more steps, want %d", len(got), len(base)+4)
	}
}
