package steps

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

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

// earlyRestartSteps are the steps between the bundle's expansion and the data plane's
// convergence on it, during which identity must not restart onto the expanded roots.
var earlyRestartSteps = map[string]bool{StepExpandTrustBundle: true, StepRefreshControlPlane: true, StepPropagateTrustRoots: true}

// IdentityRestartedEarly returns the identity pods ("namespace/name") that someone else restarted
// too early, at the given step: pods that started after this rotation expanded the trust bundle
// while the data plane has not converged on it, with the identity issuer already signed by the
// new anchor. Such a pod loaded the expanded roots, so it accepts the new-anchor issuer and signs
// new-anchor certificates — its own proxy's first — that the pods not yet on the expanded bundle
// do not trust. The operator cannot prevent it (a node drain, an eviction, an OOM kill,
// `kubectl rollout restart -n linkerd`), but reports it and shortens the window: it probes
// urgently (UrgentCertificates) and restarts the workloads behind first (planRestarts). nil
// when there are none, and from restart-identity on (the data plane then trusts the new anchor).
func (s *State) IdentityRestartedEarly(step string) []string {
	if !earlyRestartSteps[step] || !s.Rotating() || !s.IssuerOnCurrentAnchor() || s.TrustBundle.Done() || s.expandedAt().IsZero() {
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
		strings.Join(pods, ", "), s.Issuer.Ref(), short(s.Anchor.Fingerprint()), behind)
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
		if t, err := tokenTime(token); err == nil {
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
// with the old issuer and trust both anchors), and once the issuer is on the new anchor, a new
// identity pod loads it at start-up and its own proxy presents a new-anchor certificate at once,
// which the identity pods started before the expansion do not trust: those are then all deleted
// at once instead of rolled. The issuer renewed while a rolling restart is under way switches
// the restart to that at the next act, so old and new identity pods do not stay side by side.
// (With several replicas, the Deployment starts the first replacements while the last old pods
// are still being deleted: deletions are not atomic, and for that moment they overlap.)
// Identity pods that already started after the expansion (someone restarted identity) loaded
// the expanded roots: nothing to restart.
func observeRestartIdentity(s *State, token string) workflow.Decision {
	if replace, ok := podsToReplace(token); ok {
		return observeReplaceListed(s, replace)
	}
	d, found := s.ControlPlane[s.Config.IdentityDeployment]
	if !found || !d.Found {
		return workflow.Waiting("ControlPlaneMissing", fmt.Sprintf("Deployment %s/%s not found", s.Config.LinkerdNamespace, s.Config.IdentityDeployment))
	}
	old, going := s.identityOnOldRoots(token)
	// With no pod known, the template is restarted: whatever pods it gets start from it.
	restart := len(old) > 0 || len(d.Members) == 0
	switch {
	case len(old) > 0 && s.IssuerOnCurrentAnchor():
		return workflow.ActNeeded("ReplacingIdentityPods", fmt.Sprintf(
			"the identity issuer is already signed by the new trust anchor: replace the identity pods started before the trust bundle was expanded at once, not one by one (%s)",
			strings.Join(old, ", ")))
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

func orRolledOut(progress string) string {
	if progress == "" {
		return "rolled out"
	}
	return progress
}

func actRestartIdentity(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, token string) error {
		if replace, ok := podsToReplace(token); ok {
			left := remaining(replace, s.ControlPlane[s.Config.IdentityDeployment].Pods)
			return w.DeletePods(ctx, s.Config.LinkerdNamespace, left)
		}
		if old, _ := s.identityOnOldRoots(token); len(old) > 0 && s.IssuerOnCurrentAnchor() {
			return w.DeletePods(ctx, s.Config.LinkerdNamespace, old)
		}
		if s.ControlPlane[s.Config.IdentityDeployment].RestartedAt == token {
			return nil
		}
		return w.RestartDeployment(ctx, s.Config.LinkerdNamespace, s.Config.IdentityDeployment, token)
	}
}

func describeRestartIdentity(s *State) []string {
	old, _ := s.identityOnOldRoots("")
	switch {
	case len(old) > 0 && s.IssuerOnCurrentAnchor():
		return []string{fmt.Sprintf("delete the pods of Deployment %s/%s at once (the identity issuer is already on the new trust anchor): %s",
			s.Config.LinkerdNamespace, s.Config.IdentityDeployment, strings.Join(old, ", "))}
	case len(old) == 0 && len(s.ControlPlane[s.Config.IdentityDeployment].Members) > 0:
		return nil // every identity pod started after the expansion
	}
	return describeRestart(identityOnly)(s)
}

// replaceSep separates the stamp from the pods to replace in a restart-identity token written by
// an operator that decided once, at its first act, to replace identity's pods at once
// ("<stamp> replace a,b"). Such a checkpoint is still honoured: the pods it names are deleted.
const replaceSep = " replace "

// podsToReplace parses a replace token; ok is false for a plain restart token.
func podsToReplace(token string) (pods []string, ok bool) {
	_, list, ok := strings.Cut(token, replaceSep)
	if !ok {
		return nil, false
	}
	if list == "" {
		return nil, true
	}
	return strings.Split(list, ","), true
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
