package steps

import (
	"fmt"
	"strings"

	"github.com/linkerd/trust-rotation/workflow"
)

// The trust bundle changed under a rotation. Once expand-trust-bundle has written the expanded
// bundle, every later step relies on linkerd-identity-trust-roots holding the bundle the rotation
// wants at that point: a restarted injector stamps it on new pods, a restarted control plane
// loads it, identity verifies the issuer against it. A hand edit, a Helm upgrade or an Argo CD
// self-heal that rewrites the ConfigMap meanwhile would have identity restart onto roots without
// the new anchor (and then reject the new issuer), or pods injected with the old bundle while
// the issuer switches. So each of these steps checks the ConfigMap first (CheckBundle): on a
// drift the rotation waits, with a message naming the field manager that wrote it, while the
// operator rewrites it (RewriteBundle); a step whose act restarts pods starts over once it is
// rewritten, since the pods it restarted may have loaded the drifted bundle; and from
// propagate-trust-roots to retire-previous-anchor every meshed pod must still be on the
// expanded bundle, so pods injected with the drifted one count as behind again.

// BundleDrift is a trust bundle that does not hold what the rotation expects at a step.
type BundleDrift struct {
	// Reason and Message are the waiting decision's: the message names the field managers that
	// own ca-bundle.crt besides the operator.
	Reason, Message string
	// Rewrite is the bundle to write back, "" when the operator must not rewrite it (the
	// drifted bundle holds the anchor that signs the identity issuer, which the rotation's
	// bundle does not: a person must decide).
	Rewrite string
	// StartOver is true when the step restarts pods (its act has maybe run already): it starts
	// over with a fresh token (StartOverToken) before the bundle is rewritten — the workflow's
	// jump to the step itself, saved first, so that a crash between the two cannot leave the
	// step passing on pods that loaded the drifted bundle.
	StartOver bool
}

// StartsOver is the token the step, holding token, starts over with, and whether it must still:
// it acted already (it has a token) and has not started over since. The workflow jumps first,
// and the operator rewrites the bundle only once that jump is saved.
func (d BundleDrift) StartsOver(step, token string) (string, bool) {
	if !d.StartOver || token == "" {
		return "", false
	}
	fresh := StartOverToken(step, token)
	return fresh, fresh != token
}

// CheckBundle compares the trust-roots ConfigMap with the bundle the rotation expects at step.
// ok is false when it holds that bundle, when the step does not rely on it, or when the anchor
// or the previous anchor is unusable (the steps wait on that themselves).
func CheckBundle(rot *Ordered, s *State, step string) (drift BundleDrift, ok bool) {
	return checkBundle(s, rot.named(step))
}

func checkBundle(s *State, step Step) (drift BundleDrift, ok bool) {
	if !step.ReliesOnBundle || anchorProblem(s) != nil || previousProblem(s) != nil {
		return BundleDrift{}, false
	}
	if _, ok := s.superseded(step); ok {
		// The rotation jumps first: until its checkpoint records the in-flight anchor, the
		// bundle wanted here is the superseded rotation's, and rewriting it could drop that anchor.
		return BundleDrift{}, false
	}
	if retiresPreviousAnchor(step.Name) && (!s.Rotating() || s.FinishingOn() != nil) {
		// Retired (also when the anchor was renewed again since: the round finishes on the
		// retired one): the bundle is reduced at the next step.
		return BundleDrift{}, false
	}
	want := s.DesiredBundle()
	if want == "" || s.Bundle.Found && s.Bundle.Data == want {
		return BundleDrift{}, false
	}
	cm := fmt.Sprintf("ConfigMap %s/%s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
	which := "reduced"
	if s.Rotating() {
		which = "expanded"
	}
	var what string
	switch {
	case !s.Bundle.Found:
		what = cm + " was deleted"
	default:
		what = fmt.Sprintf("%s was changed by %s: it holds %s instead of the %s bundle %s",
			cm, describeWriters(s.Bundle), fingerprints(s.Bundle.Certs), which, describeAnchors(s))
	}
	if d := KeptAnchorProblem(s, want); d != nil && (previousOverwritten(s) || droppedSigner(s) == nil) {
		// The rotation's bundle is wrong, not (only) the ConfigMap: nothing to rewrite, and the
		// pods restarted meanwhile loaded a bundle that keeps what must be kept.
		return BundleDrift{Reason: d.Reason, Message: d.Message}, true
	}
	drift = BundleDrift{StartOver: step.ReloadsBundle}
	if lost := droppedSigner(s); lost != nil {
		drift.Reason = "TrustBundleDriftKept"
		drift.Message = fmt.Sprintf("%s; it trusts anchor %s, which signs the identity issuer in Secret %s, and rewriting it would drop that anchor: renew the issuer from %s, or restore the %s bundle",
			what, ShortFingerprint(Fingerprint(lost)), s.Issuer.Ref(), s.Anchor.Ref(), which)
		return drift, true
	}
	drift.Reason, drift.Rewrite = "TrustBundleDrifted", want
	drift.Message = fmt.Sprintf("%s; the rotation waits while the operator rewrites it, then counts the pods again: leave key %s to field manager %q (a Helm release, an Argo CD application or trust-manager that keeps writing it reverts the rotation)",
		what, TrustRootsKey, FieldManager)
	return drift, true
}

// describeWriters names who wrote the bundle: the field managers that own ca-bundle.crt besides
// the operator, from the ConfigMap's managedFields.
func describeWriters(b Bundle) string {
	others := b.OtherOwners()
	if len(others) == 0 {
		return "a writer its managedFields do not name (field manager " + FieldManager + " still owns " + TrustRootsKey + ")"
	}
	names := make([]string, len(others))
	for i, o := range others {
		names[i] = "field manager " + o.String()
	}
	return strings.Join(names, ", ")
}

// guardBundle wraps the Observe of a step that relies on the trust bundle: a step that restarts
// pods and acted already starts over (the workflow jumps to the step itself, see
// BundleDrift.StartOver); the step waits while the ConfigMap does not hold the rotation's
// bundle, and, between the data-plane propagation
// and the retirement of the previous anchor, while some meshed pod is not on the expanded
// bundle (injected while the bundle had drifted); otherwise it observes as before.
func guardBundle(step Step, observe func(*State, string) workflow.Decision) func(*State, string) workflow.Decision {
	return func(s *State, token string) (d workflow.Decision) {
		defer s.timedByAnchor(&d) // checkBundle passes anchorProblem first
		if drift, ok := checkBundle(s, step); ok {
			if fresh, due := drift.StartsOver(step.Name, token); due {
				return workflow.JumpTo(step.Name, ReasonStepStartedOver, fmt.Sprintf(
					"step %s starts over with a fresh token, for the pods it restarted may have loaded the changed trust bundle: %s",
					step.Name, drift.Message)).WithToken(fresh)
			}
			return workflow.Waiting(drift.Reason, drift.Message+s.identityScaledDownNote(step.Name, token))
		}
		// Once the round finishes on a retired anchor (FinishingOn), the desired bundle is the
		// reduced one: pods on the expanded bundle are where they should be.
		if step.NeedsExpandedPods && s.Rotating() && s.FinishingOn() == nil && anchorProblem(s) == nil && !s.TrustBundle.Done() {
			c := s.TrustBundle
			msg := fmt.Sprintf("Waiting for %d pod(s) to converge on the expanded trust bundle again: they were injected with another bundle (ConfigMap %s/%s changed after the data plane converged)",
				c.Target-c.Converged, s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
			if len(c.Behind) > 0 {
				msg += "; restart: " + c.describeBehind(5)
			}
			return workflow.Waiting("TrustBundleRegressed", msg+s.identityScaledDownNote(step.Name, token))
		}
		return observe(s, token)
	}
}
