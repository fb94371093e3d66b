package app

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// Event reasons on the TrustAnchorRotation.
const (
	ReasonPhaseChanged     = "PhaseChanged"
	ReasonStepActed        = "StepActed"
	ReasonActFailed        = "ActFailed"
	ReasonRotationComplete = "RotationComplete"
	ReasonRotationStarted  = "RotationStarted"
	// ReasonChartIssuerLeft (Warning): a rotation completed, identity reads cert-manager's
	// issuer, and the issuer Secret still holds the one Linkerd's chart rendered, with its key:
	// the end of a takeover, whose last move is the user's.
	ReasonChartIssuerLeft = "ChartIssuerLeft"
	// The automations' acts.
	ReasonWorkloadsRestarted     = "WorkloadsRestarted"
	ReasonIssuerRenewalTriggered = "IdentityIssuerRenewalTriggered"
	// A remote gate passed with linked clusters (not when there is none).
	ReasonRemoteClustersConverged = "RemoteClustersConverged"
	// ReasonIdentityRestartedEarly (Warning): identity pods started between the bundle's
	// expansion and the data plane's convergence, with the issuer on the new anchor
	// (condition IdentityRestartedEarly); one Event each time the pods it names change.
	ReasonIdentityRestartedEarly = v1alpha1.ConditionIdentityRestartedEarly
	// ReasonIdentityIssuerStale (Warning): identity signs with an issuer the Secret no longer
	// holds (condition IdentityIssuerStale); one Event each time the condition turns True or
	// names another stale issuer.
	ReasonIdentityIssuerStale = v1alpha1.ConditionIdentityIssuerStale
	// ReasonIdentityRestartedForStaleIssuer: the operator restarted identity off a stale issuer
	// (spec.staleIssuerRestart Automatic).
	ReasonIdentityRestartedForStaleIssuer = "IdentityRestartedForStaleIssuer"
	// ReasonWorkloadCertificatesExpiring (Warning): meshed pods present a workload certificate
	// their proxies did not renew (condition WorkloadCertificatesExpiring); one Event each time
	// the condition turns True.
	ReasonWorkloadCertificatesExpiring = v1alpha1.ConditionWorkloadCertificatesExpiring
)

// actReason is the Event reason of an act: the automations' own, StepActed for the others.
func actReason(decision string) string {
	switch decision {
	case steps.ReasonRestartingWorkloads:
		return ReasonWorkloadsRestarted
	case steps.ReasonRenewingIdentityIssuer, steps.ReasonRenewingExpiredIssuer:
		return ReasonIssuerRenewalTriggered
	case v1alpha1.ReasonIdentityIssuerStale:
		return ReasonIdentityRestartedForStaleIssuer
	}
	return ReasonStepActed
}

// conflictRecheck is how soon the operator observes again after its status write met a
// conflict (see projectStatus).
const conflictRecheck = time.Second

// reconcile is one pass of the path the package doc describes, from the event that woke it
// (Run, processNext): it reads the State (readState), makes the repairs (repairInputs), lets the
// engine advance the workflow by at most one act, the checkpoint written before the act
// (advanceEngine, checkpoint.save), and projects the status (projectStatus). It returns when
// to observe again if nothing changes before (zero: only when something changes).
func (c *Controller) reconcile(ctx context.Context) (recheck time.Time, err error) {
	writes := c.writes
	defer func() {
		if err != nil && c.writes > writes {
			err = failedAfterWrites{err}
		}
	}()
	tar, ok, err := c.driven(ctx)
	if !ok || err != nil {
		return time.Time{}, err
	}
	if statusUndecodable(tar) {
		// Its checkpoint cannot be trusted, nor written over without losing it: the operator
		// holds, and reportRotations's metric and this Event name the fields.
		msg := "the status does not decode, the operator holds until it does: " + client.DecodeErrors(tar).ToAggregate().Error()
		if msg != c.lastUndecodable {
			c.recorder.Event(tar, corev1.EventTypeWarning, v1alpha1.ReasonSpecInvalid, msg)
			klog.FromContext(ctx).Error(nil, "TrustAnchorRotation does not decode; holding", "name", tar.Name, "message", msg)
		}
		c.lastUndecodable = msg
		return time.Time{}, nil
	}
	c.lastUndecodable = ""
	now := time.Now()
	cp := steps.WorkflowCheckpoint(tar.Status.Checkpoint)
	s, err := c.readState(ctx, now, cp.Step, tar)
	if err != nil {
		return time.Time{}, err
	}
	drifted, repaired, err := c.repairInputs(ctx, tar, s, cp)
	if repaired || err != nil {
		return time.Time{}, err // a repair's write comes back as a change
	}
	res, base, err := c.advanceEngine(ctx, tar, cp, s, now)
	if saveConflict(res, err) {
		// The checkpoint's save met a conflict, before any act: nothing ran, and as with the
		// status write (projectStatus) the object is read again shortly, not after a backoff.
		klog.FromContext(ctx).V(1).Info("Saving the checkpoint met a conflict; observing again", "err", err)
		return now.Add(conflictRecheck), nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return c.projectStatus(ctx, tar, base, s, res, now, drifted)
}

// failedAfterWrites is the error of a reconcile whose acts changed the cluster before
// something failed: a write of a multi-write act (a restart of the control plane, a batch of
// workloads) or the status write after the act. The rotation moved, so the retry comes at the
// failure backoff's first delay (Run), not at one grown by the failures before: over a flaky
// apiserver, each retry carries the act further. It cannot loop hot: an act skips what its
// token shows done (a restart marked, a bundle written), so a retry that changes nothing more
// fails as a plain error, and the backoff grows again.
type failedAfterWrites struct{ err error }

func (e failedAfterWrites) Error() string { return e.err.Error() }
func (e failedAfterWrites) Unwrap() error { return e.err }

// driven returns the TrustAnchorRotation to drive (rotation.go), after reporting on every one
// (Ignored, SpecInvalid: reportRotations); none (false) when it does not exist yet, which it
// then creates.
func (c *Controller) driven(ctx context.Context) (*v1alpha1.TrustAnchorRotation, bool, error) {
	if err := c.reportRotations(ctx); err != nil {
		return nil, false, err
	}
	tar, ok := c.current()
	if !ok {
		return nil, false, c.createRotation(ctx)
	}
	return tar, true, nil
}

// readState reads the cluster into the steps' State: observe.Snapshotter reads the informers'
// caches (informers.go) with the converters the CLI's reads use, the linked clusters' reports
// come from their watches (remote.go), and what the enabled automations need from the
// informers they start (automation.go, read by observe.FillAutomations).
func (c *Controller) readState(ctx context.Context, now time.Time, step string, tar *v1alpha1.TrustAnchorRotation) (*steps.State, error) {
	s, err := c.snapshots.Snapshot(now, step, tar)
	if err != nil {
		return nil, err
	}
	c.remotes.sync(tar.Spec.RemoteClusters)
	s.Remotes, s.RemoteStaleAfter = c.remotes.snapshot(), c.opts.RemoteStaleAfter
	c.auto.fill(ctx, s, tar, c.steps, step, c.index)
	return s, nil
}

// advanceEngine lets the engine advance the workflow from the checkpoint by at most one act
// (workflow.Advance), saving through checkpoint.save, and announces what it did. It returns the
// engine's result and the TrustAnchorRotation as the last save left it. An act that failed is
// published in the status at once (publishActFailure) and returned as the error.
func (c *Controller) advanceEngine(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, cp workflow.Checkpoint, s *steps.State, now time.Time) (workflow.Result, *v1alpha1.TrustAnchorRotation, error) {
	saved := &checkpoint{c: c, tar: tar, base: tar, s: s, now: now}
	res, advErr := c.wf.Advance(ctx, cp, s, saved.save, func() string { return steps.NewActStamp(now) }, workflow.Suspended(held(tar, s)))
	c.announce(ctx, tar, s, res)
	if advErr != nil {
		if saveConflict(res, advErr) {
			return res, saved.base, advErr // not the act's failure: reconcile observes again
		}
		if res.Decision.Outcome == workflow.Act {
			c.recorder.Eventf(tar, corev1.EventTypeWarning, ReasonActFailed, "%v", advErr)
		}
		if res.ActErr != nil {
			c.publishActFailure(ctx, tar, saved.base, s, res, now)
		}
		return res, saved.base, advErr
	}
	return res, saved.base, nil
}

// saveConflict reports whether the engine's error is a conflict met by a checkpoint's save,
// before any act ran.
func saveConflict(res workflow.Result, err error) bool {
	return err != nil && res.ActErr == nil && !res.Acted && apierrors.IsConflict(err)
}

// checkpoint is the engine's save (workflow.SaveFunc), the one place the checkpoint is written:
// the engine saves the checkpoint of an act (its token, its count of acts) before it runs the
// act, and the checkpoint a jump moves to, so that an operator killed anywhere resumes from it
// without repeating a destructive act.
type checkpoint struct {
	c *Controller
	// tar is the TrustAnchorRotation the reconcile read; base is the object as the last save
	// left it (tar before the first).
	tar, base *v1alpha1.TrustAnchorRotation
	s         *steps.State
	now       time.Time
}

func (k *checkpoint) save(ctx context.Context, next workflow.Checkpoint) error {
	obj := k.base.DeepCopy()
	obj.Status.Checkpoint = k.tar.Status.Checkpoint.DeepCopy()
	steps.SaveCheckpoint(k.c.steps, &obj.Status, next, k.s, k.now)
	out, err := k.c.write(ctx, obj)
	if err != nil {
		return err
	}
	k.base = out
	if j := next.Jump; j != nil {
		k.c.crash.point("jump", j.From, 0)
	} else {
		k.c.crash.point("save", next.Step, next.Acts)
	}
	return nil
}

// announce tells of what the engine did, in Events, logs and metrics: the remote gates it
// passed, the jump it made, the act it ran.
func (c *Controller) announce(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, s *steps.State, res workflow.Result) {
	log := klog.FromContext(ctx)
	for _, name := range res.Passed {
		log.V(2).Info("Step done", "step", name)
		if _, gate := steps.RemoteGateAt(c.steps, name); gate && len(s.Remotes) > 0 {
			st, _ := c.wf.Step(name)
			d := st.Observe(s, "")
			c.recorder.Eventf(tar, corev1.EventTypeNormal, ReasonRemoteClustersConverged, "step %s: %s", name, d.Message)
			log.Info("Remote gate passed", "step", name, "message", d.Message)
		}
	}
	if j := res.Jumped; j != nil {
		// A jump is a move of the checkpoint the steps did not plan for: a Warning, with the
		// jump's own reason (RotationSuperseded), as every checkpoint the engine saved.
		c.recorder.Eventf(tar, corev1.EventTypeWarning, j.Reason, "%s", j.Message)
		log.Info("Workflow jumped", "from", j.From, "to", j.To, "reason", j.Reason, "message", j.Message)
	}
	if res.Acted {
		c.crash.point("acted", res.Checkpoint.Step, res.Checkpoint.Acts)
		c.metrics.acts.WithLabelValues(res.Checkpoint.Step).Inc()
		c.recorder.Eventf(tar, corev1.EventTypeNormal, actReason(res.Decision.Reason), "step %s: %s", res.Checkpoint.Step, res.Decision.Message)
		log.Info("Acted", "step", res.Checkpoint.Step, "reason", res.Decision.Reason, "message", res.Decision.Message, "token", res.Checkpoint.Token)
	}
}

// projectStatus is where the status is projected (steps.Project) from the State and the
// engine's result, over base, and written unless it changed nothing or only progress that is
// held back (holdProgress); the metrics and the Events that follow the status come from what
// it projected (report). It returns when to observe again.
func (c *Controller) projectStatus(ctx context.Context, tar, base *v1alpha1.TrustAnchorRotation, s *steps.State, res workflow.Result, now time.Time, drifted bool) (time.Time, error) {
	status, projected := steps.ProjectTimed(c.steps, base.Status, tar.Spec, tar.Generation, s, res, now)
	// What the engine observed may change at res.RecheckAt, what was projected of it at projected.
	recheck := workflow.Earliest(res.RecheckAt, projected)
	// A drifted bundle's message is written at once: the next snapshot may hold it rewritten.
	if !equality.Semantic.DeepEqual(status, base.Status) && (drifted || !c.holdProgress(&base.Status, &status)) {
		obj := base.DeepCopy()
		obj.Status = status
		out, err := c.write(ctx, obj)
		if err != nil {
			if apierrors.IsConflict(err) {
				// Usually the cache catches up and the newer object's event pokes us; but a 409
				// that no newer object follows (a proxy's, a webhook's) would leave the rotation
				// waiting for an event that never comes: observe again shortly either way.
				return workflow.Earliest(recheck, now.Add(conflictRecheck)), nil
			}
			return time.Time{}, err
		}
		c.echo.Store(&out.ResourceVersion)
		c.lastWriteBegan = c.reconcileBegan
	}
	c.report(ctx, tar, base, s, res, status)
	return recheck, nil
}

// report publishes what the projected status says beyond the object: the metrics, and the
// Events of the identity pods restarted early, of spec.suspend, of a phase change and of a
// completed rotation. base is the object the status was projected over.
func (c *Controller) report(ctx context.Context, tar, base *v1alpha1.TrustAnchorRotation, s *steps.State, res workflow.Result, status v1alpha1.TrustAnchorRotationStatus) {
	log := klog.FromContext(ctx)
	c.metrics.Observe(&status)
	c.metrics.ObserveHistory(&status)
	c.recordFinished(tar, tar.Status.History, status.History)
	c.metrics.ObserveCertificates(s)
	c.metrics.ObserveRemotes(status.RemoteClusters)
	c.metrics.identityRestartedEarly.Set(float64(len(s.IdentityRestartedEarly(c.steps, res.Checkpoint.Step))))
	early := ""
	if cond := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionIdentityRestartedEarly); cond != nil && cond.Status == metav1.ConditionTrue {
		early = cond.Message
	}
	if early != "" && early != c.lastIdentityEarly {
		c.recorder.Event(tar, corev1.EventTypeWarning, ReasonIdentityRestartedEarly, early)
		log.Info("Identity restarted early", "message", early)
	}
	c.lastIdentityEarly = early
	stale := s.StaleIssuer(res.Checkpoint.Step)
	c.metrics.identityIssuerStale.Set(0)
	if stale != nil {
		c.metrics.identityIssuerStale.Set(float64(stale.Pods))
	}
	if msg := staleIssuerTurned(base.Status.Conditions, status.Conditions); msg != "" {
		c.recorder.Event(tar, corev1.EventTypeWarning, ReasonIdentityIssuerStale, msg)
		log.Info("Identity signs with a stale issuer", "message", msg)
	}
	c.metrics.leavesExpiring.Set(float64(s.ExpiringLeaves.Pods))
	if msg := conditionTurnedTrue(base.Status.Conditions, status.Conditions, v1alpha1.ConditionWorkloadCertificatesExpiring); msg != "" {
		c.recorder.Event(tar, corev1.EventTypeWarning, ReasonWorkloadCertificatesExpiring, msg)
		log.Info("Proxies did not renew their certificates", "message", msg)
	}
	c.suspendEvents(tar, &base.Status, &status)
	c.specInvalidEvent(tar, base.Status.Conditions, status.Conditions)
	if status.Phase != base.Status.Phase {
		c.recorder.Eventf(tar, corev1.EventTypeNormal, ReasonPhaseChanged, "%s -> %s", orSynced(base.Status.Phase), status.Phase)
		log.Info("Phase changed", "from", orSynced(base.Status.Phase), "to", status.Phase, "message", status.BlockingMessage)
	}
	if res.Completed && base.Status.Checkpoint != nil && base.Status.Checkpoint.Rotation != "" {
		c.recorder.Eventf(tar, corev1.EventTypeNormal, ReasonRotationComplete, "rotation to trust anchor %s complete", base.Status.Checkpoint.Rotation)
		if note := s.ChartIssuerLeft(); note != "" {
			// A takeover's closing move is the user's (docs/adopting.md, step 7).
			c.recorder.Event(tar, corev1.EventTypeWarning, ReasonChartIssuerLeft, note)
		}
	}
}

func orSynced(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return v1alpha1.PhaseSynced
	}
	return p
}

// staleIssuerTurned is the message of condition IdentityIssuerStale when it turned True, or now
// names another stale issuer than before; "" otherwise. It reads the conditions, not the
// controller's memory, so that a new leader does not repeat the Event.
func staleIssuerTurned(before, after []metav1.Condition) string {
	cur := meta.FindStatusCondition(after, v1alpha1.ConditionIdentityIssuerStale)
	if cur == nil || cur.Status != metav1.ConditionTrue {
		return ""
	}
	prev := meta.FindStatusCondition(before, v1alpha1.ConditionIdentityIssuerStale)
	if prev != nil && prev.Status == metav1.ConditionTrue && staleSigner(prev.Message) == staleSigner(cur.Message) {
		return ""
	}
	return cur.Message
}

// conditionTurnedTrue is the message of condition typ when it turned True; "" otherwise. It
// reads the conditions, not the controller's memory, so that a new leader does not repeat the
// Event.
func conditionTurnedTrue(before, after []metav1.Condition, typ string) string {
	cur := meta.FindStatusCondition(after, typ)
	if cur == nil || cur.Status != metav1.ConditionTrue {
		return ""
	}
	if prev := meta.FindStatusCondition(before, typ); prev != nil && prev.Status == metav1.ConditionTrue {
		return ""
	}
	return cur.Message
}

// staleSigner is the stale issuer a condition message names first (steps.StaleIssuerMessage).
func staleSigner(message string) string {
	const mark = "with issuer "
	_, rest, ok := strings.Cut(message, mark)
	if !ok {
		return message
	}
	signer, _, _ := strings.Cut(rest, " ")
	return signer
}
