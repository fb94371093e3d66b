package app

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Event reasons of spec.suspend: one Event when the operator starts holding its acts, one when
// it acts again.
const (
	ReasonSuspended = v1alpha1.ReasonSuspended
	ReasonResumed   = v1alpha1.ReasonResumed
)

// publishActFailure writes the status of a reconcile whose act failed (res.ActErr) at once:
// the blocking message names the step, the write, the object and the apiserver's error, and the
// conditions say ActFailed (and Stalled, once it lasts), so that `kubectl get tar`, `linkerd
// trust inspect`, `kubectl wait` and Argo CD see it without reading Events, which expire. base
// is the object as the checkpoint saved before the act left it. A failure to write is logged
// only: the act's error is the reconcile's, and the retry writes again.
func (c *Controller) publishActFailure(ctx context.Context, tar, base *v1alpha1.TrustAnchorRotation, s *steps.State, res workflow.Result, now time.Time) {
	status := steps.Project(c.steps, base.Status, tar.Spec, tar.Generation, s, res, now)
	c.metrics.Observe(&status)
	if equality.Semantic.DeepEqual(status, base.Status) {
		return
	}
	obj := base.DeepCopy()
	obj.Status = status
	out, err := c.write(ctx, obj)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not publish the failed act in the status", "step", res.Checkpoint.Step)
		return
	}
	c.echo.Store(&out.ResourceVersion)
	c.lastWriteBegan = c.reconcileBegan
}

// suspendEvents emits an Event when the Suspended condition turns True or False.
func (c *Controller) suspendEvents(tar *v1alpha1.TrustAnchorRotation, prev, cur *v1alpha1.TrustAnchorRotationStatus) {
	was, is := meta.IsStatusConditionTrue(prev.Conditions, v1alpha1.ConditionSuspended), meta.IsStatusConditionTrue(cur.Conditions, v1alpha1.ConditionSuspended)
	switch {
	case is && !was:
		c.recorder.Event(tar, corev1.EventTypeNormal, ReasonSuspended, meta.FindStatusCondition(cur.Conditions, v1alpha1.ConditionSuspended).Message)
	case was && !is:
		c.recorder.Event(tar, corev1.EventTypeNormal, ReasonResumed, "spec.suspend is false: the operator acts again")
	}
}

// held reports whether the operator holds every act (the engine's and the repairs'): while
// spec.suspend is on, and while the spec holds a value it cannot use (steps.SpecErrors), since
// acting on part of a spec could act against the rest of the user's intent.
func held(tar *v1alpha1.TrustAnchorRotation, s *steps.State) bool {
	return tar.Spec.Suspend || len(s.SpecErrors) > 0
}

// specInvalidEvent emits a Warning Event when condition SpecInvalid turns True or names other
// fields, and a Normal one when it turns False.
func (c *Controller) specInvalidEvent(tar *v1alpha1.TrustAnchorRotation, prev, cur []metav1.Condition) {
	was, is := meta.FindStatusCondition(prev, v1alpha1.ConditionSpecInvalid), meta.FindStatusCondition(cur, v1alpha1.ConditionSpecInvalid)
	wasTrue := was != nil && was.Status == metav1.ConditionTrue
	switch {
	case is != nil && is.Status == metav1.ConditionTrue && (!wasTrue || was.Message != is.Message):
		c.recorder.Event(tar, corev1.EventTypeWarning, v1alpha1.ReasonSpecInvalid, is.Message)
	case wasTrue && (is == nil || is.Status != metav1.ConditionTrue):
		c.recorder.Event(tar, corev1.EventTypeNormal, v1alpha1.ReasonSpecValid, "the operator can use every field of the spec again")
	}
}
