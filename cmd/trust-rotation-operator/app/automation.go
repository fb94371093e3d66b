package app

import (
	"context"
	"fmt"
	"slices"
	"sync"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// automation is the operator's view of what the opt-in automations need, and only they: the
// workloads of every namespace and the namespaces (automatic restarts), PodDisruptionBudgets
// (restarts by eviction) and the identity issuer's Certificate (automatic issuer renewal). Its
// informers start the first time the spec asks for them, so an operator whose RBAC grants none
// of this (the chart's default) never lists any of it.
type automation struct {
	kube kube.Interface
	cm   kube.CertManager
	cfg  steps.Config
	poke func()
	// restartNamespaces are the only namespaces whose workloads automatic restarts watch and
	// restart (--restart-namespaces); empty means every namespace.
	restartNamespaces []string

	mu                                                sync.Mutex
	deployments, statefulSets, daemonSets, namespaces *lazyInformer
	pdbs, certificate                                 *lazyInformer

	// written holds the restart tokens the operator wrote to workloads, by "ns/Kind/name", until
	// its cache shows them: a reconcile right after an act must count that restart in the budget
	// even though the informer has not delivered the patch yet.
	written map[string]writtenMark

	// evicted holds, by "ns/Kind/name", the workload's status as the cache showed it when the
	// operator evicted some of its pods, until the cache shows another status. An eviction
	// changes no generation, so until the controller writes its status again the cached status
	// is the one from before the eviction (rolled out); the workload counts against the restart
	// budget meanwhile (steps.Workload.Settling). Informer events clear it, so that a status
	// that moves and comes back between two reconciles is not missed.
	evicted map[string]any
}

// writtenMark is a write the cache may not show yet.
type writtenMark struct{ restartedAt, evictedFor string }

// remember records a restart or an eviction mark the operator just wrote.
func (a *automation) remember(ref steps.WorkloadRef, m writtenMark) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.written == nil {
		a.written = map[string]writtenMark{}
	}
	prev := a.written[ref.String()]
	if m.restartedAt == "" {
		m.restartedAt = prev.restartedAt
	}
	if m.evictedFor == "" {
		m.evictedFor = prev.evictedFor
	}
	a.written[ref.String()] = m
}

// overlay makes a workload read from a stale cache show the operator's own latest write: a
// restart the cache does not show yet is a rollout that has not started.
func (a *automation) overlay(w *steps.Workload) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.written[w.String()]
	if !ok {
		return
	}
	seen := true
	if m.restartedAt != "" && w.RestartedAt != m.restartedAt {
		w.RestartedAt, w.RolledOut, w.Progress, seen = m.restartedAt, false, "waiting for the restart to be observed", false
	}
	if m.evictedFor != "" && w.EvictedFor != m.evictedFor {
		w.EvictedFor, seen = m.evictedFor, false
	}
	if seen {
		delete(a.written, w.String())
	}
}

// statusOf is a copy of a workload's status, or nil for another object.
func statusOf(obj any) any {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return *o.Status.DeepCopy()
	case *appsv1.StatefulSet:
		return *o.Status.DeepCopy()
	case *appsv1.DaemonSet:
		return *o.Status.DeepCopy()
	}
	return nil
}

// cachedStatus is the workload's status as the cache shows it now.
func (a *automation) cachedStatus(ref steps.WorkloadRef) (any, bool) {
	a.mu.Lock()
	l := a.informerFor(ref.Kind)
	a.mu.Unlock()
	if l == nil {
		return nil, false
	}
	obj := l.get(ref.Namespace, ref.Name)
	if obj == nil {
		return nil, false
	}
	return statusOf(obj), true
}

// evicted records, once the apiserver accepted an eviction of the workload's pods, its status
// as the cache showed it before (taken before: the status may move as soon as the first pod
// goes). A mark already there is kept: its status is older still (a repeated act, before the
// cache shows the first eviction, must not take a status that already moved as the reference).
// No mark is left when nothing was evicted (a PodDisruptionBudget answered 429): the status
// would never move, and the workload would settle for ever.
func (a *automation) markEvicted(ref steps.WorkloadRef, before any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.evicted == nil {
		a.evicted = map[string]any{}
	}
	if _, ok := a.evicted[ref.String()]; !ok {
		a.evicted[ref.String()] = before
	}
}

// statusSeen forgets the eviction mark of the workload once obj shows another status than the
// one recorded at the eviction, and reports whether none is left.
func (a *automation) statusSeen(obj any) bool {
	key := observe.WorkloadKey(obj)
	a.mu.Lock()
	defer a.mu.Unlock()
	before, ok := a.evicted[key]
	if !ok {
		return true
	}
	if equality.Semantic.DeepEqual(before, statusOf(obj)) {
		return false
	}
	delete(a.evicted, key)
	return true
}

// forgetEviction drops the eviction mark of a deleted workload.
func (a *automation) forgetEviction(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	a.mu.Lock()
	delete(a.evicted, observe.WorkloadKey(obj))
	a.mu.Unlock()
}

// rememberingWriter tells the automation about the workload writes it makes.
type rememberingWriter struct {
	steps.Writer
	auto *automation
}

func (r rememberingWriter) RestartWorkload(ctx context.Context, w steps.WorkloadRef, token string, ann map[string]*string) error {
	err := r.Writer.RestartWorkload(ctx, w, token, ann)
	if err == nil {
		r.auto.remember(w, writtenMark{restartedAt: token})
	}
	return err
}

func (r rememberingWriter) AnnotateWorkload(ctx context.Context, w steps.WorkloadRef, ann map[string]string) error {
	err := r.Writer.AnnotateWorkload(ctx, w, ann)
	if err == nil && ann[steps.EvictedForAnnotation] != "" {
		r.auto.remember(w, writtenMark{evictedFor: ann[steps.EvictedForAnnotation]})
	}
	return err
}

func (r rememberingWriter) EvictPods(ctx context.Context, w steps.WorkloadRef, names []string) (int, error) {
	before, cached := r.auto.cachedStatus(w)
	n, err := r.Writer.EvictPods(ctx, w, names)
	if n > 0 && cached {
		r.auto.markEvicted(w, before)
	}
	return n, err
}

// overrideIndex indexes workloads whose pod template carries the operator's refresh override.
const overrideIndex = "refreshOverride"

// restartMarkIndex indexes workloads by the restart tokens they carry: the pod template's
// restartedAt and the evicted-for annotation.
const restartMarkIndex = "restartMark"

// lazyInformer is an informer started on first use, remembering its last list/watch error: one
// cluster-wide, or one per namespace of the operator's restart namespaces (--restart-namespaces),
// where its RBAC lets it list the workloads of those namespaces only.
type lazyInformer struct {
	what string
	// infs are the informers by namespace; "" is the cluster-wide one.
	infs map[string]cache.SharedIndexInformer
	mu   sync.Mutex
	err  error
	// errNamespace is the namespace of the informer that failed, "" for a cluster-wide one.
	errNamespace string
}

// singleInformer wraps one informer, cluster-wide or of a cluster-scoped resource.
func singleInformer(what string, inf cache.SharedIndexInformer) *lazyInformer {
	return &lazyInformer{what: what, infs: map[string]cache.SharedIndexInformer{metav1.NamespaceAll: inf}}
}

func (l *lazyInformer) hasSynced() bool {
	for _, inf := range l.infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (l *lazyInformer) ready() (bool, string) {
	if l.hasSynced() {
		return true, ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err == nil:
		return false, "waiting for the cache of " + l.what
	case l.errNamespace != "":
		return false, fmt.Sprintf("cannot watch %s in namespace %s: %v", l.what, l.errNamespace, l.err)
	case apierrors.IsForbidden(l.err):
		return false, fmt.Sprintf("cannot watch %s cluster-wide: %v (automatic restarts list them in every namespace "+
			"unless the operator runs with --restart-namespaces, which the chart sets with dataPlaneRestart.rbacScope=Namespaces)", l.what, l.err)
	}
	return false, fmt.Sprintf("cannot watch %s: %v", l.what, l.err)
}

// get returns the object namespace/name, or nil when it is not cached.
func (l *lazyInformer) get(namespace, name string) any {
	inf := l.infs[metav1.NamespaceAll]
	if inf == nil {
		inf = l.infs[namespace]
	}
	if inf == nil {
		return nil
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, found, _ := inf.GetStore().GetByKey(key)
	if !found {
		return nil
	}
	return obj
}

// byIndex returns the objects of every informer with the indexed value.
func (l *lazyInformer) byIndex(index, value string) []any {
	var out []any
	for _, inf := range l.infs {
		objs, _ := inf.GetIndexer().ByIndex(index, value)
		out = append(out, objs...)
	}
	return out
}

func (l *lazyInformer) addEventHandler(h cache.ResourceEventHandler) {
	for _, inf := range l.infs {
		if _, err := inf.AddEventHandler(h); err != nil {
			panic(err)
		}
	}
}

// start starts an informer of lw(namespace) in each namespace ("" once, for every namespace).
func (a *automation) start(ctx context.Context, what string, namespaces []string, lw func(namespace string) cache.ListerWatcher, obj runtime.Object, transform cache.TransformFunc, indexers cache.Indexers) *lazyInformer {
	l := &lazyInformer{what: what, infs: map[string]cache.SharedIndexInformer{}}
	for _, ns := range namespaces {
		inf := cache.NewSharedIndexInformer(lw(ns), obj, 0, indexers)
		must(inf.SetTransform(transform))
		must(inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			l.mu.Lock()
			l.err, l.errNamespace = err, ns
			l.mu.Unlock()
			cache.DefaultWatchErrorHandler(ctx, r, err)
			a.poke()
		}))
		l.infs[ns] = inf
	}
	l.addEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { a.poke() }, UpdateFunc: func(any, any) { a.poke() }, DeleteFunc: func(any) { a.poke() }})
	for _, inf := range l.infs {
		go inf.RunWithContext(ctx)
	}
	return l
}

func listWatch[T runtime.Object](list func(context.Context, metav1.ListOptions) (T, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error), mutate func(*metav1.ListOptions)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if mutate != nil {
				mutate(&o)
			}
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if mutate != nil {
				mutate(&o)
			}
			return w(ctx, o)
		},
	}
}

var workloadIndexers = cache.Indexers{
	cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
	overrideIndex: func(obj any) ([]string, error) {
		if t := observe.TemplateOf(obj); t != nil && t.Annotations[steps.RefreshOverrideAnnotation] != "" {
			return []string{"yes"}, nil
		}
		return nil, nil
	},
	restartMarkIndex: func(obj any) ([]string, error) {
		var marks []string
		if m, ok := obj.(metav1.Object); ok && m.GetAnnotations()[steps.EvictedForAnnotation] != "" {
			marks = append(marks, m.GetAnnotations()[steps.EvictedForAnnotation])
		}
		if t := observe.TemplateOf(obj); t != nil && t.Annotations[steps.RestartedAtAnnotation] != "" {
			marks = append(marks, t.Annotations[steps.RestartedAtAnnotation])
		}
		return marks, nil
	},
}

// workloadNamespaces are the namespaces of the workload informers: the restart namespaces, or
// "" for one informer of every namespace.
func (a *automation) workloadNamespaces() []string {
	if len(a.restartNamespaces) == 0 {
		return []string{metav1.NamespaceAll}
	}
	return a.restartNamespaces
}

// inScope reports whether automatic restarts may restart the workloads of the namespace.
func (a *automation) inScope(namespace string) bool {
	return len(a.restartNamespaces) == 0 || slices.Contains(a.restartNamespaces, namespace)
}

// ensure starts the informers the spec needs, once.
func (a *automation) ensure(ctx context.Context, spec v1alpha1.TrustAnchorRotationSpec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	apps, core := a.kube.AppsV1(), a.kube.CoreV1()
	nss := a.workloadNamespaces()
	if spec.DataPlaneRestart.Policy == v1alpha1.Automatic && a.deployments == nil {
		a.deployments = a.start(ctx, "deployments", nss, func(ns string) cache.ListerWatcher {
			return listWatch(apps.Deployments(ns).List, apps.Deployments(ns).Watch, nil)
		}, &appsv1.Deployment{}, observe.SlimWorkload, workloadIndexers)
		a.statefulSets = a.start(ctx, "statefulsets", nss, func(ns string) cache.ListerWatcher {
			return listWatch(apps.StatefulSets(ns).List, apps.StatefulSets(ns).Watch, nil)
		}, &appsv1.StatefulSet{}, observe.SlimWorkload, workloadIndexers)
		a.daemonSets = a.start(ctx, "daemonsets", nss, func(ns string) cache.ListerWatcher {
			return listWatch(apps.DaemonSets(ns).List, apps.DaemonSets(ns).Watch, nil)
		}, &appsv1.DaemonSet{}, observe.SlimWorkload, workloadIndexers)
		for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets} {
			// Every status the watch delivers, not only the one a reconcile happens to read.
			l.addEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) { a.statusSeen(obj) }, DeleteFunc: a.forgetEviction})
		}
		a.namespaces = a.start(ctx, "namespaces", []string{metav1.NamespaceAll}, func(string) cache.ListerWatcher {
			return listWatch(core.Namespaces().List, core.Namespaces().Watch, nil)
		}, &corev1.Namespace{}, observe.SlimWorkload, cache.Indexers{})
	}
	// PodDisruptionBudgets for every automatic restart: the Evict method evicts every workload,
	// RolloutRestart those a template change does not restart (Workload.NoRollout).
	if spec.DataPlaneRestart.Policy == v1alpha1.Automatic && a.pdbs == nil {
		policy := a.kube.PolicyV1()
		a.pdbs = a.start(ctx, "poddisruptionbudgets", nss, func(ns string) cache.ListerWatcher {
			return listWatch(policy.PodDisruptionBudgets(ns).List, policy.PodDisruptionBudgets(ns).Watch, nil)
		}, &policyv1.PodDisruptionBudget{}, observe.SlimWorkload, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	if spec.IdentityIssuerRenewal == v1alpha1.Automatic && a.certificate == nil && a.cm != nil {
		c := a.cm.CertmanagerV1().Certificates(a.cfg.LinkerdNamespace)
		byName := func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.cfg.IssuerCertificate).String()
		}
		a.certificate = a.start(ctx, "Certificate "+a.cfg.LinkerdNamespace+"/"+a.cfg.IssuerCertificate, []string{metav1.NamespaceAll}, func(string) cache.ListerWatcher {
			return listWatch(c.List, c.Watch, byName)
		}, &cmapi.Certificate{}, observe.SlimWorkload, cache.Indexers{})
	}
}

// fill adds to the State what the automations the spec enables need.
func (a *automation) fill(ctx context.Context, s *steps.State, tar *v1alpha1.TrustAnchorRotation, step string, index *podindex.Index) {
	observe.FromRotation(s, tar)
	a.ensure(ctx, tar.Spec)
	if tar.Spec.IdentityIssuerRenewal == v1alpha1.Automatic {
		a.fillCertificate(s)
	}
	if tar.Spec.DataPlaneRestart.Policy == v1alpha1.Automatic {
		token := ""
		if cp := tar.Status.Checkpoint; cp != nil && cp.Step == step {
			token = cp.Token
		}
		// At an idle step automatic restarts need to know only the workloads that still carry
		// the refresh override; during a rotation they look at every meshed workload (the
		// workflow may pass into a restart step within one reconcile).
		at, _ := steps.Named(step)
		a.fillWorkloads(s, !at.Idle(), index, token)
	}
}

func (a *automation) fillCertificate(s *steps.State) {
	ns, name := a.cfg.LinkerdNamespace, a.cfg.IssuerCertificate
	s.IssuerCertificate = observe.IssuerCertificateFrom(ns, name, nil)
	if a.certificate == nil {
		s.IssuerCertificate.Err = "no cert-manager client"
		return
	}
	if ok, why := a.certificate.ready(); !ok {
		s.IssuerCertificate.Err = why
		return
	}
	if obj := a.certificate.get(ns, name); obj != nil {
		s.IssuerCertificate = observe.IssuerCertificateFrom(ns, name, obj.(*cmapi.Certificate))
	}
}

// fillWorkloads adds the workloads a restart step needs: those with meshed pods, those carrying
// the refresh override, and those the step's act (token) restarted or evicted. The last come
// from their own marks, not from their pods: between an evicted pod's removal and its
// replacement's arrival in the pod cache a workload may have no pod at all, and it must still
// count against the restart budget.
func (a *automation) fillWorkloads(s *steps.State, all bool, index *podindex.Index, token string) {
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets, a.namespaces, a.pdbs} {
		if l == nil {
			continue
		}
		if ok, why := l.ready(); !ok {
			s.WorkloadsProblem = why
			return
		}
	}
	s.Workloads = map[string]*steps.Workload{}
	get := func(key string) *steps.Workload { return observe.WorkloadOf(s, key) }
	// The workloads carrying the refresh override, at every step: the override is in effect.
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets} {
		for _, obj := range l.byIndex(overrideIndex, "yes") {
			get(observe.WorkloadKey(obj))
		}
	}
	if all && token != "" {
		for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets} {
			for _, obj := range l.byIndex(restartMarkIndex, token) {
				get(observe.WorkloadKey(obj))
			}
		}
		var written []string // marks the cache may not show yet
		a.mu.Lock()
		for key, m := range a.written {
			if m.restartedAt == token || m.evictedFor == token {
				written = append(written, key)
			}
		}
		a.mu.Unlock()
		for _, key := range written {
			get(key)
		}
	}
	if all {
		observe.AddMeshedWorkloads(s, index)
	}
	for _, w := range s.Workloads {
		a.describe(s, w)
	}
}

// informerFor returns the informer of a restartable workload kind, nil for any other kind (or
// before the informer started).
func (a *automation) informerFor(kind string) *lazyInformer {
	switch kind {
	case "Deployment":
		return a.deployments
	case "StatefulSet":
		return a.statefulSets
	case "DaemonSet":
		return a.daemonSets
	}
	return nil
}

// describe fills a workload from its object, its namespace and the PodDisruptionBudgets, then
// shows the operator's own writes the cache may not show yet.
func (a *automation) describe(s *steps.State, w *steps.Workload) {
	obj := observe.DescribeWorkload(s, a, w, a.inScope(w.Namespace))
	if obj == nil {
		return
	}
	a.overlay(w)
	if !a.statusSeen(obj) {
		w.Settling = "waiting for its status to show the eviction"
	}
}

// Workload, Namespace and PodDisruptionBudgets read the informers' caches (observe.WorkloadObjects).

func (a *automation) Workload(ref steps.WorkloadRef) any {
	l := a.informerFor(ref.Kind)
	if l == nil {
		return nil
	}
	return l.get(ref.Namespace, ref.Name)
}

func (a *automation) Namespace(name string) *corev1.Namespace {
	if a.namespaces == nil {
		return nil
	}
	obj := a.namespaces.get("", name)
	if obj == nil {
		return nil
	}
	return obj.(*corev1.Namespace)
}

func (a *automation) PodDisruptionBudgets(namespace string) []*policyv1.PodDisruptionBudget {
	if a.pdbs == nil {
		return nil
	}
	var out []*policyv1.PodDisruptionBudget
	for _, o := range a.pdbs.byIndex(cache.NamespaceIndex, namespace) {
		out = append(out, o.(*policyv1.PodDisruptionBudget))
	}
	return out
}
