package app

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

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
	// forbidden, when set, says what grants the watch where the RBAC refuses it; the workload
	// informers' default names the restart namespaces.
	forbidden string
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
	case l.forbidden != "" && apierrors.IsForbidden(l.err):
		return false, fmt.Sprintf("cannot watch %s: %v (%s)", l.what, l.err, l.forbidden)
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
