package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // maintenance windows name IANA time zones; the operator image has no zoneinfo

	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Annotations of automatic data-plane restarts.
const (
	// AdditionalEnvAnnotation is Linkerd's pod-template annotation: a JSON list of EnvVar added
	// to the proxy at injection.
	AdditionalEnvAnnotation = "config.linkerd.io/proxy-additional-env"
	// MaxRefreshEnv bounds the proxy's certificate refresh interval.
	MaxRefreshEnv = "LINKERD2_PROXY_IDENTITY_MAX_REFRESH"
	// RefreshOverrideAnnotation marks a pod template whose proxy-additional-env the operator
	// changed, with what it set and what was there before, so that the final restart removes
	// exactly what it added.
	RefreshOverrideAnnotation = "trust.linkerd.io/refresh-override"
	// EvictedForAnnotation is set on a workload's metadata (not its pod template) to the token of
	// the step that evicts its pods: the record that the workload is being restarted by eviction.
	EvictedForAnnotation = "trust.linkerd.io/evicted-for"
)

// WorkloadRef names a workload: "namespace/Kind/name".
type WorkloadRef struct{ Namespace, Kind, Name string }

func (w WorkloadRef) String() string { return w.Namespace + "/" + w.Kind + "/" + w.Name }

// ParseWorkload parses "namespace/Kind/name".
func ParseWorkload(key string) (WorkloadRef, bool) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return WorkloadRef{}, false
	}
	return WorkloadRef{parts[0], parts[1], parts[2]}, true
}

// Restartable reports whether the operator can restart the workload: Deployments (and through
// them their ReplicaSets' pods), StatefulSets and DaemonSets.
func (w WorkloadRef) Restartable() bool {
	switch w.Kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		return true
	}
	return false
}

// Workload is what automatic restarts need of a workload that owns meshed pods.
type Workload struct {
	WorkloadRef
	// Found is false when the workload object is not in the operator's cache.
	Found bool
	// OutOfScope is true when the workload is in a namespace where the operator may not restart
	// workloads (it runs with --restart-namespaces, which does not list it): it is not watched,
	// and the user restarts it.
	OutOfScope bool
	// Selected is true when the spec's namespace and workload selectors select it.
	Selected bool
	// RestartedAt is the pod template's kubectl.kubernetes.io/restartedAt.
	RestartedAt string
	// EvictedFor is the workload's trust.linkerd.io/evicted-for annotation.
	EvictedFor string
	// AdditionalEnv is the pod template's config.linkerd.io/proxy-additional-env ("" when absent).
	AdditionalEnv string
	// RefreshOverride is the pod template's trust.linkerd.io/refresh-override ("" when absent).
	RefreshOverride string
	// RolledOut is true when the workload's latest template is fully rolled out and available.
	RolledOut bool
	// Progress says what the rollout waits for, when it is not rolled out.
	Progress string
	// Failed says why the rollout failed (progress deadline exceeded), when it did.
	Failed string
	// NoRollout says why a change of its pod template does not replace its pods ("" when it
	// does): a StatefulSet or DaemonSet with updateStrategy OnDelete, or a StatefulSet whose
	// rolling update has a partition (pods below it stay on their revision). Such a workload is
	// restarted by eviction whatever spec.dataPlaneRestart.method says, as the pods a template
	// change would never replace are exactly what a rotation needs replaced.
	NoRollout string
	// Settling says, after the operator evicted pods of the workload, that its controller's
	// status has not changed since: the cached status predates the eviction, so RolledOut says
	// nothing about it yet ("" once the status moved, or when nothing was evicted).
	Settling string
	// BundleBehind are the names of its alive, not terminating, pods that were not injected with
	// the desired trust bundle.
	BundleBehind []string
	// Pods are the names of its alive, not terminating, meshed pods, and Created when each was
	// created.
	Pods    []string
	Created map[string]time.Time
	// Running counts its running, not terminating, pods, Terminating its terminating ones, and
	// Replicas is how many it wants.
	Running, Terminating int
	Replicas             int32
	// PDB names the PodDisruptionBudget covering its pods that allows the fewest disruptions,
	// and DisruptionsAllowed what it allows; PDB is "" when none covers them.
	PDB                string
	DisruptionsAllowed int32
}

// IssuerCertificate is what automatic issuer renewal needs of the identity issuer's
// cert-manager Certificate.
type IssuerCertificate struct {
	Namespace, Name string
	// Found is false when the Certificate does not exist; Err says why it could not be read.
	Found bool
	Err   string
	// Issuing is true while the Certificate's Issuing condition is True (a renewal is under way).
	Issuing bool
	// Revision is status.revision: cert-manager increments it at every issuance.
	Revision int
}

// userSteps are the steps that wait for the user unless the spec automates them.
var userSteps = map[string]bool{StepPropagateTrustRoots: true, StepWaitForIdentityIssuer: true, StepRenewWorkloadCertificates: true, StepRemoveOldTrustRoots: true}

// WaitsForUser reports whether the step waits for the user (restarts, the issuer renewal) unless
// spec.dataPlaneRestart or spec.identityIssuerRenewal automates it.
func WaitsForUser(step string) bool { return userSteps[step] }

// AutomatedBy says what the operator does at a step that waits for the user (WaitsForUser) when
// the spec automates the user's part, or "" when the user does it.
func AutomatedBy(step string, spec v1alpha1.TrustAnchorRotationSpec) string {
	switch {
	case step == StepWaitForIdentityIssuer && spec.IdentityIssuerRenewal == v1alpha1.Automatic:
		return "the operator renews the identity issuer, as cmctl renew does (spec.identityIssuerRenewal: Automatic)"
	case step == StepWaitForIdentityIssuer || !userSteps[step] || spec.DataPlaneRestart.Policy != v1alpha1.Automatic:
		return ""
	}
	method := spec.DataPlaneRestart.Method
	if method == "" {
		method = v1alpha1.RolloutRestart
	}
	what := "restarts the workloads whose pods are behind"
	if step == StepRenewWorkloadCertificates && method != v1alpha1.Evict {
		what = "restarts the workloads whose proxies have not refreshed onto the new anchor's issuer within twice the refresh interval"
	}
	return fmt.Sprintf("the operator %s (spec.dataPlaneRestart: Automatic, %s)", what, method)
}

// automaticRestarts reports whether the operator restarts workloads itself.
func (s *State) automaticRestarts() bool {
	return s.Spec.DataPlaneRestart.Policy == v1alpha1.Automatic
}

// evicts reports whether the operator restarts w by evicting its pods: the Evict method, or a
// workload whose pods a template change does not replace (NoRollout).
func (s *State) evicts(w *Workload) bool {
	return s.restartMethod() == v1alpha1.Evict || w.NoRollout != ""
}

func (s *State) restartMethod() v1alpha1.RestartMethod {
	if s.Spec.DataPlaneRestart.Method == "" {
		return v1alpha1.RolloutRestart
	}
	return s.Spec.DataPlaneRestart.Method
}

// RefreshOverrides counts the workloads whose pod template carries the operator's accelerated
// refresh interval: the override is in effect while it is not zero.
func (s *State) RefreshOverrides() int {
	n := 0
	for _, w := range s.Workloads {
		if w.RefreshOverride != "" {
			n++
		}
	}
	return n
}

// restartPurpose is what a data-plane restart is for.
type restartPurpose int

const (
	// propagate: pods must be injected with the expanded bundle; the restart adds the
	// accelerated refresh interval to the pod template.
	propagate restartPurpose = iota
	// renew: pods must present certificates that chain to the new anchor (the fallback restart).
	renew
	// reduce: pods must be injected with the reduced bundle; the restart removes the
	// accelerated refresh interval.
	reduce
)

// restartPlan is what automatic restarts would do now, decided from the snapshot alone, so that
// Observe, Act and Describe agree.
type restartPlan struct {
	// start are the workloads to restart now (within the budget and a maintenance window).
	start []*Workload
	// evict are workloads already being restarted by eviction under this token whose remaining
	// pods a PodDisruptionBudget now lets go.
	evict []*Workload
	// inProgress are workloads restarted under this token whose restart has not completed.
	inProgress []*Workload
	// failed are messages about rollouts that failed.
	failed []string
	// blocked are messages about evictions a PodDisruptionBudget does not allow.
	blocked []string
	// waiting are workloads behind that wait for the budget or a maintenance window.
	waiting int
	// closed says when the next maintenance window opens, when none is open now.
	closed string
	// unrestartable are workloads behind that the operator cannot restart (bare pods, Jobs...).
	unrestartable []string
	// notSelected are workloads behind that the selectors leave to the user.
	notSelected []string
	// outOfScope are workloads behind in namespaces where the operator may not restart.
	outOfScope []string
	// stuck are workloads restarted under this token and rolled out, yet still behind.
	stuck []string
}

// behindWorkloads returns the keys of the workloads that must be restarted for the purpose.
func (s *State) behindWorkloads(p restartPurpose) []string {
	set := map[string]bool{}
	switch p {
	case propagate, reduce:
		for k, w := range s.Workloads {
			if len(w.BundleBehind) > 0 || p == reduce && w.RefreshOverride != "" {
				set[k] = true
			}
		}
		for _, b := range s.TrustBundle.Behind {
			set[b.Workload] = true
		}
	case renew:
		for _, b := range s.Certificates.Behind {
			set[b.Workload] = true
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isControlPlane reports whether the workload is one of the control-plane Deployments, which
// the rotation's own steps restart.
func (s *State) isControlPlane(w WorkloadRef) bool {
	if w.Namespace != s.Config.LinkerdNamespace || w.Kind != "Deployment" {
		return false
	}
	for _, n := range s.Config.ControlPlane() {
		if n == w.Name {
			return true
		}
	}
	return false
}

// planRestarts decides which workloads to restart now, under the step's token.
func (s *State) planRestarts(p restartPurpose, token string) restartPlan {
	var plan restartPlan
	dp := s.Spec.DataPlaneRestart
	maxAll, maxNS := int(dp.MaxConcurrent), int(dp.MaxConcurrentPerNamespace)
	if maxAll < 1 {
		maxAll = 5
	}
	if maxNS < 1 {
		maxNS = 1
	}
	ours := func(w *Workload) bool {
		evict := s.evicts(w)
		return token != "" && (!evict && w.RestartedAt == token || evict && w.EvictedFor == token)
	}
	perNS := map[string]int{}
	// Every restart of this step still rolling counts against the budget, including those whose
	// pods already converged: their rollout has not finished.
	behind := s.behindWorkloads(p)
	isBehind := map[string]bool{}
	for _, k := range behind {
		isBehind[k] = true
	}
	keys := make([]string, 0, len(s.Workloads))
	for k := range s.Workloads {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w := s.Workloads[k]
		if isBehind[k] || !w.Found || s.isControlPlane(w.WorkloadRef) {
			continue
		}
		if ours(w) && !w.restarted(s.evicts(w)) || !ours(w) && s.restarting(w) {
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
		}
	}
	var candidates []*Workload
	for _, key := range behind {
		ref, ok := ParseWorkload(key)
		if !ok || s.isControlPlane(ref) {
			continue
		}
		if !ref.Restartable() {
			plan.unrestartable = append(plan.unrestartable, key)
			continue
		}
		w, ok := s.Workloads[key]
		if ok && w.OutOfScope {
			plan.outOfScope = append(plan.outOfScope, key)
			continue
		}
		if !ok || !w.Found {
			plan.unrestartable = append(plan.unrestartable, key+" (not found)")
			continue
		}
		if !w.Selected {
			plan.notSelected = append(plan.notSelected, key)
			continue
		}
		switch {
		case !ours(w) && s.restarting(w):
			// Restarting already, by an earlier step of this rotation (its eviction or rollout
			// had not settled when its pods converged) or by someone's rollout restart: it
			// counts against the budget, and is restarted again only if still behind once
			// settled.
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
		case !ours(w):
			candidates = append(candidates, w)
		case w.Failed != "":
			plan.failed = append(plan.failed, fmt.Sprintf("the rollout of %s failed: %s", key, w.Failed))
		case s.evicts(w) && len(evictable(p, w, token)) > 0:
			// Being evicted: more pods to evict, when the budget of its PDB lets them go and the
			// status shows the previous eviction settled. A PodDisruptionBudget allows the next
			// disruption as soon as the replacement pod is ready, often before the Deployment's
			// status shows it; evicted then, the workload's settling mark would be taken from a
			// status that is still catching up with the previous eviction, and the next status,
			// rolled out for that one, would end the mark while this eviction is not yet shown:
			// the next workload would start beside it, over the per-namespace budget.
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
			switch {
			case w.PDB != "" && w.DisruptionsAllowed <= 0:
				plan.blocked = append(plan.blocked, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption of %s (%d pod(s) left to evict)",
					w.Namespace, w.PDB, key, len(evictable(p, w, token))))
			case w.RolledOut && w.Settling == "":
				plan.evict = append(plan.evict, w)
			}
		case !w.restarted(s.evicts(w)):
			plan.inProgress = append(plan.inProgress, w)
			perNS[w.Namespace]++
		default:
			plan.stuck = append(plan.stuck, key)
		}
	}
	if len(plan.failed) > 0 {
		// A failed rollout parks the rotation: nothing new starts until it is fixed.
		plan.evict, plan.waiting = nil, len(candidates)
		return plan
	}
	if len(candidates) == 0 {
		return plan
	}
	if p == propagate && len(s.IdentityRestartedEarly(StepPropagateTrustRoots)) > 0 {
		// Identity restarted early signs certificates the pods behind do not trust: the
		// workloads with the most of them go first, so that their number drops fastest.
		sort.SliceStable(candidates, func(i, j int) bool { return len(candidates[i].BundleBehind) > len(candidates[j].BundleBehind) })
	}
	if open, next := s.maintenanceWindowOpen(); !open {
		plan.closed, plan.waiting = next, len(candidates)
		return plan
	}
	running := len(plan.inProgress)
	for _, w := range candidates {
		if running >= maxAll || perNS[w.Namespace] >= maxNS {
			plan.waiting++
			continue
		}
		if s.evicts(w) && w.PDB != "" && w.DisruptionsAllowed <= 0 {
			plan.blocked = append(plan.blocked, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption of %s", w.Namespace, w.PDB, w.String()))
			plan.waiting++
			continue
		}
		plan.start = append(plan.start, w)
		running++
		perNS[w.Namespace]++
	}
	return plan
}

// maintenanceWindowOpen reports whether an automatic restart may start now and, when not, when
// the next window opens (or why none can).
func (s *State) maintenanceWindowOpen() (bool, string) {
	windows := s.Spec.DataPlaneRestart.MaintenanceWindows
	if len(windows) == 0 {
		return true, ""
	}
	var next time.Time
	for i, mw := range windows {
		open, opens, err := windowOpen(mw, s.Now)
		if err != nil {
			return false, fmt.Sprintf("maintenance window %d is invalid: %v", i, err)
		}
		if open {
			return true, ""
		}
		if next.IsZero() || opens.Before(next) {
			next = opens
		}
	}
	if next.IsZero() {
		return false, "no maintenance window ever opens"
	}
	s.RecheckAt(next)
	return false, "the next maintenance window opens at " + next.UTC().Format(time.RFC3339)
}

var weekdays = map[v1alpha1.Weekday]time.Weekday{"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday,
	"Wed": time.Wednesday, "Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday}

// windowOpen reports whether the window is open at now and, when not, when it next opens.
func windowOpen(mw v1alpha1.MaintenanceWindow, now time.Time) (bool, time.Time, error) {
	loc := time.UTC
	if mw.TimeZone != "" {
		l, err := time.LoadLocation(mw.TimeZone)
		if err != nil {
			return false, time.Time{}, fmt.Errorf("time zone %q: %w", mw.TimeZone, err)
		}
		loc = l
	}
	start, err := clockMinutes(mw.Start)
	if err != nil {
		return false, time.Time{}, err
	}
	end, err := clockMinutes(mw.End)
	if err != nil {
		return false, time.Time{}, err
	}
	length := end - start
	if length <= 0 {
		length += 24 * 60
	}
	days := map[time.Weekday]bool{}
	for _, d := range mw.Days {
		wd, ok := weekdays[d]
		if !ok {
			return false, time.Time{}, fmt.Errorf("unknown day %q", d)
		}
		days[wd] = true
	}
	local := now.In(loc)
	var next time.Time
	// The window that opened yesterday may still be open; look a week ahead for the next one.
	for i := -1; i <= 7; i++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+i, 0, 0, 0, 0, loc)
		if len(days) > 0 && !days[day.Weekday()] {
			continue
		}
		opens := day.Add(time.Duration(start) * time.Minute)
		closes := opens.Add(time.Duration(length) * time.Minute)
		if !now.Before(opens) && now.Before(closes) {
			return true, time.Time{}, nil
		}
		if opens.After(now) && (next.IsZero() || opens.Before(next)) {
			next = opens
		}
	}
	return false, next, nil
}

func clockMinutes(hhmm string) (int, error) {
	h, m, ok := strings.Cut(hhmm, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q is not HH:MM", hhmm)
	}
	return hh*60 + mm, nil
}

// describe renders a plan's situation for the blocking message.
func (plan restartPlan) describe() string {
	var parts []string
	names := func(ws []*Workload) string {
		var out []string
		for i, w := range ws {
			if i == 5 {
				out = append(out, fmt.Sprintf("and %d more", len(ws)-5))
				break
			}
			p := w.String()
			switch {
			case w.Settling != "":
				p += " (" + w.Settling + ")"
			case w.Progress != "" && !w.RolledOut:
				p += " (" + w.Progress + ")"
			}
			out = append(out, p)
		}
		return strings.Join(out, ", ")
	}
	list := func(keys []string) string {
		if len(keys) > 5 {
			return strings.Join(keys[:5], ", ") + fmt.Sprintf(" and %d more", len(keys)-5)
		}
		return strings.Join(keys, ", ")
	}
	if len(plan.failed) > 0 {
		parts = append(parts, strings.Join(plan.failed, "; ")+"; fix it (the rotation resumes once it rolls out)")
	}
	if len(plan.blocked) > 0 {
		parts = append(parts, strings.Join(plan.blocked, "; "))
	}
	if len(plan.inProgress) > 0 {
		parts = append(parts, "restarting "+names(plan.inProgress))
	}
	if plan.waiting > 0 {
		w := fmt.Sprintf("%d workload(s) wait to be restarted", plan.waiting)
		if plan.closed != "" {
			w += ": " + plan.closed
		}
		parts = append(parts, w)
	}
	if len(plan.unrestartable) > 0 {
		parts = append(parts, "pods without a restartable owner (restart or replace them yourself): "+list(plan.unrestartable))
	}
	if len(plan.notSelected) > 0 {
		parts = append(parts, "not selected by spec.dataPlaneRestart (restart them yourself): "+list(plan.notSelected))
	}
	if len(plan.outOfScope) > 0 {
		parts = append(parts, "outside the namespaces the operator may restart in (--restart-namespaces; restart them yourself): "+list(plan.outOfScope))
	}
	if len(plan.stuck) > 0 {
		parts = append(parts, "restarted but still behind: "+list(plan.stuck))
	}
	return strings.Join(parts, "; ")
}

// observeRestarts is the Observe of the automatic restarts, once the step knows pods are behind.
func (s *State) observeRestarts(p restartPurpose, token, behind string) workflow.Decision {
	if s.Workloads == nil {
		return workflow.Waiting("WorkloadsUnavailable", behind+"; automatic restarts wait for the operator's view of the workloads: "+s.WorkloadsProblem)
	}
	plan := s.planRestarts(p, token)
	if len(plan.failed) == 0 && (len(plan.start) > 0 || len(plan.evict) > 0) {
		return workflow.ActNeeded(ReasonRestartingWorkloads, describeStarts(s, plan, p, token))
	}
	reason := "WorkloadsRestarting"
	switch {
	case len(plan.failed) > 0:
		reason = "RolloutFailed"
	case len(plan.blocked) > 0 && len(plan.inProgress) == len(plan.evict)+len(plan.blocked):
		reason = "EvictionBlocked"
	case plan.closed != "" && len(plan.inProgress) == 0:
		reason = "OutsideMaintenanceWindow"
	}
	msg := behind
	if d := plan.describe(); d != "" {
		msg += "; " + d
	}
	return workflow.Waiting(reason, msg)
}

func describeStarts(s *State, plan restartPlan, p restartPurpose, token string) string {
	var restarts, evictions []string
	for _, w := range plan.start {
		switch {
		case w.NoRollout != "" && s.restartMethod() != v1alpha1.Evict:
			evictions = append(evictions, w.String()+" ("+w.NoRollout+")")
		case s.evicts(w):
			evictions = append(evictions, w.String())
		default:
			restarts = append(restarts, w.String())
		}
	}
	var parts []string
	if len(restarts) > 0 {
		parts = append(parts, "rollout restart "+strings.Join(restarts, ", "))
	}
	if len(evictions) > 0 {
		parts = append(parts, "evict the pods of "+strings.Join(evictions, ", "))
	}
	msg := strings.Join(parts, "; ")
	if len(plan.evict) > 0 {
		var more []string
		for _, w := range plan.evict {
			more = append(more, fmt.Sprintf("%s (%d pod(s))", w.String(), len(evictable(p, w, token))))
		}
		if msg != "" {
			msg += "; "
		}
		msg += "evict the remaining pods of " + strings.Join(more, ", ")
	}
	return msg
}

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

// restarted reports whether a workload restarted under this step's token has finished
// restarting. With RolloutRestart the template change makes the controller's status show the
// rollout (observedGeneration) until it completes: RolledOut is enough. An eviction changes no
// generation: for a moment after it, the cached status still shows the workload as it was
// before, rolled out, and the replacement pods may run before the status shows them missing —
// the budget was then exceeded, the next evictions starting while this rollout still showed.
// So an evicted workload is restarted only once all three hold:
//   - its status changed since the eviction (Settling is ""): it is not the stale one;
//   - that status is rolled out (RolledOut: observedGeneration, updated, ready and available
//     replicas as many as wanted, none unavailable);
//   - none of its pods terminating and as many running as it wants: the evicted pods are gone
//     and replaced (a status change might be an intermediate one).
func (w *Workload) restarted(evict bool) bool {
	if !w.RolledOut {
		return false
	}
	return !evict || w.Settling == "" && w.Terminating == 0 && int32(w.Running) >= w.Replicas
}

// restarting reports whether a workload restarted during this rotation — its restart mark
// (restartedAt, or the evicted-for annotation) is not older than the rotation's start, whichever
// step or person wrote it — has not finished restarting: a rollout not rolled out (nor failed),
// or an eviction not settled (see restarted). The restart budget counts these besides the step's
// own: a step whose pods converged ends while its last evictions or rollouts still settle, and
// the next step must not start beside them. Marks from before the rotation are not counted, so
// that a workload unhealthy for reasons of its own does not hold its namespace.
func (s *State) restarting(w *Workload) bool {
	if s.RotationStart.IsZero() {
		return false
	}
	// status.checkpoint.startTime has whole seconds; tokens have nanoseconds.
	since := s.RotationStart.Truncate(time.Second)
	during := func(mark string) bool {
		t, err := stampTime(mark)
		return err == nil && !t.Before(since)
	}
	switch {
	case during(w.EvictedFor) && !w.restarted(true):
		return true
	case during(w.RestartedAt):
		return !w.RolledOut && w.Failed == ""
	}
	return false
}

// evictable are the pods to evict to restart a workload: those behind on the trust bundle, or
// for the certificate fallback every pod of the workload.
func evictable(p restartPurpose, w *Workload, token string) []string {
	if p == renew {
		return w.createdBefore(token)
	}
	return w.BundleBehind
}

// createdBefore are the workload's pods created before the token's time (all of them for a
// token that is not a time): the pods that a restart under the token has not replaced yet.
func (w *Workload) createdBefore(token string) []string {
	t, err := stampTime(token)
	var out []string
	for _, name := range w.Pods {
		if err != nil || w.Created[name].Before(t) {
			out = append(out, name)
		}
	}
	return out
}

func describeRestarts(p restartPurpose) func(*State) []string {
	return func(s *State) []string {
		if !s.automaticRestarts() || s.Workloads == nil {
			return nil
		}
		plan := s.planRestarts(p, "")
		if len(plan.start) == 0 {
			return nil
		}
		return []string{describeStarts(s, plan, p, "")}
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

// refreshOverride is the value of the refresh-override annotation.
type refreshOverride struct {
	// Value is the MAX_REFRESH value the operator set.
	Value string `json:"value"`
	// Previous is the variable's value before, when it had one.
	Previous *string `json:"previous,omitempty"`
	// Created is true when the operator created the proxy-additional-env annotation.
	Created bool `json:"created,omitempty"`
}

// ProxyDuration renders a duration as linkerd2-proxy parses its env: an integer and a unit.
func ProxyDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// AddRefreshOverride merges LINKERD2_PROXY_IDENTITY_MAX_REFRESH=interval into a
// proxy-additional-env value and returns the new value with the marker that records what
// changed. ok is false when the current value does not parse.
func AddRefreshOverride(current string, interval time.Duration) (env, marker string, ok bool) {
	vars, ok := parseEnv(current)
	if !ok {
		return "", "", false
	}
	o := refreshOverride{Value: ProxyDuration(interval), Created: strings.TrimSpace(current) == ""}
	replaced := false
	for i := range vars {
		if vars[i].Name == MaxRefreshEnv {
			prev := vars[i].Value
			o.Previous, vars[i].Value, replaced = &prev, o.Value, true
		}
	}
	if !replaced {
		vars = append(vars, corev1.EnvVar{Name: MaxRefreshEnv, Value: o.Value})
	}
	e, _ := json.Marshal(vars)
	m, _ := json.Marshal(o)
	return string(e), string(m), true
}

// RemoveRefreshOverride undoes AddRefreshOverride on the current proxy-additional-env value: it
// restores (or removes) the variable when it still holds the operator's value, and keeps every
// other change made since. nil means remove the annotation.
func RemoveRefreshOverride(current, marker string) *string {
	var o refreshOverride
	vars, ok := parseEnv(current)
	if json.Unmarshal([]byte(marker), &o) != nil || !ok {
		return &current
	}
	out := vars[:0]
	for _, v := range vars {
		if v.Name == MaxRefreshEnv && v.Value == o.Value && v.ValueFrom == nil {
			if o.Previous == nil {
				continue
			}
			v.Value = *o.Previous
		}
		out = append(out, v)
	}
	if len(out) == 0 && o.Created {
		return nil
	}
	e, _ := json.Marshal(out)
	s := string(e)
	return &s
}

func parseEnv(s string) ([]corev1.EnvVar, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, true
	}
	var vars []corev1.EnvVar
	if err := json.Unmarshal([]byte(s), &vars); err != nil {
		return nil, false
	}
	return vars, true
}

// --- the steps' Observe and Act ------------------------------------------------------------------

// observeBundleRestarts is the Observe of the steps that wait for the data plane to be injected
// with the desired bundle (propagate-trust-roots, remove-old-trust-roots): the user restarts
// workloads (Manual), or the operator does (Automatic).
func observeBundleRestarts(p restartPurpose, which string) func(*State, string) workflow.Decision {
	manual := observePropagated(which)
	return func(s *State, token string) workflow.Decision {
		d := manual(s, token)
		if !s.automaticRestarts() {
			return d
		}
		c := s.TrustBundle
		behind := fmt.Sprintf("Waiting for %d pod(s) to converge on the %s trust bundle", c.Target-c.Converged, which)
		if d.Outcome == workflow.Done {
			if p != reduce || s.Workloads != nil && s.RefreshOverrides() == 0 {
				return d
			}
			behind = fmt.Sprintf("%d workload(s) still carry the accelerated refresh interval", s.RefreshOverrides())
		}
		return s.observeRestarts(p, token, behind)
	}
}

// fallbackAfter is how long after the issuer switch the operator waits for proxies to refresh
// on their own before it restarts them: twice the accelerated interval.
func (s *State) fallbackAfter() time.Duration { return 2 * RefreshInterval(s.Spec) }

// observeCertificateRestarts is the Observe of renew-workload-certificates: proxies given the
// accelerated refresh interval move onto the new anchor's issuer by themselves; a workload whose
// certificates did not move within twice the interval runs a proxy that ignores it (a Linkerd
// older than edge-26.4.3), and is restarted (Automatic) or named (Manual). With Evict nothing
// set the interval, so the operator restarts at once.
func observeCertificateRestarts(s *State, token string) workflow.Decision {
	d := observeCertificatesRenewed(s, token)
	if d.Outcome == workflow.Done || d.Reason == ReasonIssuerNotOnCurrentAnchor {
		return d
	}
	c := s.Certificates
	behind := certificatesBehind(s)
	due := !s.PhaseSince.IsZero() && !s.Now.Before(s.PhaseSince.Add(s.fallbackAfter()))
	if !s.PhaseSince.IsZero() && len(c.Behind) > 0 {
		s.RecheckAt(s.PhaseSince.Add(s.fallbackAfter()))
	}
	if !s.automaticRestarts() {
		if due && len(c.Behind) > 0 {
			d.Message += fmt.Sprintf("; their certificates did not move within %s (twice the refresh interval): their proxies ignore %s (Linkerd before edge-26.4.3?) or were never given it: restart them",
				s.fallbackAfter(), MaxRefreshEnv)
		}
		return d
	}
	if s.restartMethod() != v1alpha1.Evict && !due && token == "" {
		when := "twice the refresh interval after the issuer switch"
		if !s.PhaseSince.IsZero() {
			when = s.PhaseSince.Add(s.fallbackAfter()).UTC().Format(time.RFC3339)
		}
		return workflow.Waiting("WorkloadCertificatesRefreshing", fmt.Sprintf(
			"%s; proxies refresh on their own within %s (%s); workloads still behind at %s are restarted",
			behind, RefreshInterval(s.Spec), MaxRefreshEnv, when))
	}
	return s.observeRestarts(renew, token, behind)
}

// --- automatic identity-issuer renewal -----------------------------------------------------------

// issuerRenewalToken remembers the issuer Certificate's revision when the renewal is first
// triggered: a higher revision means the renewal happened, so it is never triggered twice.
func issuerRenewalToken(s *State, token string) string {
	if _, ok := tokenRevision(token); ok {
		return token // a later act: the revision of the first one stands
	}
	return revisionToken(token, s.IssuerCertificate.Revision).String()
}

// tokenRevision is the revision a revision token records; ok is false for any other token.
func tokenRevision(token string) (int, bool) {
	t, _ := ParseActToken(token)
	return t.Revision()
}

// observeIssuerRenewal is the Observe of wait-for-identity-issuer: done once the issuer is signed
// by the new anchor. With spec.identityIssuerRenewal Automatic, the operator triggers the
// renewal itself — only once every meshed pod trusts the new anchor (the step comes after
// propagate-trust-roots and restart-identity, and checks the convergence again).
func observeIssuerRenewal(s *State, token string) workflow.Decision {
	d := observeIssuerOnNewAnchor(s, token)
	if d.Reason != ReasonWaitingForIssuerRenewal || s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		return d
	}
	ic := s.IssuerCertificate
	ref := ic.Namespace + "/" + ic.Name
	switch {
	case !s.TrustBundle.Done():
		return workflow.Waiting("TrustBundleConverging", fmt.Sprintf(
			"not renewing the identity issuer while %d pod(s) do not trust the new anchor", s.TrustBundle.Target-s.TrustBundle.Converged))
	case ic.Err != "":
		return workflow.Waiting("IssuerCertificateUnavailable", fmt.Sprintf("cannot read Certificate %s to renew the identity issuer: %s", ref, ic.Err))
	case !ic.Found:
		return workflow.Waiting("IssuerCertificateMissing", fmt.Sprintf("Certificate %s not found: cannot renew the identity issuer (set --identity-issuer-certificate)", ref))
	case ic.Issuing:
		return workflow.Waiting("IssuerRenewing", fmt.Sprintf("Waiting for cert-manager to re-issue Certificate %s (Issuing)", ref))
	}
	if rev, ok := tokenRevision(token); ok && ic.Revision > rev {
		return workflow.Waiting("IssuerRenewed", fmt.Sprintf("Certificate %s was re-issued (revision %d); waiting for Secret %s", ref, ic.Revision, s.Issuer.Ref()))
	}
	return workflow.ActNeeded(ReasonRenewingIdentityIssuer, fmt.Sprintf("the expanded trust bundle has converged: triggering the renewal of Certificate %s as cmctl renew does", ref))
}

func actRenewIssuer(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		return w.RenewCertificate(ctx, s.IssuerCertificate.Namespace, s.IssuerCertificate.Name)
	}
}

func describeRenewIssuer(s *State) []string {
	if s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		return nil
	}
	return []string{fmt.Sprintf("renew Certificate %s/%s (Issuing=True, ManuallyTriggered)", s.IssuerCertificate.Namespace, s.IssuerCertificate.Name)}
}
