package steps

import (
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// ActFailureReason is the apiserver's reason for an act's error (Forbidden, Invalid, Conflict,
// NotFound, ...), found through the error's wrapping; ActError when it carries none.
func ActFailureReason(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return v1alpha1.ReasonActError
}

// projectHolds sets on st, the status Project computed (kstatus conditions included), what
// holds the workflow back besides its steps' waits: an act that failed (status.actFailure,
// condition ActFailed) and spec.suspend (condition Suspended). It runs last, so that Ready,
// Reconciling and Stalled agree with them: Ready is False while an act failure stands or the
// operator is suspended.
func projectHolds(st, prev *v1alpha1.TrustAnchorRotationStatus, spec v1alpha1.TrustAnchorRotationSpec, generation int64,
	s *State, res workflow.Result, now time.Time, recheck func(time.Time)) {
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: message,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	projectActFailure(st, prev, spec, res, now, set, recheck)
	projectSuspend(st, spec, res, set)
	projectSpecInvalid(st, s, res, set)
}

// projectSpecInvalid reports a spec the operator cannot use (State.SpecErrors), which holds
// every act as spec.suspend does: condition SpecInvalid=True naming each field, the blocking
// message, Ready False and Stalled True (reason SpecInvalid), since only a person fixing the
// spec moves it on. Fixed, SpecInvalid turns False.
func projectSpecInvalid(st *v1alpha1.TrustAnchorRotationStatus, s *State, res workflow.Result,
	set func(typ string, status metav1.ConditionStatus, reason, message string)) {
	if len(s.SpecErrors) == 0 {
		if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionSpecInvalid) {
			set(v1alpha1.ConditionSpecInvalid, metav1.ConditionFalse, v1alpha1.ReasonSpecValid, "the operator can use every field of the spec")
		}
		return
	}
	msg := SpecErrorsMessage(s.SpecErrors)
	set(v1alpha1.ConditionSpecInvalid, metav1.ConditionTrue, v1alpha1.ReasonSpecInvalid, msg)
	held := msg + "; the operator acts on nothing until it is fixed"
	if res.Held {
		held += "; " + heldNext(res)
	}
	st.BlockingMessage = joinMessages(held, st.BlockingMessage)
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSpecInvalid, st.BlockingMessage)
	set(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonSpecInvalid, msg)
}

// projectActFailure records a failed act (res.ActErr) and keeps it while the workflow stays at
// the step without acting again (it waits, or is suspended); an act that succeeds, or the
// workflow leaving the step, clears it. A failure that stands longer than spec.stalledAfter
// allows in the phase makes Stalled True, with the apiserver's reason: a write the operator is
// refused needs a person as much as a wait that does not end.
func projectActFailure(st, prev *v1alpha1.TrustAnchorRotationStatus, spec v1alpha1.TrustAnchorRotationSpec,
	res workflow.Result, now time.Time, set func(typ string, status metav1.ConditionStatus, reason, message string), recheck func(time.Time)) {
	step := res.Checkpoint.Step
	last := prev.ActFailure
	var f *v1alpha1.ActFailure
	switch {
	case res.ActErr != nil:
		f = &v1alpha1.ActFailure{Step: step, Reason: ActFailureReason(res.ActErr), Message: res.ActErr.Error(), Since: metav1.NewTime(now)}
		if last != nil && last.Step == step {
			f.Since = last.Since
		}
	case last == nil:
		st.ActFailure = nil
		return
	case res.Acted:
		st.ActFailure = nil
		set(v1alpha1.ConditionActFailed, metav1.ConditionFalse, v1alpha1.ReasonActSucceeded,
			fmt.Sprintf("an act of step %s succeeded after its acts failed since %s", step, last.Since.UTC().Format(time.RFC3339)))
		return
	case res.Jumped != nil || last.Step != step:
		st.ActFailure = nil
		set(v1alpha1.ConditionActFailed, metav1.ConditionFalse, v1alpha1.ReasonStepLeft,
			fmt.Sprintf("the workflow left step %s, whose acts failed since %s", last.Step, last.Since.UTC().Format(time.RFC3339)))
		return
	default:
		kept := *last // still at the step, which has not acted again
		f = &kept
	}
	st.ActFailure = f
	failed := fmt.Sprintf("step %s: the operator's write failed (%s): %s", f.Step, f.Reason, f.Message)
	if res.ActErr != nil {
		st.BlockingMessage = failed + "; retrying"
	} else {
		st.BlockingMessage = joinMessages(st.BlockingMessage, "the last act failed: "+failed)
	}
	set(v1alpha1.ConditionActFailed, metav1.ConditionTrue, f.Reason, failed)
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonActFailed, st.BlockingMessage)
	set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonActFailed, st.BlockingMessage)
	limit := StalledAfter(spec, st.Phase)
	since := f.Since.UTC().Format(time.RFC3339)
	if now.Sub(f.Since.Time) > limit {
		set(v1alpha1.ConditionStalled, metav1.ConditionTrue, f.Reason, fmt.Sprintf(
			"acts of step %s failing since %s, longer than %s: %s", f.Step, since, CompactDuration(limit), f.Message))
		return
	}
	recheck(f.Since.Add(limit + time.Second))
	set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonNotStalled, fmt.Sprintf(
		"acts of step %s failing since %s; stalled after %s", f.Step, since, CompactDuration(limit)))
}

// SuspendedMessage says that spec.suspend holds the operator and what it would do next, from
// where the workflow stopped: the act or the jump it holds, or the step's wait.
func SuspendedMessage(res workflow.Result) string {
	const suspended = "suspended (spec.suspend): the operator acts on nothing"
	d, step := res.Decision, res.Checkpoint.Step
	switch {
	case res.Held:
		return suspended + "; " + heldNext(res)
	case d.Message != "":
		return fmt.Sprintf("%s; no act is due: step %s waits (%s): %s", suspended, step, d.Reason, d.Message)
	}
	return fmt.Sprintf("%s; no act is due: step %s waits (%s)", suspended, step, d.Reason)
}

// heldNext says what the act or jump the engine held would have done.
func heldNext(res workflow.Result) string {
	d, step := res.Decision, res.Checkpoint.Step
	if d.Outcome == workflow.Jump {
		return fmt.Sprintf("next: step %s would start the rotation again at step %s (%s): %s", step, d.To, d.Reason, d.Message)
	}
	return fmt.Sprintf("next: step %s would act (%s): %s", step, d.Reason, d.Message)
}

// projectSuspend reports spec.suspend: condition Suspended=True and a blocking message that say
// what the operator would do next; Ready False (reason Suspended) and Stalled False, since a
// rotation held on purpose is not stalled. Resumed, Suspended turns False.
func projectSuspend(st *v1alpha1.TrustAnchorRotationStatus, spec v1alpha1.TrustAnchorRotationSpec, res workflow.Result,
	set func(typ string, status metav1.ConditionStatus, reason, message string)) {
	if !spec.Suspend {
		if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionSuspended) {
			set(v1alpha1.ConditionSuspended, metav1.ConditionFalse, v1alpha1.ReasonResumed, "spec.suspend is false: the operator acts")
		}
		return
	}
	msg := SuspendedMessage(res)
	set(v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended, msg)
	switch {
	case res.Held || st.BlockingMessage == "":
		st.BlockingMessage = joinMessages(msg, st.BlockingMessage)
	default:
		// The step's wait is in the message already.
		st.BlockingMessage = joinMessages("suspended (spec.suspend): the operator acts on nothing", st.BlockingMessage)
	}
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended, st.BlockingMessage)
	set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonSuspended, "suspended: a rotation held by spec.suspend is not stalled")
}

func joinMessages(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}
