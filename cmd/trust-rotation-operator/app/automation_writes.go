package app

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
)

// The automation's memory of the operator's own writes to workloads (restart tokens, eviction
// marks, the status an eviction left), kept until its caches show them: rememberingWriter
// records them as the acts write, the snapshot's Overlay and StatusSeen read them.

// writtenMark is a write the cache may not show yet.
type writtenMark struct{ restartedAt, evictedFor string }

// remember records a restart or an eviction mark the operator just wrote.
func (a *automation) remember(ref steps.WorkloadRef, m writtenMark) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.written == nil {
		a.written = map[string]writtenMark{}
	}
	prev := a.written[ref.String()]
	if m.restartedAt == "" {
		m.restartedAt = prev.restartedAt
	}
	if m.evictedFor == "" {
		m.evictedFor = prev.evictedFor
	}
	a.written[ref.String()] = m
}

// Overlay makes a workload read from a stale cache show the operator's own latest write: a
// restart the cache does not show yet is a rollout that has not started.
func (a *automation) Overlay(w *steps.Workload) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.written[w.String()]
	if !ok {
		return
	}
	seen := true
	if m.restartedAt != "" && w.RestartedAt != m.restartedAt {
		w.RestartedAt, w.RolledOut, w.Progress, seen = m.restartedAt, false, "waiting for the restart to be observed", false
	}
	if m.evictedFor != "" && w.EvictedFor != m.evictedFor {
		w.EvictedFor, seen = m.evictedFor, false
	}
	if seen {
		delete(a.written, w.String())
	}
}

// statusOf is a copy of a workload's status, or nil for another object.
func statusOf(obj any) any {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return *o.Status.DeepCopy()
	case *appsv1.StatefulSet:
		return *o.Status.DeepCopy()
	case *appsv1.DaemonSet:
		return *o.Status.DeepCopy()
	}
	return nil
}

// cachedStatus is the workload's status as the cache shows it now.
func (a *automation) cachedStatus(ref steps.WorkloadRef) (any, bool) {
	a.mu.Lock()
	l := a.informerFor(ref.Kind)
	a.mu.Unlock()
	if l == nil {
		return nil, false
	}
	obj := l.get(ref.Namespace, ref.Name)
	if obj == nil {
		return nil, false
	}
	return statusOf(obj), true
}

// evicted records, once the apiserver accepted an eviction of the workload's pods, its status
// as the cache showed it before (taken before: the status may move as soon as the first pod
// goes). A mark already there is kept: its status is older still (a repeated act, before the
// cache shows the first eviction, must not take a status that already moved as the reference).
// No mark is left when nothing was evicted (a PodDisruptionBudget answered 429): the status
// would never move, and the workload would settle for ever.
func (a *automation) markEvicted(ref steps.WorkloadRef, before any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.evicted == nil {
		a.evicted = map[string]any{}
	}
	if _, ok := a.evicted[ref.String()]; !ok {
		a.evicted[ref.String()] = before
	}
}

// StatusSeen forgets the eviction mark of the workload once obj shows another status than the
// one recorded at the eviction, and reports whether none is left.
func (a *automation) StatusSeen(obj any) bool {
	key := observe.WorkloadKey(obj)
	a.mu.Lock()
	defer a.mu.Unlock()
	before, ok := a.evicted[key]
	if !ok {
		return true
	}
	if equality.Semantic.DeepEqual(before, statusOf(obj)) {
		return false
	}
	delete(a.evicted, key)
	return true
}

// forgetEviction drops the eviction mark of a deleted workload.
func (a *automation) forgetEviction(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	a.mu.Lock()
	delete(a.evicted, observe.WorkloadKey(obj))
	a.mu.Unlock()
}

// rememberingWriter tells the automation about the workload writes it makes.
type rememberingWriter struct {
	steps.Writer
	auto *automation
}

func (r rememberingWriter) RestartWorkload(ctx context.Context, w steps.WorkloadRef, token string, ann map[string]*string) error {
	err := r.Writer.RestartWorkload(ctx, w, token, ann)
	if err == nil {
		r.auto.remember(w, writtenMark{restartedAt: token})
	}
	return err
}

func (r rememberingWriter) AnnotateWorkload(ctx context.Context, w steps.WorkloadRef, ann map[string]string) error {
	err := r.Writer.AnnotateWorkload(ctx, w, ann)
	if err == nil && ann[steps.EvictedForAnnotation] != "" {
		r.auto.remember(w, writtenMark{evictedFor: ann[steps.EvictedForAnnotation]})
	}
	return err
}

func (r rememberingWriter) EvictPods(ctx context.Context, w steps.WorkloadRef, names []string) (int, error) {
	before, cached := r.auto.cachedStatus(w)
	n, err := r.Writer.EvictPods(ctx, w, names)
	if n > 0 && cached {
		r.auto.markEvicted(w, before)
	}
	return n, err
}
