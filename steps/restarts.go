package steps

import (
	"fmt"
	"sort"
	"time"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// automaticRestarts reports whether the operator restarts workloads itself.
func (s *State) automaticRestarts() bool {
	return s.Spec.DataPlaneRestart.Policy == v1alpha1.Automatic
}

// evicts reports whether the operator restarts w by evicting its pods: the Evict method, or a
// workload whose pods a template change does not replace (NoRollout).
func (s *State) evicts(w *Workload) bool {
	return s.restartMethod() == v1alpha1.Evict || w.NoRollout != ""
}

func (s *State) restartMethod() v1alpha1.RestartMethod { return restartMethod(s.Spec) }

// restartMethod is the spec's restart method, defaulted.
func restartMethod(spec v1alpha1.TrustAnchorRotationSpec) v1alpha1.RestartMethod {
	if spec.DataPlaneRestart.Method == "" {
		return v1alpha1.RolloutRestart
	}
	return spec.DataPlaneRestart.Method
}

// automatedRestarts says, for a plan, that the operator does what, when the spec automates the
// data-plane restarts; "" when it does not.
func automatedRestarts(spec v1alpha1.TrustAnchorRotationSpec, what string) string {
	if spec.DataPlaneRestart.Policy != v1alpha1.Automatic {
		return ""
	}
	return fmt.Sprintf("the operator %s (spec.dataPlaneRestart: Automatic, %s)", what, restartMethod(spec))
}

// RefreshOverrides counts the workloads whose pod template carries the operator's accelerated
// refresh interval: the override is in effect while it is not zero.
func (s *State) RefreshOverrides() int {
	n := 0
	for _, w := range s.Workloads {
		if w.RefreshOverride != "" {
			n++
		}
	}
	return n
}

// restartPurpose is what a data-plane restart is for.
type restartPurpose int

const (
	// propagate: pods must be injected with the expanded bundle; the restart adds the
	// accelerated refresh interval to the pod template.
	propagate restartPurpose = iota
	// renew: pods must present certificates that chain to the new anchor (the fallback restart).
	renew
	// reduce: pods must be injected with the reduced bundle; the restart removes the
	// accelerated refresh interval.
	reduce
)

// restartPlan is what automatic restarts would do now, decided from the snapshot alone, so that
// Observe, Act and Describe agree.
type restartPlan struct {
	// start are the workloads to restart now (within the budget and a maintenance window).
	start []*Workload
	// evict are workloads already being restarted by eviction under this token whose remaining
	// pods a PodDisruptionBudget now lets go.
	evict []*Workload
	// inProgress are workloads restarted under this token whose restart has not completed.
	inProgress []*Workload
	// failed are messages about rollouts that failed.
	failed []string
	// blocked are messages about evictions a PodDisruptionBudget does not allow.
	blocked []string
	// waiting are workloads behind that wait for the budget or a maintenance window.
	waiting int
	// closed says when the next maintenance window opens, when none is open now.
	closed string
	// opens is when the next maintenance window opens, zero when one is open or none ever opens.
	opens time.Time
	// unrestartable are workloads behind that the operator cannot restart (bare pods, Jobs...).
	unrestartable []string
	// notSelected are workloads behind that the selectors leave to the user.
	notSelected []string
	// outOfScope are workloads behind in namespaces where the operator may not restart.
	outOfScope []string
	// stuck are workloads restarted under this token and rolled out, yet still behind.
	stuck []string
}

// behindWorkloads returns the keys of the workloads that must be restarted for the purpose.
func (s *State) behindWorkloads(p restartPurpose) []string {
	set := map[string]bool{}
	switch p {
	case propagate, reduce:
		for k, w := range s.Workloads {
			if len(w.BundleBehind) > 0 || p == reduce && w.RefreshOverride != "" {
				set[k] = true
			}
		}
		for _, b := range s.TrustBundle.Behind {
			set[b.Workload] = true
		}
	case renew:
		for _, b := range s.Certificates.Behind {
			set[b.Workload] = true
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isControlPlane reports whether the workload is one of the control-plane Deployments, which
// the rotation's own steps restart.
func (s *State) isControlPlane(w WorkloadRef) bool {
	if w.Namespace != s.Config.LinkerdNamespace || w.Kind != "Deployment" {
		return false
	}
	for _, n := range s.Config.ControlPlane() {
		if n == w.Name {
			return true
		}
	}
	return false
}

// planRestarts decides which workloads to restart now, under the step's token.
func (s *State) planRestarts(p restartPurpose, token string) restartPlan {
	var plan restartPlan
	dp := s.Spec.DataPlaneRestart
	maxAll, maxNS := int(dp.MaxConcurrent), int(dp.MaxConcurrentPerNamespace)
	if maxAll < 1 {
		maxAll = 5
	}
	if maxNS < 1 {
		maxNS = 1
	}
	ours := func(w *Workload) bool {
		evict := s.evicts(w)
		return token != "" && (!evict && w.RestartedAt == token || evict && w.EvictedFor == token)
	}
	perNS := map[string]int{}
	// Every restart of this step still rolling counts against the budget, including those whose
	// pods already converged: their rollout has not finished.
	behind := s.behindWorkloads(p)
	isBehind := map[string]bool{}
	for _, k := range behind {
		isBehind[k] = true
	}
	keys := make([]string, 0, len(s.Workloads))
	for k := range s.Workloads {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w := s.Workloads[k]
		if isBehind[k] || !w.Found || s.isControlPlane(w.WorkloadRef) {
			continue
		}
		if ours(w) && !w.restarted(s.evicts(w)) || !ours(w) && s.restarting(w) {
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
		}
	}
	var candidates []*Workload
	for _, key := range behind {
		ref, ok := ParseWorkload(key)
		if !ok || s.isControlPlane(ref) {
			continue
		}
		if !ref.Restartable() {
			plan.unrestartable = append(plan.unrestartable, key)
			continue
		}
		w, ok := s.Workloads[key]
		if ok && w.OutOfScope {
			plan.outOfScope = append(plan.outOfScope, key)
			continue
		}
		if !ok || !w.Found {
			plan.unrestartable = append(plan.unrestartable, key+" (not found)")
			continue
		}
		if !w.Selected {
			plan.notSelected = append(plan.notSelected, key)
			continue
		}
		switch {
		case !ours(w) && s.restarting(w):
			// Restarting already, by an earlier step of this rotation (its eviction or rollout
			// had not settled when its pods converged) or by someone's rollout restart: it
			// counts against the budget, and is restarted again only if still behind once
			// settled.
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
		case !ours(w):
			candidates = append(candidates, w)
		case w.Failed != "":
			plan.failed = append(plan.failed, fmt.Sprintf("the rollout of %s failed: %s", key, w.Failed))
		case s.evicts(w) && len(evictable(p, w, token)) > 0:
			// Being evicted: more pods to evict, when the budget of its PDB lets them go and the
			// status shows the previous eviction settled. A PodDisruptionBudget allows the next
			// disruption as soon as the replacement pod is ready, often before the Deployment's
			// status shows it; evicted then, the workload's settling mark would be taken from a
			// status that is still catching up with the previous eviction, and the next status,
			// rolled out for that one, would end the mark while this eviction is not yet shown:
			// the next workload would start beside it, over the per-namespace budget.
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
			switch {
			case w.PDB != "" && w.DisruptionsAllowed <= 0:
				plan.blocked = append(plan.blocked, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption of %s (%d pod(s) left to evict)",
					w.Namespace, w.PDB, key, len(evictable(p, w, token))))
			case w.RolledOut && w.Settling == "":
				plan.evict = append(plan.evict, w)
			}
		case !w.restarted(s.evicts(w)):
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
		default:
			plan.stuck = append(plan.stuck, key)
		}
	}
	if len(plan.failed) > 0 {
		// A failed rollout parks the rotation: nothing new starts until it is fixed.
		plan.evict, plan.waiting = nil, len(candidates)
		return plan
	}
	if len(candidates) == 0 {
		return plan
	}
	if p == propagate && len(s.identityRestartedEarly()) > 0 {
		// Identity restarted early signs certificates the pods behind do not trust: the
		// workloads with the most of them go first, so that their number drops fastest.
		sort.SliceStable(candidates, func(i, j int) bool { return len(candidates[i].BundleBehind) > len(candidates[j].BundleBehind) })
	}
	if open, next, opens := s.maintenanceWindowOpen(); !open {
		plan.closed, plan.opens, plan.waiting = next, opens, len(candidates)
		return plan
	}
	running := len(plan.inProgress)
	for _, w := range candidates {
		if running >= maxAll || perNS[w.Namespace] >= maxNS {
			plan.waiting++
			continue
		}
		if s.evicts(w) && w.PDB != "" && w.DisruptionsAllowed <= 0 {
			plan.blocked = append(plan.blocked, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption of %s", w.Namespace, w.PDB, w.String()))
			plan.waiting++
			continue
		}
		plan.start = append(plan.start, w)
		running++
		perNS[w.Namespace]++
	}
	return plan
}

// evictable are the pods to evict to restart a workload: those behind on the trust bundle, or
// for the certificate fallback every pod of the workload.
func evictable(p restartPurpose, w *Workload, token string) []string {
	if p == renew {
		return w.createdBefore(token)
	}
	return w.BundleBehind
}

// createdBefore are the workload's pods created before the token's time (all of them for a
// token that is not a time): the pods that a restart under the token has not replaced yet.
func (w *Workload) createdBefore(token string) []string {
	t, err := stampTime(token)
	var out []string
	for _, name := range w.Pods {
		if err != nil || w.Created[name].Before(t) {
			out = append(out, name)
		}
	}
	return out
}
