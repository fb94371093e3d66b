package app

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// The Link API and the credentials' key, as observe reads them.
const (
	DefaultMulticlusterNamespace = observe.DefaultMulticlusterNamespace
	LinkGroup                    = observe.LinkGroup
	LinkResource                 = observe.LinkResource
	LinkCredentialsKey           = observe.LinkCredentialsKey
	// SourceSpec is the source of a remote named in spec.remoteClusters.
	SourceSpec = observe.SourceSpec
)

// remotes finds the linked clusters — the Links of the multicluster namespace and the spec's
// remoteClusters — and keeps a watch on each one's TrustAnchorRotation with the cluster's
// credentials. It only reads remote clusters: a GET of the one object, then a WATCH of it
// (field selector metadata.name), renewed when the apiserver ends it; never a write, never a
// list. Each change pokes the controller.
type remotes struct {
	kube      kube.Interface
	namespace string
	poke      func()
	// watchTimeout bounds one remote watch; its renewal is a read that keeps the report fresh.
	watchTimeout time.Duration
	dyn          dynamic.Interface
	disco        observe.GroupLister
	// links watches the Links; nil when Link discovery is off.
	links cache.SharedIndexInformer

	mu       sync.Mutex
	ctx      context.Context
	clusters map[string]*remoteWatch
}

// remoteWatch is the watch on one remote cluster's TrustAnchorRotation and what it last saw.
type remoteWatch struct {
	target observe.RemoteTarget
	cancel context.CancelFunc
	done   chan struct{}

	mu           sync.Mutex
	problem      string
	found        bool
	obj          *v1alpha1.TrustAnchorRotation
	lastObserved time.Time
}

// newRemotes sets up the remote watches. dyn and disco find and watch the Links of namespace;
// either nil, or namespace empty, turns Link discovery off (spec.remoteClusters still work, but
// for an empty namespace have no Secret to read).
func newRemotes(clients kube.Interface, dyn dynamic.Interface, disco observe.GroupLister, namespace string,
	watchTimeout time.Duration, poke func()) *remotes {
	r := &remotes{kube: clients, dyn: dyn, disco: disco, namespace: namespace, poke: poke, watchTimeout: watchTimeout, clusters: map[string]*remoteWatch{}}
	if r.watchTimeout <= 0 {
		r.watchTimeout = time.Minute
	}
	return r
}

// start finds the Link API and runs the Link informer (when discovery is on), and waits for
// it; remote watches start at the first sync. Call it once elected.
func (r *remotes) start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	log := klog.FromContext(ctx)
	if r.dyn == nil || r.disco == nil || r.namespace == "" {
		log.Info("Link discovery off: remote clusters come from spec.remoteClusters alone")
		return nil
	}
	version, err := observe.LinkVersion(r.disco)
	if err != nil {
		return err
	}
	if version == "" {
		log.Info("Link discovery off: the apiserver serves no " + LinkResource + "." + LinkGroup + " (Linkerd multicluster is not installed)")
		return nil
	}
	gvr := observe.LinkGVR(version)
	// What a dynamic informer factory builds, without its package, which imports every typed
	// informer client-go has (see package kube).
	res := r.dyn.Resource(gvr).Namespace(r.namespace)
	links := cache.NewSharedIndexInformer(listWatch(res.List, res.Watch, nil), &unstructured.Unstructured{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if _, err := links.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { r.poke() }, UpdateFunc: func(any, any) { r.poke() }, DeleteFunc: func(any) { r.poke() },
	}); err != nil {
		return err
	}
	go links.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), links.HasSynced) {
		return errors.New("the Link informer did not sync")
	}
	r.mu.Lock()
	r.links = links
	r.mu.Unlock()
	log.Info("Discovering linked clusters from Links", "namespace", r.namespace, "version", gvr.Version)
	return nil
}

// targets are the remote clusters to watch: every Link, then spec.remoteClusters, which win
// over a Link to a cluster of the same name.
func (r *remotes) targets(spec []v1alpha1.RemoteCluster) map[string]observe.RemoteTarget {
	var links []observe.RemoteTarget
	if r.links != nil {
		for _, obj := range r.links.GetStore().List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				links = append(links, observe.LinkTarget(u))
			}
		}
	}
	out := map[string]observe.RemoteTarget{}
	for _, t := range observe.RemoteTargets(links, spec) {
		out[t.Name] = t
	}
	return out
}

// sync starts a watch for each remote cluster that has none (or whose target changed) and stops
// the watches of clusters no longer linked: their gates are dropped.
func (r *remotes) sync(spec []v1alpha1.RemoteCluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := r.targets(spec)
	if r.ctx == nil {
		return
	}
	for name, w := range r.clusters {
		if t, ok := want[name]; !ok || t != w.target {
			w.cancel()
			delete(r.clusters, name)
			klog.FromContext(r.ctx).Info("Stopped watching a remote cluster", "cluster", name, "source", w.target.Source)
		}
	}
	for name, t := range want {
		if _, ok := r.clusters[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(r.ctx)
		w := &remoteWatch{target: t, cancel: cancel, done: make(chan struct{})}
		r.clusters[name] = w
		klog.FromContext(r.ctx).Info("Watching a remote cluster's TrustAnchorRotation", "cluster", name, "source", t.Source,
			"credentials", r.namespace+"/"+t.Secret, "rotation", t.Rotation)
		go w.run(ctx, r)
	}
}

// snapshot is what every remote watch saw, in cluster-name order.
func (r *remotes) snapshot() []steps.Remote {
	r.mu.Lock()
	ws := make([]*remoteWatch, 0, len(r.clusters))
	for _, w := range r.clusters {
		ws = append(ws, w)
	}
	r.mu.Unlock()
	out := make([]steps.Remote, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.remote())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (w *remoteWatch) remote() steps.Remote {
	w.mu.Lock()
	defer w.mu.Unlock()
	rm := steps.Remote{Name: w.target.Name, Source: w.target.Source, RotationName: w.target.Rotation,
		Problem: w.problem, Found: w.found, LastObserved: w.lastObserved}
	if w.obj != nil {
		rm.Generation, rm.Status = w.obj.Generation, *w.obj.Status.DeepCopy()
	}
	return rm
}

func (w *remoteWatch) setProblem(problem string, poke func()) {
	w.mu.Lock()
	changed := w.problem != problem
	w.problem = problem
	w.mu.Unlock()
	if changed {
		poke()
	}
}

// observed records a read: the object (nil when the remote has none) at time now.
func (w *remoteWatch) observed(obj *v1alpha1.TrustAnchorRotation, now time.Time, poke func()) {
	w.mu.Lock()
	w.problem, w.found, w.obj, w.lastObserved = "", obj != nil, obj, now
	w.mu.Unlock()
	poke()
}

// run reads the remote TrustAnchorRotation and watches it until ctx ends: credentials from the
// local Secret at each (re)connection, so that renewed credentials are picked up; a failure is
// the remote's problem (which holds the gates) and is retried with a backoff.
func (w *remoteWatch) run(ctx context.Context, r *remotes) {
	defer close(w.done)
	log := klog.FromContext(ctx).WithValues("cluster", w.target.Name)
	newBackoff := func() retry.Backoff {
		return retry.WithCappedDuration(30*time.Second, retry.NewExponential(500*time.Millisecond))
	}
	backoff := newBackoff()
	for ctx.Err() == nil {
		err := w.watchOnce(ctx, r)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = newBackoff() // the apiserver ended the watch: renew it at once
			continue
		}
		w.setProblem(err.Error(), r.poke)
		delay, _ := backoff.Next()
		log.V(2).Info("Cannot read the remote cluster's TrustAnchorRotation; retrying", "err", err, "after", delay)
		if !kube.Wait(ctx, delay) {
			return
		}
	}
}

// watchOnce connects with the current credentials, reads the object, and follows its watch
// until the apiserver ends it (nil) or it fails.
func (w *remoteWatch) watchOnce(ctx context.Context, r *remotes) error {
	tars, err := w.client(ctx, r)
	if err != nil {
		return err
	}
	getCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	obj, err := tars.Get(getCtx, w.target.Rotation)
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		w.observed(nil, time.Now(), r.poke)
		obj = nil
	case err != nil:
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", w.target.Rotation, err)
	default:
		w.observed(obj, time.Now(), r.poke)
	}
	timeout := int64(r.watchTimeout / time.Second)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", w.target.Rotation).String(), TimeoutSeconds: &timeout}
	if obj != nil {
		opts.ResourceVersion = obj.ResourceVersion
	}
	watcher, err := tars.Watch(ctx, opts)
	if err != nil {
		return fmt.Errorf("watching TrustAnchorRotation %s: %w", w.target.Rotation, err)
	}
	defer watcher.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if tar, ok := ev.Object.(*v1alpha1.TrustAnchorRotation); ok {
					w.observed(tar, time.Now(), r.poke)
				}
			case watch.Deleted:
				w.observed(nil, time.Now(), r.poke)
			case watch.Error:
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
					return nil // expired resource version: read again
				}
				return fmt.Errorf("watching TrustAnchorRotation %s: %v", w.target.Rotation, apierrors.FromObject(ev.Object))
			}
		}
	}
}

// client builds a client for the remote cluster from the kubeconfig in the credentials Secret.
func (w *remoteWatch) client(ctx context.Context, r *remotes) (*client.Client, error) {
	if r.namespace == "" {
		return nil, fmt.Errorf("the operator has no multicluster namespace (--multicluster-namespace) to read credentials Secret %s from", w.target.Secret)
	}
	return observe.RemoteClient(ctx, r.kube, r.namespace, w.target, "trust-rotation-operator (remote read)")
}
