package app

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Event reasons of the repairs made before the workflow advances, and of the jump a trust
// anchor renewed again mid-rotation makes (the workflow's, see steps.ReasonRotationSuperseded).
const (
	ReasonPreviousAnchorRecreated = "PreviousAnchorRecreated"
	ReasonRotationSuperseded      = steps.ReasonRotationSuperseded
	ReasonTrustBundleDrifted      = "TrustBundleDrifted"
)

// repairInputs is where the repairs happen, after the State is read and before the engine
// advances: the previous anchor recreated (repair), the trust bundle rewritten after another
// writer changed it (repairBundle). Held (held), the repairs hold too: they write outside the
// status. It reports whether the bundle drifted (its message is published at once), and whether
// a repair wrote and the reconcile ends there (the write comes back as a change).
func (c *Controller) repairInputs(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, s *steps.State, cp workflow.Checkpoint) (drifted, repaired bool, err error) {
	if held(tar, s) {
		return false, false, nil
	}
	if done, err := c.repair(ctx, tar, s); done || err != nil {
		return false, true, err
	}
	drifted, err = c.repairBundle(ctx, tar, s, cp)
	return drifted, err != nil, err
}

// repair recreates linkerd-previous-anchor when it was deleted mid-rotation, from the trust
// bundle, before the workflow advances, so that no step renders a bundle without the previous
// anchor; it reports whether it wrote (the caller then re-observes).
//
// It writes outside the workflow, under no checkpoint, and that is on purpose. It restores one
// of the steps' inputs, not the rotation's progress: the certificate is chosen from the trust
// bundle alone (steps.RecreatePrevious), so the write is idempotent and a crash at any point
// loses nothing — the bundle still holds it, and the next operator writes the same — and it
// destroys nothing a step would have to avoid repeating. Nor does it move the workflow: the
// checkpoint's step observes the recreated Secret and goes on. Under a checkpoint it would have
// to be an act of the step at the checkpoint, whose token it would replace, and that token is
// what keeps the step's own destructive acts from repeating (a control-plane restart's
// restartedAt, restart-identity's replicas to scale back to). The rotation superseded by a
// newer anchor, which moves the workflow and once was handled here, is the workflow's jump
// (steps.ReasonRotationSuperseded).
func (c *Controller) repair(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, s *steps.State) (bool, error) {
	step := ""
	if tar.Status.Checkpoint != nil {
		step = tar.Status.Checkpoint.Step
	}
	prev, ok := steps.RecreatePrevious(s, step)
	if !ok {
		return false, nil
	}
	if err := c.writer.WritePreviousAnchor(ctx, prev); err != nil {
		return false, err
	}
	c.recorder.Eventf(tar, corev1.EventTypeWarning, ReasonPreviousAnchorRecreated,
		"Secret %s was missing: recreated with anchor %s from ConfigMap %s/%s", s.Previous.Ref(), steps.Fingerprint(prev),
		s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
	klog.FromContext(ctx).Info("Recreated the previous-anchor Secret from the trust bundle", "secret", s.Previous.Ref(), "anchor", steps.Fingerprint(prev))
	return true, nil
}

// repairBundle handles a trust bundle that another writer changed under the rotation
// (steps.CheckBundle), at the step of the checkpoint, and reports whether it found one: it
// rewrites the rotation's bundle (the same idempotent write as the steps'). A step that
// restarts pods starts over first — the workflow's jump (steps.ReasonStepStartedOver), saved
// by the engine in this reconcile — and the rewrite waits for the next, so that no crash can
// come between a rewritten bundle and a step still holding the token of pods that loaded the
// drifted one. It does not stop the reconcile: the step, observing the same snapshot, waits
// with the message that names the writer (or jumps), and the rotation publishes it; the next
// snapshot holds the rewritten bundle.
//
// The rewrite itself is outside any checkpoint, as the previous anchor's in repair: it restores
// an input of the steps to what the rotation's own steps would write, idempotently, and moves
// no checkpoint. Against a writer that keeps reverting it (an Argo CD self-heal), the rewrites
// back off, so that the two do not write in a loop as fast as the apiserver goes.
func (c *Controller) repairBundle(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, s *steps.State, cp workflow.Checkpoint) (bool, error) {
	drift, ok := steps.CheckBundle(c.steps, s, cp.Step)
	if !ok {
		c.bundleRewrites = 0
		return false, nil
	}
	log := klog.FromContext(ctx)
	if _, due := drift.StartsOver(cp.Step, cp.Token); due {
		log.Info("Step starts over before the trust bundle is rewritten", "step", cp.Step, "token", cp.Token)
		c.driftEvent(tar, cp.Step, drift.Message)
		return true, nil
	}
	if drift.Rewrite == "" {
		c.driftEvent(tar, cp.Step, drift.Message)
		return true, nil
	}
	if wait := c.bundleRewriteBackoff() - time.Since(c.bundleRewriteAt); c.bundleRewrites > 0 && wait > 0 {
		// Rewritten moments ago and changed again: rewrite once the back-off has passed.
		c.recheckAfter(time.Now().Add(wait))
		return true, nil
	}
	if err := c.writer.WriteTrustRoots(ctx, drift.Rewrite); err != nil {
		return true, err
	}
	c.bundleRewrites++
	c.bundleRewriteAt = time.Now()
	c.driftEvent(tar, cp.Step, drift.Message)
	log.Info("Rewrote the trust bundle another writer changed", "step", cp.Step, "rewrites", c.bundleRewrites, "message", drift.Message)
	return true, nil
}

// driftEvent records a TrustBundleDrifted Warning Event, unless the last one said the same: a
// writer that keeps reverting the bundle, or a drift the operator must not rewrite, would
// otherwise make one per reconcile.
func (c *Controller) driftEvent(tar *v1alpha1.TrustAnchorRotation, step, message string) {
	if key := step + ": " + message; key != c.lastDrift {
		c.lastDrift = key
		c.recorder.Eventf(tar, corev1.EventTypeWarning, ReasonTrustBundleDrifted, "step %s: %s", step, message)
	}
}

// bundleRewriteBackoff is how long after a rewrite of the trust bundle the next one waits, when
// it was changed again: 250ms doubling with each rewrite in a row, up to 30s.
func (c *Controller) bundleRewriteBackoff() time.Duration {
	return min(250*time.Millisecond<<min(max(c.bundleRewrites-1, 0), 7), 30*time.Second)
}
