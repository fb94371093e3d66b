package observe

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/linkerd/trust-rotation/steps"
)

// CachedPod is what the operator's pod informer caches instead of a *corev1.Pod: the pod's
// Pod (shared with the PodIndex, not copied) and the metadata the cache keys and compares on.
// Even stripped by TransformPod, a corev1.Pod weighs a few kB (PodSpec, PodStatus and Container
// are large structs, labels and annotations are maps); at 10,000 meshed pods that was most of
// the operator's heap, held twice (cache and index). A CachedPod is a few hundred bytes.
type CachedPod struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Pod *Pod
}

// DeepCopyObject implements runtime.Object. The Pod is immutable once built, so it is shared.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	out := &CachedPod{TypeMeta: p.TypeMeta, Pod: p.Pod}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// PodCacheTransform returns a cache.TransformFunc that turns each *corev1.Pod into a
// *CachedPod, with the identity names computed by cfg. Tombstones pass through.
func PodCacheTransform(cfg steps.Config) func(any) (any, error) {
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		slim := SlimPod(cfg, pod)
		return &CachedPod{
			ObjectMeta: metav1.ObjectMeta{
				// The slim pod's name and namespace share one allocation with its key.
				Name: slim.Name, Namespace: slim.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			},
			Pod: slim,
		}, nil
	}
}
