package app

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
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
	var out *v1alpha1.TrustAnchorRotation
	err := apply.OnUnavailable(func() (err error) {
		out, err = c.tars.UpdateStatus(ctx, tar, apply.FieldManager)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("writing status of TrustAnchorRotation %s: %w", tar.Name, err)
	}
	c.latest, c.replaced = out.DeepCopy(), tar.ResourceVersion
	return out, nil
}

// reportRotations reports on every TrustAnchorRotation the operator watches. Every one but the
// driven one gets the condition Ignored=True, with a Warning event: a mesh has one trust anchor, so a second object would otherwise look like
// configuration that is in effect. A spec the operator could not use is reported on those too
// (condition SpecInvalid, its Event), and trust_rotation_spec_invalid is set for every object:
// a bad object is named wherever it is, and never hides the others (client.DecodeErrors).
func (c *Controller) reportRotations(ctx context.Context) error {
	seen := map[string]bool{}
	defer func() {
		// A deleted object's series goes; the others are set in place, never absent to a scrape.
		for name := range c.specInvalidSeries {
			if !seen[name] {
				c.metrics.specInvalid.DeleteLabelValues(name)
			}
		}
		c.specInvalidSeries = seen
	}()
	for _, obj := range c.rotation.GetStore().List() {
		tar := obj.(*v1alpha1.TrustAnchorRotation)
		errs := steps.SpecErrors(tar)
		c.metrics.specInvalid.WithLabelValues(tar.Name).Set(boolGauge(len(errs) > 0))
		seen[tar.Name] = true
		if tar.Name == c.opts.RotationName {
			continue
		}
		out := tar.DeepCopy()
		msg := fmt.Sprintf(v1alpha1.MessageNotDrivenFmt, c.opts.RotationName)
		setCondition(out, v1alpha1.ConditionIgnored, metav1.ConditionTrue, v1alpha1.ReasonNotDriven, msg)
		switch {
		case len(errs) > 0:
			setCondition(out, v1alpha1.ConditionSpecInvalid, metav1.ConditionTrue, v1alpha1.ReasonSpecInvalid, steps.SpecErrorsMessage(errs))
		case meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionSpecInvalid):
			setCondition(out, v1alpha1.ConditionSpecInvalid, metav1.ConditionFalse, v1alpha1.ReasonSpecValid, "the operator can use every field of the spec")
		}
		if equality.Semantic.DeepEqual(out.Status.Conditions, tar.Status.Conditions) || statusUndecodable(tar) {
			continue // a status that did not decode whole is not written over: it would lose its fields
		}
		if _, err := c.tars.UpdateStatus(ctx, out, apply.FieldManager); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // the informer brings the new version, and a poke
			}
			return fmt.Errorf("marking TrustAnchorRotation %s ignored: %w", tar.Name, err)
		}
		if !meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionIgnored) {
			c.recorder.Event(tar, corev1.EventTypeWarning, v1alpha1.ReasonNotDriven, msg)
			klog.FromContext(ctx).Info("Ignoring TrustAnchorRotation", "name", tar.Name, "driven", c.opts.RotationName)
		}
		c.specInvalidEvent(tar, tar.Status.Conditions, out.Status.Conditions)
	}
	return nil
}

// setCondition sets a condition of tar's status, observed at its generation.
func setCondition(tar *v1alpha1.TrustAnchorRotation, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&tar.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: tar.Generation,
	})
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

// statusUndecodable reports whether a field of tar's status did not decode (client.DecodeErrors):
// the operator then writes no status over it, which would drop that field.
func statusUndecodable(tar *v1alpha1.TrustAnchorRotation) bool {
	for _, e := range client.DecodeErrors(tar) {
		if strings.HasPrefix(e.Field, "status") {
			return true
		}
	}
	return false
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
