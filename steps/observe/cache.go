package observe

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
)

// CachedPod is what the operator's pod informer caches instead of a *corev1.Pod: the pod's
// Pod (shared with the PodIndex, not copied) and its resourceVersion. Even stripped, a
// corev1.Pod weighs a few kB (PodSpec, PodStatus and Container are large structs, labels and
// annotations are maps); at 10,000 meshed pods that was most of the operator's heap, held twice
// (cache and index). Even an empty ObjectMeta is 232 bytes, so the cache reads the pod's
// metadata through GetObjectMeta, built on demand; a CachedPod is 24 bytes.
type CachedPod struct {
	Pod             *Pod
	ResourceVersion string
}

// GetObjectKind implements runtime.Object: a cached pod carries no type metadata.
func (p *CachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The Pod is immutable once built, so it is shared.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	out := *p
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor, through which the cache (meta.Accessor)
// reads the namespace and name it keys the pod by.
func (p *CachedPod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{
		Namespace: p.Pod.Namespace, Name: p.Pod.Name, UID: types.UID(p.Pod.UID), ResourceVersion: p.ResourceVersion,
	}
}

// PodCacheTransform returns a cache.TransformFunc that turns each *WirePod (or *corev1.Pod) into
// a *CachedPod, with the identity names computed by cfg. Tombstones pass through.
func PodCacheTransform(cfg steps.Config) func(any) (any, error) {
	return func(obj any) (any, error) {
		var pod *corev1.Pod
		switch o := obj.(type) {
		case *WirePod:
			pod = &o.Pod
		case *corev1.Pod:
			pod = o
		default:
			return obj, nil
		}
		return &CachedPod{Pod: SlimPod(cfg, pod), ResourceVersion: pod.ResourceVersion}, nil
	}
}
