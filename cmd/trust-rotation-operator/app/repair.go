package app

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Event reasons of the repairs made before the workflow advances.
const (
	ReasonPreviousAnchorRecreated = "PreviousAnchorRecreated"
	ReasonRotationSuperseded      = "RotationSuperseded"
)

// repair fixes, before the workflow advances, what must not wait for the workflow to reach a
// particular step, and reports whether it wrote something (the caller then re-observes):
//   - linkerd-previous-anchor deleted mid-rotation: recreated from the trust bundle at once,
//     so that no step renders a bundle without the previous anchor;
//   - the anchor renewed again mid-rotation: the in-flight anchor is recorded in the status
//     and the rotation restarts (steps.Supersede), before any step writes a bundle without it.
func (c *Controller) repair(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, s *steps.State, now time.Time) (bool, error) {
	log := klog.FromContext(ctx)
	if prev, ok := steps.RecreatePrevious(s); ok {
		if err := c.writer.WritePreviousAnchor(ctx, prev); err != nil {
			return false, err
		}
		c.recorder.Eventf(tar, corev1.EventTypeWarning, ReasonPreviousAnchorRecreated,
			"Secret %s was missing: recreated with anchor %s from ConfigMap %s/%s", s.Previous.Ref(), steps.Fingerprint(prev),
			s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
		log.Info("Recreated the previous-anchor Secret from the trust bundle", "secret", s.Previous.Ref(), "anchor", steps.Fingerprint(prev))
		return true, nil
	}
	obj := tar.DeepCopy()
	msg, ok := steps.Supersede(&obj.Status, s, now)
	if !ok {
		return false, nil
	}
	if _, err := c.write(ctx, obj); err != nil {
		return false, err
	}
	c.recorder.Eventf(tar, corev1.EventTypeWarning, ReasonRotationSuperseded, "%s", msg)
	log.Info("Rotation superseded", "message", msg)
	return true, nil
}
