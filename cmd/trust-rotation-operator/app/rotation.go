package app

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The driven TrustAnchorRotation, as the reconcile reads and writes it: the cached object or
// the one the operator last wrote, the other objects marked Ignored, and the object created
// when the install has none.

// current returns the TrustAnchorRotation to work from: the cached one, or the one we last
// wrote while the cache still shows the version that write replaced.
func (c *Controller) current() (*v1alpha1.TrustAnchorRotation, bool) {
	obj, ok, _ := c.rotation.GetStore().GetByKey(c.opts.RotationName)
	if !ok {
		return nil, false
	}
	cached := obj.(*v1alpha1.TrustAnchorRotation)
	if c.latest != nil && cached.ResourceVersion == c.replaced {
		return c.latest.DeepCopy(), true
	}
	c.latest = nil
	return cached.DeepCopy(), true
}

func (c *Controller) write(ctx context.Context, tar *v1alpha1.TrustAnchorRotation) (*v1alpha1.TrustAnchorRotation, error) {
	out, err := c.tars.UpdateStatus(ctx, tar, apply.FieldManager)
	if err != nil {
		return nil, fmt.Errorf("writing status of TrustAnchorRotation %s: %w", tar.Name, err)
	}
	c.latest, c.replaced = out.DeepCopy(), tar.ResourceVersion
	return out, nil
}

// markIgnored gives every TrustAnchorRotation but the driven one the condition Ignored=True,
// once, with a Warning event: a mesh has one trust anchor, so a second object would otherwise
// look like configuration that is in effect.
func (c *Controller) markIgnored(ctx context.Context) error {
	for _, obj := range c.rotation.GetStore().List() {
		tar := obj.(*v1alpha1.TrustAnchorRotation)
		if tar.Name == c.opts.RotationName || meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionIgnored) {
			continue
		}
		msg := fmt.Sprintf(v1alpha1.MessageNotDrivenFmt, c.opts.RotationName)
		out := tar.DeepCopy()
		meta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionIgnored, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNotDriven,
			Message: msg, ObservedGeneration: tar.Generation,
		})
		if _, err := c.tars.UpdateStatus(ctx, out, apply.FieldManager); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // the informer brings the new version, and a poke
			}
			return fmt.Errorf("marking TrustAnchorRotation %s ignored: %w", tar.Name, err)
		}
		c.recorder.Event(tar, corev1.EventTypeWarning, v1alpha1.ReasonNotDriven, msg)
		klog.FromContext(ctx).Info("Ignoring TrustAnchorRotation", "name", tar.Name, "driven", c.opts.RotationName)
	}
	return nil
}

// createRotation creates the TrustAnchorRotation when it does not exist (the chart creates it;
// this covers installs without it).
func (c *Controller) createRotation(ctx context.Context) error {
	tar := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: c.opts.RotationName}}
	_, err := c.tars.Create(ctx, tar, apply.FieldManager)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating TrustAnchorRotation %s: %w", c.opts.RotationName, err)
	}
	klog.FromContext(ctx).Info("Created TrustAnchorRotation", "name", c.opts.RotationName)
	return nil
}
