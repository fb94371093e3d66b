package steps

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// forbidden is the error of a workload patch that the operator's RBAC does not allow, wrapped
// as the writer wraps it.
func forbidden() error {
	err := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
		fmt.Errorf(`User "system:serviceaccount:linkerd:trust-rotation-operator" cannot patch resource "deployments"`))
	return fmt.Errorf("patching app/Deployment/web: %w", err)
}

func TestActFailureReason(t *testing.T) {
	cases := map[string]struct {
		err  error
		want string
	}{
		"forbidden, wrapped":  {forbidden(), "Forbidden"},
		"invalid":             {apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil), "Invalid"},
		"conflict":            {fmt.Errorf("applying: %w", apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "x", fmt.Errorf("changed"))), "Conflict"},
		"no apiserver reason": {fmt.Errorf("cannot restart app/Pod/web: not a Deployment"), v1alpha1.ReasonActError},
	}
	for name, c := range cases {
		if got := ActFailureReason(c.err); got != c.want {
			t.Errorf("%s: reason %q, want %q", name, got, c.want)
		}
	}
}

// A failed act is in the status at once: the blocking message names the step, the write, the
// object and the apiserver's error; ActFailed=True with the apiserver's reason; Ready False with
// reason ActFailed. It stands while the step waits, turns Stalled past the threshold, and clears
// when an act succeeds or the workflow leaves the step.
func TestProjectActFailure(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const gen = 4
	spec := v1alpha1.TrustAnchorRotationSpec{}
	s := rotatingState(p)
	at := func(d workflow.Decision) workflow.Result {
		return workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepPropagateTrustRoots, Token: "t1", Acts: 1}, Phase: string(v1alpha1.PhasePropagatingTrustRoots), Decision: d}
	}
	act := workflow.ActNeeded(ReasonRestartingWorkloads, "restarting 1 workload(s): app/Deployment/web")
	failed := at(act)
	failed.ActErr = forbidden()
	start := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhasePropagatingTrustRoots}

	st := Project(rotationSteps, start, spec, gen, s, failed, now)
	for _, part := range []string{"step propagate-trust-roots", "(Forbidden)", "patching app/Deployment/web", `cannot patch resource "deployments"`} {
		if !strings.Contains(st.BlockingMessage, part) {
			t.Errorf("blocking message %q lacks %q", st.BlockingMessage, part)
		}
	}
	if f := st.ActFailure; f == nil || f.Step != StepPropagateTrustRoots || f.Reason != "Forbidden" || !f.Since.Equal(&metav1.Time{Time: now}) {
		t.Fatalf("actFailure = %+v", st.ActFailure)
	}
	checkCondition(t, st, v1alpha1.ConditionActFailed, gen, want{metav1.ConditionTrue, "Forbidden", "patching app/Deployment/web"})
	checkCondition(t, st, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, v1alpha1.ReasonActFailed, "Forbidden"})
	checkCondition(t, st, v1alpha1.ConditionReconciling, gen, want{metav1.ConditionTrue, v1alpha1.ReasonActFailed, "Forbidden"})
	checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, v1alpha1.ReasonNotStalled, "stalled after 1h"})

	// Failing again keeps the first failure's time; past spec.stalledAfter it is Stalled.
	again := Project(rotationSteps, st, spec, gen, s, failed, now.Add(30*time.Minute))
	if !again.ActFailure.Since.Equal(&metav1.Time{Time: now}) {
		t.Errorf("since moved to %v", again.ActFailure.Since)
	}
	checkCondition(t, again, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, v1alpha1.ReasonNotStalled, ""})
	stalled := Project(rotationSteps, again, spec, gen, s, failed, now.Add(61*time.Minute))
	checkCondition(t, stalled, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "Forbidden", "longer than 1h: patching app/Deployment/web"})
	checkCondition(t, stalled, v1alpha1.ConditionActFailed, gen, want{metav1.ConditionTrue, "Forbidden", ""})
	if c := meta.FindStatusCondition(stalled.Conditions, v1alpha1.ConditionActFailed); !c.LastTransitionTime.Equal(&metav1.Time{Time: now}) {
		t.Errorf("ActFailed's lastTransitionTime moved to %v", c.LastTransitionTime)
	}

	// The step waiting at the same checkpoint: the failure stands beside the wait.
	waiting := Project(rotationSteps, stalled, spec, gen, s, at(workflow.Waiting("TrustBundleConverging", "Waiting for 2 pod(s)")), now.Add(62*time.Minute))
	if waiting.ActFailure == nil || !strings.Contains(waiting.BlockingMessage, "Waiting for 2 pod(s)") || !strings.Contains(waiting.BlockingMessage, "the last act failed") {
		t.Errorf("waiting after a failure: actFailure %+v, blocking %q", waiting.ActFailure, waiting.BlockingMessage)
	}
	checkCondition(t, waiting, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, v1alpha1.ReasonActFailed, ""})

	// An act that succeeds clears it.
	acted := at(act)
	acted.Acted = true
	ok := Project(rotationSteps, waiting, spec, gen, s, acted, now.Add(63*time.Minute))
	if ok.ActFailure != nil || strings.Contains(ok.BlockingMessage, "failed") {
		t.Errorf("after a successful act: actFailure %+v, blocking %q", ok.ActFailure, ok.BlockingMessage)
	}
	checkCondition(t, ok, v1alpha1.ConditionActFailed, gen, want{metav1.ConditionFalse, v1alpha1.ReasonActSucceeded, "succeeded"})
	checkCondition(t, ok, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, "Forbidden", ""}) // an act keeps the wait's Stalled, as before
	next := Project(rotationSteps, ok, spec, gen, s, at(workflow.Waiting("TrustBundleConverging", "Waiting for 2 pod(s)")), now.Add(64*time.Minute))
	checkCondition(t, next, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, string(v1alpha1.PhasePropagatingTrustRoots), "Waiting for 2 pod(s)"})

	// The workflow leaving the step clears it too.
	left := Project(rotationSteps, st, spec, gen, s, workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepRestartIdentity},
		Phase: string(v1alpha1.PhaseWaitingForIdentityRotation), Decision: workflow.Waiting("IdentityRollingOut", "x"), Passed: []string{StepPropagateTrustRoots}}, now.Add(time.Minute))
	if left.ActFailure != nil {
		t.Errorf("after leaving the step: actFailure %+v", left.ActFailure)
	}
	checkCondition(t, left, v1alpha1.ConditionActFailed, gen, want{metav1.ConditionFalse, v1alpha1.ReasonStepLeft, StepPropagateTrustRoots})

	// A status that never had a failure has no ActFailed condition.
	clean := Project(rotationSteps, start, spec, gen, s, at(workflow.Waiting("TrustBundleConverging", "x")), now)
	if c := meta.FindStatusCondition(clean.Conditions, v1alpha1.ConditionActFailed); c != nil || clean.ActFailure != nil {
		t.Errorf("a status without failure: %+v, %+v", c, clean.ActFailure)
	}
}

// Suspended, the status says so and what the operator would do next: the act held, or the
// step's wait; Ready is False (reason Suspended) and the rotation is not Stalled. Resumed, the
// condition turns False.
func TestProjectSuspended(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const gen = 5
	suspended := v1alpha1.TrustAnchorRotationSpec{Suspend: true}
	s := rotatingState(p)
	since := metav1.NewTime(now.Add(-2 * time.Hour))
	prev := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhasePropagatingTrustRoots, LastPhaseTransitionTime: &since}
	held := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepPropagateTrustRoots}, Phase: string(v1alpha1.PhasePropagatingTrustRoots),
		Decision: workflow.ActNeeded(ReasonRestartingWorkloads, "restarting 1 workload(s): app/Deployment/web"), Held: true}

	st := Project(rotationSteps, prev, suspended, gen, s, held, now)
	wantMsg := "suspended (spec.suspend): the operator acts on nothing; next: step propagate-trust-roots would act (RestartingWorkloads): restarting 1 workload(s): app/Deployment/web"
	if st.BlockingMessage != wantMsg {
		t.Errorf("blocking message %q, want %q", st.BlockingMessage, wantMsg)
	}
	checkCondition(t, st, v1alpha1.ConditionSuspended, gen, want{metav1.ConditionTrue, v1alpha1.ReasonSuspended, wantMsg})
	checkCondition(t, st, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, v1alpha1.ReasonSuspended, "next: step propagate-trust-roots"})
	checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, v1alpha1.ReasonSuspended, ""})

	// A held jump says where the rotation would start again.
	jump := held
	jump.Decision = workflow.JumpTo(StepExpandTrustBundle, ReasonRotationSuperseded, "the trust anchor was renewed again")
	js := Project(rotationSteps, prev, suspended, gen, s, jump, now)
	if !strings.Contains(js.BlockingMessage, "next: step propagate-trust-roots would start the rotation again at step expand-trust-bundle (RotationSuperseded)") {
		t.Errorf("held jump: blocking message %q", js.BlockingMessage)
	}

	// Suspended while a step waits: the wait is said, after the suspension, and nothing stalls.
	wait := held
	wait.Held, wait.Decision = false, workflow.Waiting("TrustBundleConverging", "Waiting for 2 pod(s)")
	ws := Project(rotationSteps, prev, suspended, gen, s, wait, now)
	if ws.BlockingMessage != "suspended (spec.suspend): the operator acts on nothing; Waiting for 2 pod(s)" {
		t.Errorf("suspended wait: blocking message %q", ws.BlockingMessage)
	}
	checkCondition(t, ws, v1alpha1.ConditionSuspended, gen, want{metav1.ConditionTrue, v1alpha1.ReasonSuspended, "no act is due: step propagate-trust-roots waits (TrustBundleConverging): Waiting for 2 pod(s)"})
	checkCondition(t, ws, v1alpha1.ConditionStalled, gen, want{metav1.ConditionFalse, v1alpha1.ReasonSuspended, ""})

	// Synced and idle: suspended is still said, and Ready is False.
	idle := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepDetectAnchorRotation}, Phase: string(v1alpha1.PhaseSynced), Decision: workflow.Waiting("TrustAnchorUnchanged", "")}
	is := Project(rotationSteps, v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseSynced}, suspended, gen, s, idle, now)
	if !strings.HasPrefix(is.BlockingMessage, "suspended (spec.suspend)") {
		t.Errorf("idle suspended: blocking message %q", is.BlockingMessage)
	}
	checkCondition(t, is, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, v1alpha1.ReasonSuspended, "step detect-anchor-rotation waits (TrustAnchorUnchanged)"})

	// Resumed: Suspended=False, and the status is as without suspension.
	resumed := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, gen+1, s, wait, now.Add(time.Minute))
	checkCondition(t, resumed, v1alpha1.ConditionSuspended, gen+1, want{metav1.ConditionFalse, v1alpha1.ReasonResumed, ""})
	if resumed.BlockingMessage != "Waiting for 2 pod(s)" {
		t.Errorf("resumed: blocking message %q", resumed.BlockingMessage)
	}
	// Never suspended: no Suspended condition.
	if c := meta.FindStatusCondition(Project(rotationSteps, prev, v1alpha1.TrustAnchorRotationSpec{}, gen, s, wait, now).Conditions, v1alpha1.ConditionSuspended); c != nil {
		t.Errorf("never suspended, yet %+v", c)
	}
}
