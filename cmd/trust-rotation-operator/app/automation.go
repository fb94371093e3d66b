package app

import (
	"context"
	"slices"
	"sync"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
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

// overrideIndex indexes workloads whose pod template carries the operator's refresh override.
const overrideIndex = "refreshOverride"

// restartMarkIndex indexes workloads by the restart tokens they carry: the pod template's
// restartedAt and the evicted-for annotation.
const restartMarkIndex = "restartMark"

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
	// The reconcile that first needs the cache finds it not synced and waits for a poke. The
	// events of the initial list poke before the informer counts itself synced (the handlers run
	// beside the queue that marks it), and an empty list pokes not at all: the sync itself must.
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), l.hasSynced) {
			a.poke()
		}
	}()
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

// InScope reports whether automatic restarts may restart the workloads of the namespace.
func (a *automation) InScope(namespace string) bool {
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
			l.addEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) { a.StatusSeen(obj) }, DeleteFunc: a.forgetEviction})
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
		a.certificate.mu.Lock()
		a.certificate.forbidden = "spec.identityIssuerRenewal Automatic reads it; the chart grants that with rotation.spec.identityIssuerRenewal=Automatic, " +
			"not when only the TrustAnchorRotation says Automatic"
		a.certificate.mu.Unlock()
	}
}

// fill adds to the State what the automations the spec enables need, from the informers it
// starts for them (observe.FillAutomations reads them through the automation's getters).
func (a *automation) fill(ctx context.Context, s *steps.State, tar *v1alpha1.TrustAnchorRotation, rot *steps.Ordered, step string, index *podindex.Index) {
	a.ensure(ctx, tar.Spec)
	at, _ := rot.Named(step)
	observe.FillAutomations(s, a, tar, step, everyWorkload(at, s), index)
}

// everyWorkload reports whether the State read at the step must hold every meshed workload, as
// automatic restarts count them, or only those that still carry the refresh override: every
// one during a rotation, and at an idle step once a rotation is due (the anchor renewed). The
// pass that starts it may go on into a restart step within the same reconcile — a cross-signed
// rotation superseded after its reduction passes over the expansion and reaches
// propagate-trust-roots without acting — and decides there on this State.
func everyWorkload(at steps.Step, s *steps.State) bool {
	return !at.Idle() || s.Rotating()
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
