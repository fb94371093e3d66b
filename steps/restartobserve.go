// Observing the automatic restarts: whether a workload's restart has finished, and what the
// restart steps' Observe and Describe say of a restart plan (the blocking message, the plan line).

package steps

import (
	"fmt"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// describe renders a plan's situation for the blocking message.
func (plan restartPlan) describe() string {
	var parts []string
	names := func(ws []*Workload) string {
		var out []string
		for i, w := range ws {
			if i == 5 {
				out = append(out, fmt.Sprintf("and %d more", len(ws)-5))
				break
			}
			p := w.String()
			switch {
			case w.Settling != "":
				p += " (" + w.Settling + ")"
			case w.Progress != "" && !w.RolledOut:
				p += " (" + w.Progress + ")"
			}
			out = append(out, p)
		}
		return strings.Join(out, ", ")
	}
	list := func(keys []string) string {
		if len(keys) > 5 {
			return strings.Join(keys[:5], ", ") + fmt.Sprintf(" and %d more", len(keys)-5)
		}
		return strings.Join(keys, ", ")
	}
	if len(plan.failed) > 0 {
		parts = append(parts, strings.Join(plan.failed, "; ")+"; fix it (the rotation resumes once it rolls out)")
	}
	if len(plan.blocked) > 0 {
		parts = append(parts, strings.Join(plan.blocked, "; "))
	}
	if len(plan.inProgress) > 0 {
		parts = append(parts, "restarting "+names(plan.inProgress))
	}
	if plan.waiting > 0 {
		w := fmt.Sprintf("%d workload(s) wait to be restarted", plan.waiting)
		if plan.closed != "" {
			w += ": " + plan.closed
		}
		parts = append(parts, w)
	}
	if len(plan.unrestartable) > 0 {
		parts = append(parts, "pods without a restartable owner (restart or replace them yourself): "+list(plan.unrestartable))
	}
	if len(plan.notSelected) > 0 {
		parts = append(parts, "not selected by spec.dataPlaneRestart (restart them yourself): "+list(plan.notSelected))
	}
	if len(plan.outOfScope) > 0 {
		parts = append(parts, "outside the namespaces the operator may restart in (--restart-namespaces; restart them yourself): "+list(plan.outOfScope))
	}
	if len(plan.stuck) > 0 {
		parts = append(parts, "restarted but still behind: "+list(plan.stuck))
	}
	return strings.Join(parts, "; ")
}

// observeRestarts is the Observe of the automatic restarts, once the step knows pods are behind.
func (s *State) observeRestarts(p restartPurpose, token, behind string) workflow.Decision {
	if s.Workloads == nil {
		return workflow.Waiting("WorkloadsUnavailable", behind+"; automatic restarts wait for the operator's view of the workloads: "+s.WorkloadsProblem)
	}
	plan := s.planRestarts(p, token)
	if len(plan.failed) == 0 && (len(plan.start) > 0 || len(plan.evict) > 0) {
		return workflow.ActNeeded(ReasonRestartingWorkloads, describeStarts(s, plan, p, token))
	}
	reason := "WorkloadsRestarting"
	switch {
	case len(plan.failed) > 0:
		reason = "RolloutFailed"
	case len(plan.blocked) > 0 && len(plan.inProgress) == len(plan.evict)+len(plan.blocked):
		reason = "EvictionBlocked"
	case plan.closed != "" && len(plan.inProgress) == 0:
		reason = "OutsideMaintenanceWindow"
	}
	msg := behind
	if d := plan.describe(); d != "" {
		msg += "; " + d
	}
	return workflow.Waiting(reason, msg).RecheckBy(s.after(plan.opens))
}

func describeStarts(s *State, plan restartPlan, p restartPurpose, token string) string {
	var restarts, evictions []string
	for _, w := range plan.start {
		switch {
		case w.NoRollout != "" && s.restartMethod() != v1alpha1.Evict:
			evictions = append(evictions, w.String()+" ("+w.NoRollout+")")
		case s.evicts(w):
			evictions = append(evictions, w.String())
		default:
			restarts = append(restarts, w.String())
		}
	}
	var parts []string
	if len(restarts) > 0 {
		parts = append(parts, "rollout restart "+strings.Join(restarts, ", "))
	}
	if len(evictions) > 0 {
		parts = append(parts, "evict the pods of "+strings.Join(evictions, ", "))
	}
	msg := strings.Join(parts, "; ")
	if len(plan.evict) > 0 {
		var more []string
		for _, w := range plan.evict {
			more = append(more, fmt.Sprintf("%s (%d pod(s))", w.String(), len(evictable(p, w, token))))
		}
		if msg != "" {
			msg += "; "
		}
		msg += "evict the remaining pods of " + strings.Join(more, ", ")
	}
	return msg
}

// restarted reports whether a workload restarted under this step's token has finished
// restarting. With RolloutRestart the template change makes the controller's status show the
// rollout (observedGeneration) until it completes: RolledOut is enough. An eviction changes no
// generation: for a moment after it, the cached status still shows the workload as it was
// before, rolled out, and the replacement pods may run before the status shows them missing —
// the budget was then exceeded, the next evictions starting while this rollout still showed.
// So an evicted workload is restarted only once all three hold:
//   - its status changed since the eviction (Settling is ""): it is not the stale one;
//   - that status is rolled out (RolledOut: observedGeneration, updated, ready and available
//     replicas as many as wanted, none unavailable);
//   - none of its pods terminating and as many running as it wants: the evicted pods are gone
//     and replaced (a status change might be an intermediate one).
func (w *Workload) restarted(evict bool) bool {
	if !w.RolledOut {
		return false
	}
	return !evict || w.Settling == "" && w.Terminating == 0 && int32(w.Running) >= w.Replicas
}

// restarting reports whether a workload restarted during this rotation — its restart mark
// (restartedAt, or the evicted-for annotation) is not older than the rotation's start, whichever
// step or person wrote it — has not finished restarting: a rollout not rolled out (nor failed),
// or an eviction not settled (see restarted). The restart budget counts these besides the step's
// own: a step whose pods converged ends while its last evictions or rollouts still settle, and
// the next step must not start beside them. Marks from before the rotation are not counted, so
// that a workload unhealthy for reasons of its own does not hold its namespace.
func (s *State) restarting(w *Workload) bool {
	if s.RotationStart.IsZero() {
		return false
	}
	// status.checkpoint.startTime has whole seconds; tokens have nanoseconds.
	since := s.RotationStart.Truncate(time.Second)
	during := func(mark string) bool {
		t, err := stampTime(mark)
		return err == nil && !t.Before(since)
	}
	switch {
	case during(w.EvictedFor) && !w.restarted(true):
		return true
	case during(w.RestartedAt):
		return !w.RolledOut && w.Failed == ""
	}
	return false
}

func describeRestarts(p restartPurpose) func(*State) []string {
	return func(s *State) []string {
		if !s.automaticRestarts() || s.Workloads == nil {
			return nil
		}
		plan := s.planRestarts(p, "")
		if len(plan.start) == 0 {
			return nil
		}
		return []string{describeStarts(s, plan, p, "")}
	}
}
