// Package app is the trust-rotation operator: it watches cert-manager's trust anchor and
// identity issuer, Linkerd's trust bundle, control plane and meshed pods, and advances the
// rotation workflow (package steps) one observed step at a time, keeping the workflow's
// checkpoint in the TrustAnchorRotation status.
package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-retry"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
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
	// The automations' acts.
	ReasonWorkloadsRestarted     = "WorkloadsRestarted"
	ReasonIssuerRenewalTriggered = "IdentityIssuerRenewalTriggered"
	// A remote gate passed with linked clusters (not when there is none).
	ReasonRemoteClustersConverged = "RemoteClustersConverged"
	// ReasonIdentityRestartedEarly (Warning): identity pods started between the bundle's
	// expansion and the data plane's convergence, with the issuer on the new anchor
	// (condition IdentityRestartedEarly); one Event each time the pods it names change.
	ReasonIdentityRestartedEarly = v1alpha1.ConditionIdentityRestartedEarly
)

// actReason is the Event reason of an act: the automations' own, StepActed for the others.
func actReason(decision string) string {
	switch decision {
	case steps.ReasonRestartingWorkloads:
		return ReasonWorkloadsRestarted
	case steps.ReasonRenewingIdentityIssuer:
		return ReasonIssuerRenewalTriggered
	}
	return ReasonStepActed
}

// Options configure the controller.
type Options struct {
	Config       steps.Config
	RotationName string
	// ProbeConcurrency and ProbeTimeout bound the live-certificate probes.
	ProbeConcurrency int
	ProbeTimeout     time.Duration
	// MaxPollInterval, when positive, is the longest the operator goes without observing,
	// a safety net. Zero (the default) observes only when an informer or a probe reports a
	// change, and at the moments the decisions say they depend on (steps.State.RecheckAt).
	MaxPollInterval time.Duration
	// Dial reaches pods' admin ports; nil dials directly.
	Dial probe.DialFunc
	// CertManager renews the identity issuer when spec.identityIssuerRenewal is Automatic.
	CertManager kube.CertManager
	// RestartNamespaces limits automatic restarts (spec.dataPlaneRestart.policy Automatic) to the
	// workloads of these namespaces, watched there alone, for an operator whose RBAC grants
	// restarts in those namespaces only; empty means every namespace (watched cluster-wide).
	RestartNamespaces []string
	// MulticlusterNamespace is where Linkerd multicluster keeps its Links and their credentials
	// Secrets, and where spec.remoteClusters' kubeconfig Secrets live. Links are discovered there
	// when Dynamic and Discovery are set (Discovery: a discovery client, or kube.Clients).
	MulticlusterNamespace string
	Dynamic               dynamic.Interface
	Discovery             observe.GroupLister
	// RemoteStaleAfter is how old a remote cluster's last read may be before its report is
	// stale; RemoteWatchTimeout bounds one watch of a remote (its renewal is a read).
	RemoteStaleAfter   time.Duration
	RemoteWatchTimeout time.Duration
	// Pods, when set, is the client the meshed pods are listed and watched with (its
	// connections may pace their reads: kube.ReadCoalescer); nil uses the controller's.
	// PodsSynced, when set, is called once the pod informer has synced.
	Pods       kube.Interface
	PodsSynced func()
	// CrashAt is a test-only fault hook, "<point>:<step>[@<n>]" (see CrashEnv): the operator
	// crashes at that point of that step. Empty: never.
	CrashAt string
	// Crash is how it crashes at CrashAt; nil kills the process with SIGKILL. Unit tests set it.
	Crash func()
}

// Controller runs the rotation.
type Controller struct {
	opts     Options
	kube     kube.Interface
	tars     *client.Client
	wf       *workflow.Workflow[*steps.State]
	writer   steps.Writer
	crash    *crashHook
	metrics  *Metrics
	recorder eventRecorder
	trigger  chan struct{}

	anchor, previous, issuer, bundle, deployments, rotation cache.SharedIndexInformer
	pods                                                    *podindex.PodInformer
	index                                                   *podindex.Index
	certs                                                   *probe.CertTracker
	// auto watches what the opt-in automations need, once the spec enables them.
	auto *automation
	// remotes watches the linked clusters' TrustAnchorRotations.
	remotes *remotes

	// latest is the TrustAnchorRotation as we last wrote it, and replaced the resourceVersion
	// it replaced: until the informer catches up, the cache still shows that one.
	latest   *v1alpha1.TrustAnchorRotation
	replaced string
	// echo is the resourceVersion of the status a reconcile wrote once it had decided (not a
	// checkpoint it saved on the way): that version's watch event tells the operator nothing
	// the reconcile did not know, so it is not a change to observe (rotationUpdated).
	echo atomic.Pointer[string]

	// parsed keeps what snapshot parsed of the Secrets and the bundle until they change.
	parsed parsedSources

	// churn tells the pod changes and probe results that may complete a convergence from those
	// that only move its counts (churned).
	churn churn

	// reconcileBegan is when the running reconcile began, lastWriteBegan when the one that last
	// wrote the status did; progressTimer reconciles again when a progress-only change was held
	// back (holdProgress).
	reconcileBegan, lastWriteBegan time.Time
	progressTimer                  *time.Timer

	// bundleRewrites counts the rewrites of a drifted trust bundle in a row, the last at
	// bundleRewriteAt; bundleTimer reconciles again when the next one is due (repairBundle).
	bundleRewrites  int
	bundleRewriteAt time.Time
	bundleTimer     *time.Timer
	// lastDrift is the last TrustBundleDrifted Event emitted ("step: message"): a writer that
	// keeps reverting the bundle makes one Event, not one per rewrite.
	lastDrift string
	// lastIdentityEarly is the message of the last IdentityRestartedEarly Event, "" once the
	// condition is False: one Event per set of pods, not one per reconcile.
	lastIdentityEarly string
}

// New wires a controller; Run starts it.
func New(kube kube.Interface, tars *client.Client, metrics *Metrics, opts Options) (*Controller, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, kube: kube, tars: tars, metrics: metrics, trigger: make(chan struct{}, 1), crash: newCrashHook(opts.CrashAt, opts.Crash)}
	for _, ns := range opts.RestartNamespaces {
		if ns == "" {
			return nil, fmt.Errorf("--restart-namespaces %q names an empty namespace", strings.Join(opts.RestartNamespaces, ","))
		}
	}
	restartNS := slices.Compact(slices.Sorted(slices.Values(opts.RestartNamespaces)))
	c.auto = &automation{kube: kube, cm: opts.CertManager, cfg: opts.Config, poke: c.poke, restartNamespaces: restartNS}
	c.writer = c.crash.writer(rememberingWriter{Writer: &apply.KubeWriter{Client: kube, CertManager: opts.CertManager, Config: opts.Config}, auto: c.auto})
	wf, err := steps.NewWorkflow(steps.Rotation(c.writer))
	if err != nil {
		return nil, err
	}
	c.wf = wf

	cfg := opts.Config
	core := kube.CoreV1().RESTClient()
	c.anchor = namedInformer(core, "secrets", cfg.CertManagerNamespace, cfg.AnchorSecret, &corev1.Secret{})
	c.previous = namedInformer(core, "secrets", cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, &corev1.Secret{})
	c.issuer = namedInformer(core, "secrets", cfg.LinkerdNamespace, cfg.IssuerSecret, &corev1.Secret{})
	c.bundle = namedInformer(core, "configmaps", cfg.LinkerdNamespace, cfg.TrustRootsConfigMap, &corev1.ConfigMap{})
	for _, inf := range []cache.SharedIndexInformer{c.anchor, c.previous, c.issuer} {
		// Keep certificates only: private keys never sit in the operator's memory.
		must(inf.SetTransform(certificateOnly))
	}
	c.deployments = cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(kube.AppsV1().RESTClient(), "deployments", cfg.LinkerdNamespace, fields.Everything()),
		&appsv1.Deployment{}, 0, cache.Indexers{})
	// Meshed pods are decoded off the wire as podindex.WirePods, only what the rotation reads,
	// when the clients can (kube.Clients; a fake clientset decodes them in full).
	podClient := kube
	if opts.Pods != nil {
		podClient = opts.Pods
	}
	pods, err := podindex.MeshedPodsListWatch(podClient)
	if err != nil {
		return nil, err
	}
	// Every TrustAnchorRotation: the driven one, and any other, to mark it Ignored.
	c.rotation = cache.NewSharedIndexInformer(
		tars.ListWatch(fields.Everything()),
		&v1alpha1.TrustAnchorRotation{}, 0, cache.Indexers{})

	c.remotes = newRemotes(kube, opts.Dynamic, opts.Discovery, opts.MulticlusterNamespace, opts.RemoteWatchTimeout, c.poke)
	c.index = podindex.New(c.podChanged)
	// The index is the pod informer's store: each pod is held once, as the few fields the
	// rotation reads (podindex.SlimPod).
	c.pods = podindex.NewPodInformer(pods, cfg, c.index)
	c.certs = probe.NewCertTracker(c.index, opts.Dial, opts.ProbeConcurrency, opts.ProbeTimeout, func(p *podindex.Pod) { c.churned(p.ControlPlane) })
	c.certs.OnProbe = metrics.countProbe

	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{c.anchor, c.previous, c.issuer, c.bundle, c.deployments} {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return nil, err
		}
	}
	if _, err := c.rotation.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(_, obj any) { c.rotationUpdated(obj) },
		DeleteFunc: func(any) { c.poke() },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func (c *Controller) podChanged(old, cur *podindex.Pod) {
	c.certs.PodChanged(old, cur)
	c.churned(old != nil && old.ControlPlane || cur != nil && cur.ControlPlane)
}

// rotationUpdated pokes for a changed TrustAnchorRotation unless it is the echo of the status
// the last reconcile wrote after deciding. While pods roll, those writes are a third of the
// reconciles, and each echo would be observed at once, outside the churn's pacing.
func (c *Controller) rotationUpdated(obj any) {
	if tar, ok := obj.(*v1alpha1.TrustAnchorRotation); ok && tar.Name == c.opts.RotationName {
		if rv := c.echo.Load(); rv != nil && *rv == tar.ResourceVersion {
			return
		}
	}
	c.poke()
}

// poke asks for a reconcile; many pokes before it runs make one.
func (c *Controller) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx ends. Call it only while leading: only the leader writes.
func (c *Controller) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	c.recorder = newRecorder(ctx, c.kube)
	informers := []interface {
		RunWithContext(context.Context)
		HasSynced() bool
	}{c.anchor, c.previous, c.issuer, c.bundle, c.deployments, c.pods, c.rotation}
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, inf := range informers {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil // asked to stop (SIGTERM, or the lease lost) before the caches synced
		}
		return errors.New("informer caches did not sync")
	}
	if err := c.remotes.start(ctx); err != nil {
		return err
	}
	if c.opts.PodsSynced != nil {
		c.opts.PodsSynced()
	}
	log.Info("Caches synced; reconciling", "rotation", c.opts.RotationName, "meshedPods", c.index.MeshedPods())
	go c.certs.Run(ctx)

	failures := newFailureBackoff()
	cause := CauseStart
	for {
		c.metrics.reconciles.WithLabelValues(cause).Inc()
		c.reconcileBegan = time.Now()
		c.churn.began(c.reconcileBegan)
		recheck, err := c.reconcile(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			// Back off without listening to events: the failure's own writes (the checkpoint
			// saved before a failed act) would otherwise wake us at once, in a hot loop.
			delay, _ := failures.Next()
			log.Error(err, "Reconcile failed; retrying", "after", delay)
			if !wait(ctx, delay) {
				return nil
			}
			cause = CauseRetry
			continue
		}
		failures = newFailureBackoff()
		// Nothing but a change or the time a decision named can change a decision: an act's
		// own writes, and every change of what the steps read, come back through the
		// informers (and the probes' results through the tracker) as pokes.
		var timeout <-chan time.Time
		delay, onTimeout := c.opts.MaxPollInterval, CausePoll
		if !recheck.IsZero() && (delay <= 0 || time.Until(recheck) < delay) {
			delay, onTimeout = max(time.Until(recheck), 0), CauseRecheck
		}
		var timer *time.Timer
		if delay > 0 || !recheck.IsZero() {
			timer = time.NewTimer(delay)
			timeout = timer.C
		}
		select {
		case <-ctx.Done():
		case <-c.trigger:
			cause = CauseChange
		case <-timeout:
			cause = onTimeout
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func newFailureBackoff() retry.Backoff {
	return retry.WithCappedDuration(30*time.Second, retry.NewExponential(500*time.Millisecond))
}

// wait waits for d or the end of ctx, and reports whether ctx is still alive.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

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

// reconcile observes, advances the workflow by at most one act, and publishes the status. It
// returns when to observe again if nothing changes before (zero: only when something changes).
// conflictRecheck is how soon the operator observes again after its status write met a
// conflict (see reconcile).
const conflictRecheck = time.Second

func (c *Controller) reconcile(ctx context.Context) (recheck time.Time, err error) {
	log := klog.FromContext(ctx)
	if err := c.markIgnored(ctx); err != nil {
		return time.Time{}, err
	}
	tar, ok := c.current()
	if !ok {
		return time.Time{}, c.createRotation(ctx)
	}
	now := time.Now()
	cp := steps.WorkflowCheckpoint(tar.Status.Checkpoint)
	s, err := c.snapshot(now, cp.Step, tar)
	if err != nil {
		return time.Time{}, err
	}
	c.remotes.sync(tar.Spec.RemoteClusters)
	s.Remotes, s.RemoteStaleAfter = c.remotes.snapshot(), c.opts.RemoteStaleAfter
	c.auto.fill(ctx, s, tar, cp.Step, c.index)
	// Suspended, the repairs hold too: they write outside the status.
	drifted := false
	if !tar.Spec.Suspend {
		if done, err := c.repair(ctx, tar, s); done || err != nil {
			return time.Time{}, err // a repair's write comes back as a change
		}
		if drifted, err = c.repairBundle(ctx, tar, s, cp); err != nil {
			return time.Time{}, err
		}
	}

	base := tar
	save := func(ctx context.Context, next workflow.Checkpoint) error {
		obj := base.DeepCopy()
		obj.Status.Checkpoint = tar.Status.Checkpoint.DeepCopy()
		steps.SaveCheckpoint(&obj.Status, next, s, now)
		out, err := c.write(ctx, obj)
		if err != nil {
			return err
		}
		base = out
		if j := next.Jump; j != nil {
			c.crash.point("jump", j.From, 0)
		} else {
			c.crash.point("save", next.Step, next.Acts)
		}
		return nil
	}
	res, advErr := c.wf.Advance(ctx, cp, s, save, func() string { return steps.NewActStamp(now) }, workflow.Suspended(tar.Spec.Suspend))

	for _, name := range res.Passed {
		log.V(2).Info("Step done", "step", name)
		if _, gate := steps.RemoteGateAt(name); gate && len(s.Remotes) > 0 {
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
	if advErr != nil {
		if res.Decision.Outcome == workflow.Act {
			c.recorder.Eventf(tar, corev1.EventTypeWarning, ReasonActFailed, "%v", advErr)
		}
		if res.ActErr != nil {
			c.publishActFailure(ctx, tar, base, s, res, now)
		}
		return time.Time{}, advErr
	}

	status := steps.Project(base.Status, tar.Spec, tar.Generation, s, res, now)
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
				s.RecheckAt(now.Add(conflictRecheck))
				return s.Recheck(), nil
			}
			return time.Time{}, err
		}
		c.echo.Store(&out.ResourceVersion)
		c.lastWriteBegan = c.reconcileBegan
	}
	c.metrics.Observe(&status)
	c.metrics.ObserveHistory(&status)
	c.recordFinished(tar, tar.Status.History, status.History)
	c.metrics.ObserveCertificates(s)
	c.metrics.ObserveRemotes(status.RemoteClusters)
	c.metrics.identityRestartedEarly.Set(float64(len(s.IdentityRestartedEarly(res.Checkpoint.Step))))
	early := ""
	if cond := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionIdentityRestartedEarly); cond != nil && cond.Status == metav1.ConditionTrue {
		early = cond.Message
	}
	if early != "" && early != c.lastIdentityEarly {
		c.recorder.Event(tar, corev1.EventTypeWarning, ReasonIdentityRestartedEarly, early)
		log.Info("Identity restarted early", "message", early)
	}
	c.lastIdentityEarly = early
	c.suspendEvents(tar, &base.Status, &status)
	if status.Phase != base.Status.Phase {
		c.recorder.Eventf(tar, corev1.EventTypeNormal, ReasonPhaseChanged, "%s -> %s", orSynced(base.Status.Phase), status.Phase)
		log.Info("Phase changed", "from", orSynced(base.Status.Phase), "to", status.Phase, "message", status.BlockingMessage)
	}
	if res.Completed && base.Status.Checkpoint != nil && base.Status.Checkpoint.Rotation != "" {
		c.recorder.Eventf(tar, corev1.EventTypeNormal, ReasonRotationComplete, "rotation to trust anchor %s complete", base.Status.Checkpoint.Rotation)
	}
	return s.Recheck(), nil
}

func orSynced(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return v1alpha1.PhaseSynced
	}
	return p
}

// snapshot builds the steps' State from the informer caches and the TrustAnchorRotation's
// status, at the checkpoint's step. The spec is in it before the bundle convergence is counted:
// the desired bundle depends on spec.strategy when no rotation is under way yet.
func (c *Controller) snapshot(now time.Time, step string, tar *v1alpha1.TrustAnchorRotation) (*steps.State, error) {
	status := &tar.Status
	cfg := c.opts.Config
	s := &steps.State{
		Config:       cfg,
		Now:          now,
		Anchor:       c.parsed.anchor.source(cfg.CertManagerNamespace, cfg.AnchorSecret, getSecret(c.anchor, cfg.CertManagerNamespace, cfg.AnchorSecret)),
		Previous:     c.parsed.previous.source(cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, getSecret(c.previous, cfg.LinkerdNamespace, cfg.PreviousAnchorSecret)),
		Issuer:       c.parsed.issuer.source(cfg.LinkerdNamespace, cfg.IssuerSecret, getSecret(c.issuer, cfg.LinkerdNamespace, cfg.IssuerSecret)),
		ControlPlane: map[string]steps.Deployment{},
		Spec:         tar.Spec,
	}
	if err := s.FromStatus(status); err != nil {
		return nil, err
	}
	var cm *corev1.ConfigMap
	if obj, ok, _ := c.bundle.GetStore().GetByKey(cfg.LinkerdNamespace + "/" + cfg.TrustRootsConfigMap); ok {
		cm = obj.(*corev1.ConfigMap)
	}
	s.Bundle = c.parsed.bundle.get(cm, func() steps.Bundle { return observe.BundleFromConfigMap(cm) })
	for _, name := range cfg.ControlPlane() {
		var d *appsv1.Deployment
		if obj, ok, _ := c.deployments.GetStore().GetByKey(cfg.LinkerdNamespace + "/" + name); ok {
			d = obj.(*appsv1.Deployment)
		}
		s.ControlPlane[name] = observe.DeploymentFrom(cfg.LinkerdNamespace, name, d)
	}
	c.index.FillControlPlane(s)
	s.TrustBundle = c.index.TrustBundle(steps.BundleHash(s.DesiredBundle()))
	c.certs.SetActive(s.CertificateRoot(), steps.UrgentCertificates(s, step))
	s.Certificates = c.certs.Certificates()
	s.LoadLiveChainsOnDemand(c.certs.LiveChains)
	observe.FillDeadline(s, c.index, c.certs)
	return s, nil
}

func getSecret(inf cache.SharedIndexInformer, ns, name string) *corev1.Secret {
	obj, ok, _ := inf.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Secret)
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

// certificateOnly drops every Secret key but tls.crt before the object is cached.
func certificateOnly(obj any) (any, error) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Secret{ObjectMeta: sec.ObjectMeta, Type: sec.Type}
	slim.ManagedFields = nil
	if crt, ok := sec.Data[steps.CertificateKey]; ok {
		slim.Data = map[string][]byte{steps.CertificateKey: crt}
	}
	return slim, nil
}

// namedInformer watches one named object, so the operator reads (and may be granted) nothing else.
func namedInformer(rc cache.Getter, resource, ns, name string, obj runtime.Object) cache.SharedIndexInformer {
	lw := cache.NewListWatchFromClient(rc, resource, ns, fields.OneTermEqualSelector("metadata.name", name))
	return cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
}

// newRecorder returns the recorder of the operator's Events, writing until ctx ends.
func newRecorder(ctx context.Context, clients kube.Interface) eventRecorder {
	s := runtime.NewScheme()
	must(kube.AddToScheme(s))
	must(v1alpha1.AddToScheme(s))
	return newEventWriter(ctx, clients, s, "trust-rotation-operator")
}
