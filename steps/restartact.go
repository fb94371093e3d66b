// Acting on a restart plan: the restarts and evictions it starts, each stamped with the step's
// token, and the pod-template annotations a restart sets with it.

package steps

import "context"

// actRestarts makes the plan's restarts: each is stamped with the token (restartedAt, or the
// evicted-for annotation), so that a repeated act never restarts a workload twice.
func actRestarts(w Writer, p restartPurpose) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, token string) error {
		if s.Workloads == nil {
			return nil
		}
		plan := s.planRestarts(p, token)
		if len(plan.failed) > 0 {
			return nil
		}
		for _, wl := range plan.start {
			if s.evicts(wl) {
				if err := w.AnnotateWorkload(ctx, wl.WorkloadRef, map[string]string{EvictedForAnnotation: token}); err != nil {
					return err
				}
				if _, err := w.EvictPods(ctx, wl.WorkloadRef, evictable(p, wl, token)); err != nil {
					return err
				}
				continue
			}
			if err := w.RestartWorkload(ctx, wl.WorkloadRef, token, s.templateChanges(p, wl)); err != nil {
				return err
			}
		}
		for _, wl := range plan.evict {
			if _, err := w.EvictPods(ctx, wl.WorkloadRef, evictable(p, wl, token)); err != nil {
				return err
			}
		}
		return nil
	}
}

// templateChanges are the pod-template annotations a restart also sets (nil removes one): the
// accelerated refresh interval when propagating the expanded bundle, its removal when the
// reduced bundle is propagated. Only RolloutRestart changes the template.
func (s *State) templateChanges(p restartPurpose, w *Workload) map[string]*string {
	switch p {
	case propagate:
		if w.RefreshOverride != "" {
			return nil // already set, by this rotation's earlier attempt
		}
		env, marker, ok := AddRefreshOverride(w.AdditionalEnv, RefreshInterval(s.Spec))
		if !ok {
			return nil // an annotation we cannot parse is left alone: the fallback restart covers it
		}
		return map[string]*string{AdditionalEnvAnnotation: &env, RefreshOverrideAnnotation: &marker}
	case reduce:
		if w.RefreshOverride == "" {
			return nil
		}
		env := RemoveRefreshOverride(w.AdditionalEnv, w.RefreshOverride)
		return map[string]*string{AdditionalEnvAnnotation: env, RefreshOverrideAnnotation: nil}
	}
	return nil
}
