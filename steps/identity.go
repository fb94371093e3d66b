package steps

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// restartIdentityStep restarts identity onto the expanded roots once the data plane trusts the
// new anchor (see below).
func restartIdentityStep(w Writer) Step {
	return Step{
		Step: workflow.Step[*State]{
			Name: StepRestartIdentity, Phase: string(v1alpha1.PhasePropagatingTrustRoots),
			Doc: "Restart linkerd-identity now that every pod trusts the new anchor: it loads the expanded roots, so it will accept the renewed issuer; " +
				"with the issuer renewed already, identity is scaled to 0 and back instead, so that no old identity pod runs beside a new one, and issues no certificate meanwhile while those it issued stay valid.",
			Observe: observeRestartIdentity, Act: actRestartIdentity(w), Describe: describeRestartIdentity, Token: restartIdentityToken,
		},
		Assumes: AssumeControlPlaneRestarted, ReliesOnBundle: true, ReloadsBundle: true,
		CrossSignedSkips: "linkerd-identity, on the previous anchor's roots, accepts the renewed issuer through the bridge in its chain",
	}
}

// --- identity ---------------------------------------------------------------------------------
//
// Identity reads the trust roots once, when its container starts, and verifies every issuer it
// loads against them; its own proxy is meshed and trusts the roots it started with. So what
// matters of an identity pod is whether it started before or after this rotation expanded the
// trust bundle: before, it trusts the old anchor alone and keeps signing with an old-anchor
// issuer; after, it trusts both anchors and signs with whatever issuer the Secret holds — a
// new-anchor one as soon as the issuer is renewed.

// expandedAt is when this rotation expanded the trust bundle, as the status records it:
// status.checkpoint.startTime, saved before the rotation's first act (the expansion), in whole
// seconds. Zero when unknown.
func (s *State) expandedAt() time.Time { return s.RotationStart.Truncate(time.Second) }

// startedAfterExpansion reports whether a control-plane pod started after this rotation expanded
// the trust bundle, and so read the expanded roots. Pod start times have whole seconds: a pod
// started within the second of the expansion counts as started before it.
func (s *State) startedAfterExpansion(p ControlPlanePod) bool {
	at := s.expandedAt()
	return !at.IsZero() && p.Started.Truncate(time.Second).After(at)
}

// IdentityRestartedEarly returns the identity pods ("namespace/name") that someone else restarted
// too early, at the given step: pods that started after this rotation expanded the trust bundle
// while the data plane has not converged on it, with the identity issuer already signed by the
// new anchor. Such a pod loaded the expanded roots, so it accepts the new-anchor issuer and signs
// new-anchor certificates — its own proxy's first — that the pods not yet on the expanded bundle
// do not trust. The operator cannot prevent it (a node drain, an eviction, an OOM kill,
// `kubectl rollout restart -n linkerd`), but reports it and shortens the window: it probes
// urgently (UrgentCertificates) and restarts the workloads behind first (planRestarts). nil
// when there are none, and from restart-identity on (the data plane then trusts the new anchor).
func (s *State) IdentityRestartedEarly(rot *Ordered, step string) []string {
	if !rot.named(step).IdentityMustWait {
		return nil
	}
	return s.identityRestartedEarly()
}

// identityRestartedEarly is IdentityRestartedEarly at a step where identity must wait.
func (s *State) identityRestartedEarly() []string {
	if s.CrossSigned() || !s.Rotating() || s.previousAnchorExpired() || !s.IssuerOnCurrentAnchor() || s.TrustBundle.Done() || s.expandedAt().IsZero() {
		return nil
	}
	var out []string
	for _, p := range s.ControlPlane[s.Config.IdentityDeployment].Members {
		if s.startedAfterExpansion(p) {
			out = append(out, s.Config.LinkerdNamespace+"/"+p.Name)
		}
	}
	return out
}

// IdentityRestartedEarlyMessage says what IdentityRestartedEarly found, what it means and what
// the operator does about it; "" when pods is empty.
func (s *State) IdentityRestartedEarlyMessage(pods []string) string {
	if len(pods) == 0 {
		return ""
	}
	behind := s.TrustBundle.Target - s.TrustBundle.Converged
	msg := fmt.Sprintf("identity pod(s) %s started after the trust bundle was expanded, and the identity issuer in Secret %s is already signed by the new trust anchor %s: "+
		"identity may sign new-anchor certificates, which the %d meshed pod(s) not yet on the expanded trust bundle do not trust "+
		"(identity was restarted by someone else: a node drain, an eviction, an OOM kill, kubectl rollout restart); "+
		"the rotation goes on, probing live certificates urgently",
		strings.Join(pods, ", "), s.Issuer.Ref(), ShortFingerprint(s.Anchor.Fingerprint()), behind)
	if s.automaticRestarts() {
		return msg + ", and restarts the workloads not yet on the expanded bundle first, most pods behind first"
	}
	return msg + "; restart the workloads not yet on the expanded bundle now"
}

// identityOnOldRoots returns the identity pods that read the trust roots before the bundle was
// expanded: neither started after the expansion nor created from the template restart-identity
// restarted (its token); live ones, and those already terminating. When the expansion time is
// unknown, the token's own time stands in for it.
func (s *State) identityOnOldRoots(token string) (live, terminating []string) {
	ref := s.expandedAt()
	if ref.IsZero() {
		if t, err := stampTime(token); err == nil {
			ref = t.Truncate(time.Second)
		}
	}
	for _, p := range s.ControlPlane[s.Config.IdentityDeployment].Members {
		switch {
		case token != "" && p.RestartedAt == token, !ref.IsZero() && p.Started.Truncate(time.Second).After(ref):
		case p.Terminating:
			terminating = append(terminating, p.Name)
		default:
			live = append(live, p.Name)
		}
	}
	return live, terminating
}

// observeRestartIdentity restarts identity onto the expanded roots, deciding at each act how: a
// rolling restart while the identity issuer is still signed by the old anchor (the new pods sign
// with the old issuer and trust both anchors). Once the issuer is on the new anchor, a new
// identity pod loads it at start-up and its own proxy presents a new-anchor certificate at once,
// which the identity pods started before the expansion do not trust: identity is then scaled to
// 0, and back to its replicas once none of its pods is left, terminating ones included, so that
// no old identity pod ever runs beside a new one (see observeScaleIdentity). The issuer renewed
// while a rolling restart is under way switches the restart to that at the next act. Identity
// pods that already started after the expansion (someone restarted identity) loaded the
// expanded roots: nothing to restart.
func observeRestartIdentity(s *State, token string) workflow.Decision {
	if replace, ok := podsToReplace(token); ok {
		return observeReplaceListed(s, replace)
	}
	d, found := s.ControlPlane[s.Config.IdentityDeployment]
	if !found || !d.Found {
		return workflow.Waiting("ControlPlaneMissing", fmt.Sprintf("Deployment %s/%s not found", s.Config.LinkerdNamespace, s.Config.IdentityDeployment))
	}
	if sc, ok := parseIdentityScale(token); ok {
		return observeScaleIdentity(s, d, sc)
	}
	old, going := s.identityOnOldRoots(token)
	// With no pod known, the template is restarted: whatever pods it gets start from it.
	restart := len(old) > 0 || len(d.Members) == 0
	switch {
	case s.scaleIdentityDown(token):
		return workflow.ActNeeded("ScalingIdentityDown", fmt.Sprintf(
			"the identity issuer is already signed by the new trust anchor: scale Deployment %s/%s to 0 and back to %d replica(s) once none of its pods is left, "+
				"so that no identity pod started before the trust bundle was expanded (%s) runs beside one started after; %s",
			d.Namespace, d.Name, d.Replicas, strings.Join(old, ", "), identityDownNote))
	case restart && (token == "" || d.RestartedAt != token):
		return workflow.ActNeeded("RestartNeeded", "restart Deployment(s) "+s.Config.IdentityDeployment)
	case !d.RolledOut || d.RunningPods < int(d.Replicas):
		return workflow.Waiting("ControlPlaneRollingOut", fmt.Sprintf("Waiting for the rollout of Deployment %s/%s: %s (%d of %d pods running)",
			d.Namespace, d.Name, orRolledOut(d.Progress), d.RunningPods, d.Replicas))
	case len(old)+len(going) > 0:
		return workflow.Waiting("ControlPlaneRollingOut", fmt.Sprintf("Waiting for the identity pods started before the trust bundle was expanded to go: %s",
			strings.Join(append(old, going...), ", ")))
	case !restart && token == "":
		return workflow.Completed("IdentityOnExpandedRoots", fmt.Sprintf("every pod of Deployment %s/%s started after the trust bundle was expanded: %s",
			d.Namespace, d.Name, strings.Join(d.Pods, ", ")))
	}
	return workflow.Completed("ControlPlaneRestarted", "restarted and rolled out: "+s.Config.IdentityDeployment)
}

// identityDownNote says what scaling identity to 0 costs.
const identityDownNote = "identity issues no certificate meanwhile, and every certificate it issued stays valid (24h by default)"

// scaleIdentityDown reports whether restart-identity, under a token that is no scale token,
// must scale identity down: the issuer is on the new anchor and identity pods that read the
// roots before the expansion are alive.
func (s *State) scaleIdentityDown(token string) bool {
	old, _ := s.identityOnOldRoots(token)
	return len(old) > 0 && s.IssuerOnCurrentAnchor()
}

func orRolledOut(progress string) string {
	if progress == "" {
		return "rolled out"
	}
	return progress
}

func actRestartIdentity(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, token string) error {
		ns, name := s.Config.LinkerdNamespace, s.Config.IdentityDeployment
		if replace, ok := podsToReplace(token); ok {
			left := remaining(replace, s.ControlPlane[name].Pods)
			return w.DeletePods(ctx, ns, left)
		}
		if sc, ok := parseIdentityScale(token); ok {
			if sc.up {
				return w.ScaleDeployment(ctx, ns, name, sc.replicas)
			}
			return w.ScaleDeployment(ctx, ns, name, 0)
		}
		if s.scaleIdentityDown(token) {
			// restartIdentityToken records the replicas before such an act.
			return fmt.Errorf("token %q records no replica count of Deployment %s/%s to scale back to", token, ns, name)
		}
		if s.ControlPlane[name].RestartedAt == token {
			return nil
		}
		return w.RestartDeployment(ctx, ns, name, token)
	}
}

func describeRestartIdentity(s *State) []string {
	d := s.ControlPlane[s.Config.IdentityDeployment]
	old, _ := s.identityOnOldRoots("")
	switch {
	case len(old) > 0 && s.IssuerOnCurrentAnchor():
		return []string{fmt.Sprintf("scale Deployment %s/%s to 0 (the identity issuer is already on the new trust anchor), and once none of its pods (%s) is left back to %d replica(s): %s",
			s.Config.LinkerdNamespace, s.Config.IdentityDeployment, strings.Join(old, ", "), d.Replicas, identityDownNote)}
	case len(old) == 0 && len(d.Members) > 0:
		return nil // every identity pod started after the expansion
	}
	return describeRestart(identityOnly)(s)
}

// --- scaling identity to 0 and back ---------------------------------------------------------
//
// A restart-identity token "<stamp> scale N" records that identity is scaled to 0 and must be
// scaled back to N, its replicas before the scale-down; "<stamp> scale N up" that no identity
// pod was left and identity is scaled back to N. The token is saved before each act, so an
// operator killed anywhere in between scales back to N — never to 0, never down twice.

// identityScale is a parsed scale token.
type identityScale struct {
	stamp    string
	replicas int32
	// up: no identity pod was left; identity is scaled back to replicas.
	up bool
}

// parseIdentityScale parses a scale token; ok is false for any other token.
func parseIdentityScale(token string) (sc identityScale, ok bool) {
	t, _ := ParseActToken(token)
	sc.replicas, sc.up, ok = t.Scale()
	if !ok {
		return identityScale{}, false
	}
	sc.stamp = t.Stamp
	return sc, true
}

// restartIdentityToken is restart-identity's Token: before the act that scales identity down it
// records identity's replicas ("<stamp> scale N"), and before the act that scales it back up
// that no identity pod is left ("<stamp> scale N up"). Any other act keeps the token.
func restartIdentityToken(s *State, token string) string {
	if _, ok := podsToReplace(token); ok {
		return token
	}
	d := s.ControlPlane[s.Config.IdentityDeployment]
	if sc, ok := parseIdentityScale(token); ok {
		if !sc.up && d.Replicas == 0 && len(d.Members) == 0 {
			return scaleToken(sc.stamp, sc.replicas, true).String()
		}
		return token
	}
	if s.scaleIdentityDown(token) {
		return scaleToken(token, d.Replicas, false).String()
	}
	return token
}

// IdentityScaleToRestore returns the replicas to scale linkerd-identity back to when the
// checkpoint is restart-identity's with identity scaled to 0 by it: for a rotation that leaves
// the step before the scale-up (a newer anchor supersedes it).
func IdentityScaleToRestore(s *State, step, token string) (int32, bool) {
	sc, ok := parseIdentityScale(token)
	if step != StepRestartIdentity || !ok {
		return 0, false
	}
	if d := s.ControlPlane[s.Config.IdentityDeployment]; !d.Found || d.Replicas != 0 || sc.replicas == 0 {
		return 0, false
	}
	return sc.replicas, true
}

// identityScaledDownNote completes the message of a restart-identity that waits on the trust
// bundle while it holds identity at 0: "" otherwise.
func (s *State) identityScaledDownNote(step, token string) string {
	sc, ok := parseIdentityScale(token)
	if step != StepRestartIdentity || !ok || s.ControlPlane[s.Config.IdentityDeployment].Replicas != 0 {
		return ""
	}
	return fmt.Sprintf("; Deployment %s/%s stays scaled to 0 until then (back to %d replica(s) after): %s",
		s.Config.LinkerdNamespace, s.Config.IdentityDeployment, sc.replicas, identityDownNote)
}

// StartOverToken is the token a step starts over with when the trust bundle was rewritten under
// it (BundleDrift.StartOver): none, but for restart-identity with identity scaled down, whose
// replicas to scale back to must not be lost; it scales identity to 0 again, for pods started
// meanwhile may have loaded the rewritten bundle.
func StartOverToken(step, token string) string {
	sc, ok := parseIdentityScale(token)
	if step != StepRestartIdentity || !ok {
		return ""
	}
	return scaleToken(sc.stamp, sc.replicas, false).String()
}

// observeScaleIdentity follows a scale token: identity is scaled to 0, then — once no identity
// pod is left, terminating ones included — back to the replicas recorded before.
func observeScaleIdentity(s *State, d Deployment, sc identityScale) workflow.Decision {
	ref := d.Namespace + "/" + d.Name
	switch {
	case !sc.up && d.Replicas > 0:
		return workflow.ActNeeded("ScalingIdentityDown", fmt.Sprintf(
			"the identity issuer is already signed by the new trust anchor: scale Deployment %s to 0 and back to %d replica(s) once none of its pods is left, "+
				"so that no identity pod started before the trust bundle was expanded runs beside one started after; %s", ref, sc.replicas, identityDownNote))
	case !sc.up && len(d.Members) > 0:
		var names []string
		for _, p := range d.Members {
			names = append(names, p.Name)
		}
		return workflow.Waiting("IdentityScalingDown", fmt.Sprintf(
			"Waiting for the pods of Deployment %s, scaled to 0, to go before scaling it back to %d replica(s): %s; %s",
			ref, sc.replicas, strings.Join(names, ", "), identityDownNote))
	case !sc.up || d.Replicas == 0 && sc.replicas > 0:
		return workflow.ActNeeded("ScalingIdentityUp", fmt.Sprintf(
			"no pod of Deployment %s is left: scale it back to %d replica(s); every identity pod then starts on the expanded trust roots", ref, sc.replicas))
	case !d.RolledOut || d.RunningPods < int(d.Replicas):
		return workflow.Waiting("ControlPlaneRollingOut", fmt.Sprintf("Waiting for Deployment %s, scaled back to %d replica(s): %s (%d of %d pods running)",
			ref, d.Replicas, orRolledOut(d.Progress), d.RunningPods, d.Replicas))
	}
	return workflow.Completed("ControlPlaneRestarted", fmt.Sprintf("scaled Deployment %s to 0 and back to %d replica(s): every identity pod started on the expanded trust roots", ref, d.Replicas))
}

// podsToReplace parses a replace token, written by an operator that decided once, at its first
// act, to replace identity's pods at once ("<stamp> replace a,b"); ok is false for any other
// token. Such a checkpoint is still honoured: the pods it names are deleted. Identity is now
// scaled to 0 and back instead (a scale token), which leaves no moment of overlap.
func podsToReplace(token string) (pods []string, ok bool) {
	t, _ := ParseActToken(token)
	return t.PodsToReplace()
}

// remaining returns the pods of the list that are still alive.
func remaining(list, alive []string) []string {
	set := map[string]bool{}
	for _, p := range alive {
		set[p] = true
	}
	var out []string
	for _, p := range list {
		if set[p] {
			out = append(out, p)
		}
	}
	return out
}

// observeReplaceListed follows a replace token: done once every pod it names is gone and the
// Deployment's replacements run.
func observeReplaceListed(s *State, replace []string) workflow.Decision {
	d, found := s.ControlPlane[s.Config.IdentityDeployment]
	if !found || !d.Found {
		return workflow.Waiting("ControlPlaneMissing", fmt.Sprintf("Deployment %s/%s not found", s.Config.LinkerdNamespace, s.Config.IdentityDeployment))
	}
	if left := remaining(replace, d.Pods); len(left) > 0 {
		return workflow.ActNeeded("ReplacingIdentityPods", fmt.Sprintf(
			"the identity issuer was renewed before the data plane trusted the new anchor: replace the identity pods at once (%s)", strings.Join(left, ", ")))
	}
	if !d.RolledOut || d.RunningPods < int(d.Replicas) {
		return workflow.Waiting("ControlPlaneRollingOut", fmt.Sprintf("Waiting for Deployment %s/%s to replace its pods: %d of %d running",
			d.Namespace, d.Name, d.RunningPods, d.Replicas))
	}
	return workflow.Completed("ControlPlaneRestarted", "replaced the identity pods: "+strings.Join(replace, ", "))
}
