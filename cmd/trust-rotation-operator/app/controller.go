package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
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

// Options configure the controller.
type Options struct {
	Config       steps.Config
	RotationName string
	// ProbeConcurrency and ProbeTimeout bound the live-certificate probes.
	ProbeConcurrency int
	ProbeTimeout     time.Duration
	// IssuerReloadTolerance is how long identity may sign with the previous issuer after the
	// issuer Secret changed (condition IdentityIssuerStale; steps.DefaultIssuerReloadTolerance
	// when zero).
	IssuerReloadTolerance time.Duration
	// MaxPollInterval, when positive, is the longest the operator goes without observing,
	// a safety net. Zero (the default) observes only when an informer or a probe reports a
	// change, and at the moments the decisions say they depend on
	// (workflow.Decision.RecheckAt, steps.ProjectTimed).
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
	opts Options
	kube kube.Interface
	tars *client.Client
	wf   *workflow.Workflow[*steps.State]
	// steps are wf's steps, which the checkpoint's step is looked up in.
	steps  *steps.Ordered
	writer steps.Writer
	// writes counts the acts' writes that changed the cluster (countWrite), so that a failed
	// reconcile tells whether it moved the rotation before it failed (reconcile).
	writes   int
	crash    *crashHook
	metrics  *Metrics
	recorder kube.EventRecorder

	// queue holds the one key there is, the driven rotation's name (client-go's typed
	// workqueue): the informers, the probes and the automations' caches add it (poke), a
	// reconcile that named a moment adds it after that moment, a failed one after the limiter's
	// back-off. retryAt is when that back-off ends; until then nothing reconciles (Run).
	queue   workqueue.TypedRateLimitingInterface[string]
	limiter workqueue.TypedRateLimiter[string]
	retryAt time.Time
	// poked: a poke came since the reconcile before began. recheckAt is the earliest moment the
	// last reconcile asked to observe again at (its decisions', a held-back progress write's, a
	// bundle rewrite's back-off), pollAt when --max-poll-interval has passed since it. They say
	// whether a wake is due (wakeDue) and what caused the reconcile (reconcileCause).
	poked             atomic.Bool
	recheckAt, pollAt time.Time

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

	// snapshots reads the State out of the informers' caches (readState), keeping what it
	// parsed of the Secrets and the bundle until they change.
	snapshots *observe.Snapshotter

	// churn tells the pod changes and probe results that may complete a convergence from those
	// that only move its counts (churned).
	churn churn

	// reconcileBegan is when the running reconcile began, lastWriteBegan when the one that last
	// wrote the status did. controlPlaneChanged: a control-plane pod changed since the reconcile
	// before the running one began (churn.began), so its progress is not held back.
	reconcileBegan, lastWriteBegan time.Time
	controlPlaneChanged            bool

	// bundleRewrites counts the rewrites of a drifted trust bundle in a row, the last at
	// bundleRewriteAt (repairBundle).
	bundleRewrites  int
	bundleRewriteAt time.Time
	// lastDrift is the last TrustBundleDrifted Event emitted ("step: message"): a writer that
	// keeps reverting the bundle makes one Event, not one per rewrite.
	lastDrift string
	// lastIdentityEarly is the message of the last IdentityRestartedEarly Event, "" once the
	// condition is False: one Event per set of pods, not one per reconcile.
	lastIdentityEarly string
	// lastUndecodable is the message of the last Event of a driven TrustAnchorRotation whose
	// status does not decode (reconcile): one Event per message.
	lastUndecodable string
	// specInvalidSeries are the TrustAnchorRotations trust_rotation_spec_invalid has a series of.
	specInvalidSeries map[string]bool
}

// New wires a controller; Run starts it.
func New(kube kube.Interface, tars *client.Client, metrics *Metrics, opts Options) (*Controller, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, kube: kube, tars: tars, metrics: metrics, crash: newCrashHook(opts.CrashAt, opts.Crash)}
	c.initQueue()
	for _, ns := range opts.RestartNamespaces {
		if ns == "" {
			return nil, fmt.Errorf("--restart-namespaces %q names an empty namespace", strings.Join(opts.RestartNamespaces, ","))
		}
	}
	restartNS := slices.Compact(slices.Sorted(slices.Values(opts.RestartNamespaces)))
	c.auto = &automation{kube: kube, cm: opts.CertManager, cfg: opts.Config, poke: c.poke, restartNamespaces: restartNS}
	c.writer = observeWrites(c.crash.writer(rememberingWriter{Writer: &apply.KubeWriter{Client: kube, CertManager: opts.CertManager, Config: opts.Config}, auto: c.auto}),
		c.countWrite)
	c.steps = steps.NewOrdered(steps.Rotation(c.writer))
	c.wf = c.steps.Workflow()

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
	c.pods = podindex.NewPodInformer(pods, cfg, c.index, func(error) { metrics.watchErrors.WithLabelValues(WatchMeshedPods).Inc() })
	c.certs = probe.NewCertTracker(c.index, opts.Dial, opts.ProbeConcurrency, opts.ProbeTimeout, func(p *podindex.Pod) { c.churned(p.ControlPlane) })
	c.certs.OnProbe = metrics.countProbe
	metrics.soonestLeaf.setSource(c.certs.SoonestLeafExpiry)
	c.snapshots = &observe.Snapshotter{Config: cfg, Steps: c.steps, Caches: caches{c}, Index: c.index, Certs: c.certs, IssuerReloadTolerance: opts.IssuerReloadTolerance}

	for what, inf := range map[string]cache.SharedIndexInformer{WatchAnchorSecret: c.anchor, WatchPreviousAnchorSecret: c.previous,
		WatchIssuerSecret: c.issuer, WatchTrustBundle: c.bundle, WatchControlPlane: c.deployments, WatchRotations: c.rotation} {
		if err := inf.SetWatchErrorHandlerWithContext(metrics.watchErrorHandler(what)); err != nil {
			return nil, err
		}
	}
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

// Failed reconciles are retried after an exponential back-off, from failureBaseDelay up to
// failureMaxDelay.
const (
	failureBaseDelay = 500 * time.Millisecond
	failureMaxDelay  = 30 * time.Second
)

// initQueue makes the controller's workqueue and its failure limiter.
func (c *Controller) initQueue() {
	c.limiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](failureBaseDelay, failureMaxDelay)
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(c.limiter, workqueue.TypedRateLimitingQueueConfig[string]{})
}

// key is the queue's one key.
func (c *Controller) key() string { return c.opts.RotationName }

// poke asks for a reconcile; many pokes before it runs make one (the queue holds a key once).
func (c *Controller) poke() {
	c.poked.Store(true)
	c.queue.Add(c.key())
}

// recheckAfter asks for a reconcile at t, unless the running reconcile named an earlier moment
// (the queue keeps a key's earliest), and remembers it (wakeDue, reconcileCause).
func (c *Controller) recheckAfter(t time.Time) {
	if c.recheckAt.IsZero() || t.Before(c.recheckAt) {
		c.recheckAt = t
	}
	c.queue.AddAfter(c.key(), time.Until(t))
}

// Run reconciles until ctx ends. Call it only while leading: only the leader writes.
//
// The loop is client-go's workqueue's (k8s.io/client-go/util/workqueue; the sample-controller's
// processNextWorkItem): one key, the driven rotation's name, reconciled one at a time, and
// level-triggered: a reconcile reads everything afresh, so however many pokes came while one
// ran, one more reconcile follows them. What wakes it: a change (poke, the informers' events
// paced by churn.go, the probes' results, the automations' caches once synced; rotationUpdated
// drops the echo of the operator's own status write), a moment a reconcile named (recheckAfter,
// AddAfter), --max-poll-interval as a safety net, and a failure's back-off. A failed reconcile
// is retried after the limiter's back-off, and what wakes the loop before then reconciles
// nothing: the failure's own writes (the checkpoint saved before a failed act) would otherwise
// wake it at once, in a hot loop; the retry reads everything, so nothing a poke said is lost.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
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
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()

	c.queue.Add(c.key())
	cause := CauseStart
	for c.processNext(ctx, cause) {
		cause = ""
	}
	return nil
}

// processNext waits for the key, reconciles, and queues the key again for when the reconcile
// asked (or for the failure's back-off); false once the queue shut down. cause, when set, is
// the reconcile's cause, else reconcileCause says it.
func (c *Controller) processNext(ctx context.Context, cause string) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	now := time.Now()
	if cause == "" {
		if wait, due := c.wakeDue(now); !due {
			// Woken before its time: within a failure's back-off (by a poke, or a moment named
			// before the failure), or at a moment a later reconcile no longer named (the queue
			// keeps a key's earliest moment; it has no way to take one back). The key comes
			// back at the moment that is due, if any.
			if wait > 0 {
				c.queue.AddAfter(key, wait)
			}
			return true
		}
		cause = c.reconcileCause(now)
	}
	c.metrics.reconciles.WithLabelValues(cause).Inc()
	c.reconcileBegan = now
	c.controlPlaneChanged = c.churn.began(c.reconcileBegan)
	c.recheckAt, c.pollAt = time.Time{}, time.Time{}
	recheck, err := c.reconcile(ctx)
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		// A reconcile that changed the cluster before it failed made progress: the back-off
		// starts over (failedAfterWrites).
		if errors.As(err, new(failedAfterWrites)) {
			c.limiter.Forget(key)
		}
		delay := c.limiter.When(key)
		c.retryAt = time.Now().Add(delay)
		klog.FromContext(ctx).Error(err, "Reconcile failed; retrying", "after", delay)
		c.queue.AddAfter(key, delay)
		return true
	}
	c.limiter.Forget(key)
	if !recheck.IsZero() {
		c.recheckAfter(recheck)
	}
	if c.opts.MaxPollInterval > 0 {
		c.pollAt = now.Add(c.opts.MaxPollInterval)
		c.queue.AddAfter(key, c.opts.MaxPollInterval)
	}
	return true
}

// wakeDue says whether a reconcile is due at now, and if not, how long until one is (0: none
// is pending but a poke).
func (c *Controller) wakeDue(now time.Time) (time.Duration, bool) {
	if now.Before(c.retryAt) {
		return c.retryAt.Sub(now), false
	}
	if !c.retryAt.IsZero() || c.poked.Load() {
		return 0, true
	}
	var next time.Time
	for _, t := range []time.Time{c.recheckAt, c.pollAt} {
		if t.IsZero() {
			continue
		}
		if !now.Before(t) {
			return 0, true
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if next.IsZero() {
		return 0, false
	}
	return next.Sub(now), false
}

// reconcileCause says what woke the reconcile that wakeDue found due at now, for the
// reconciles metric: a failure before it (CauseRetry), a poke since the one before
// (CauseChange), a moment the one before named (CauseRecheck), else --max-poll-interval
// (CausePoll).
func (c *Controller) reconcileCause(now time.Time) string {
	retried, poked := !c.retryAt.IsZero(), c.poked.Swap(false)
	c.retryAt = time.Time{}
	switch {
	case retried:
		return CauseRetry
	case poked:
		return CauseChange
	case !c.recheckAt.IsZero() && !now.Before(c.recheckAt):
		return CauseRecheck
	}
	return CausePoll
}

// countWrite counts the writes of the acts that changed the cluster (observeWrites).
func (c *Controller) countWrite(wrote bool) {
	if wrote {
		c.writes++
	}
}

// newRecorder returns the recorder of the operator's Events, writing until ctx ends.
func newRecorder(ctx context.Context, clients kube.Interface) kube.EventRecorder {
	s := runtime.NewScheme()
	must(kube.AddToScheme(s))
	must(v1alpha1.AddToScheme(s))
	return kube.NewEventRecorder(ctx, clients, s, "trust-rotation-operator")
}
