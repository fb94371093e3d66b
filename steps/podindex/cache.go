package podindex

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
)

// PodInformer keeps an Index in step with a list-watch of pods: the index is the informer's
// store. Each event's pod is turned into a Pod (SlimPod) as it is queued, and the queue's consumer
// upserts it into the index, or deletes it, in the informer's own goroutine.
//
// client-go's SharedIndexInformer would keep a store of its own beside the index (a map entry, a
// key and a cached object per pod: about a fifth of the operator's heap at 10,000 pods), compute
// each pod's key through an ObjectMeta built for the purpose several times per event, and hand
// each event to the index through two more goroutines. The queue is client-go's (RealFIFO, what
// its informers use), with the index as its known objects: a relist that no longer lists a pod
// the index holds deletes it from the index, as it would from an informer's store.
type PodInformer struct {
	ctrl cache.Controller
}

// NewPodInformer returns an informer that feeds index from lw, with the identity names computed
// by cfg. lw lists and watches WirePods (MeshedPodsListWatch).
// onWatchError, when set, is told of each failed list or watch (after client-go's default
// handler has logged it and before the reflector backs off).
func NewPodInformer(lw cache.ListerWatcher, cfg steps.Config, index *Index, onWatchError func(error)) *PodInformer {
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Name:         "meshed pods",
		KeyFunction:  podKey,
		KnownObjects: indexKeys{index},
		Transformer:  PodTransform(cfg),
	})
	process := func(obj any, _ bool) error {
		deltas, _ := obj.(cache.Deltas)
		for _, d := range deltas {
			switch o := d.Object.(type) {
			case *Pod:
				if d.Type == cache.Deleted {
					index.Delete(o.Key())
				} else {
					index.Upsert(o)
				}
			case cache.DeletedFinalStateUnknown:
				index.Delete(o.Key)
			default:
				utilruntime.HandleError(fmt.Errorf("meshed pods informer: %s of a %T, not a pod", d.Type, d.Object))
			}
		}
		return nil
	}
	return &PodInformer{ctrl: cache.New(&cache.Config{
		Queue: fifo, ListerWatcher: lw, ObjectType: &WirePod{}, ObjectDescription: "meshed pods", Process: process,
		WatchErrorHandlerWithContext: func(ctx context.Context, r *cache.Reflector, err error) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			if onWatchError != nil {
				onWatchError(err)
			}
		},
	})}
}

// RunWithContext lists and watches until ctx ends.
func (i *PodInformer) RunWithContext(ctx context.Context) { i.ctrl.RunWithContext(ctx) }

// HasSynced reports whether the index holds every pod of the first list.
func (i *PodInformer) HasSynced() bool { return i.ctrl.HasSynced() }

// PodTransform returns a cache.TransformFunc that turns each *WirePod (or *corev1.Pod) into its
// *Pod, with the identity names computed by cfg. Anything else (a tombstone) passes through.
func PodTransform(cfg steps.Config) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *WirePod:
			return SlimPod(cfg, &o.Pod), nil
		case *corev1.Pod:
			return SlimPod(cfg, o), nil
		}
		return obj, nil
	}
}

// podKey is the queue's key of a pod, before PodTransform (the queue checks each object's key as
// it comes) and after: namespace/name.
func podKey(obj any) (string, error) {
	switch o := obj.(type) {
	case *Pod:
		return o.Key(), nil
	case *WirePod:
		return o.Namespace + "/" + o.Name, nil
	}
	return cache.MetaNamespaceKeyFunc(obj)
}

// indexKeys is the index as the queue's known objects (cache.KeyListerGetter).
type indexKeys struct{ x *Index }

func (k indexKeys) ListKeys() []string {
	k.x.mu.RLock()
	defer k.x.mu.RUnlock()
	keys := make([]string, 0, len(k.x.pods))
	for key := range k.x.pods {
		keys = append(keys, key)
	}
	return keys
}

func (k indexKeys) GetByKey(key string) (any, bool, error) {
	p, ok := k.x.Get(key)
	return p, ok, nil
}
