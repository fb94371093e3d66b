package podindex

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
)

// WirePod is a v1 Pod as the operator's pod informer decodes it from the apiserver's protobuf:
// only what SlimPod and the informer read (the pod's names, UID, resourceVersion, timestamps,
// controller, service account, the few labels and annotations the rotation looks at, the proxy
// container's name, ports, refresh env and restart policy, the phase, the IP, and the container
// statuses' restart counts and start times). Every other field is skipped on the wire, never
// allocated.
//
// While pods roll, every pod event is decoded: a meshed pod is mostly what the rotation does not
// read (the application's and the proxy's containers with their dozens of env vars, volumes,
// managed fields), and decoding all of it into a corev1.Pod, only for the informer's transform
// to keep a few fields, was a fifth of the operator's CPU and most of its garbage
// (docs/performance-log.md). A scheme that maps v1 Pod and PodList to WirePod and WirePodList
// (WireScheme) makes client-go's protobuf decoder call Unmarshal below.
//
// A JSON response decodes into the embedded corev1.Pod in full, as it would without WirePod.
type WirePod struct {
	corev1.Pod
}

// WirePodList is a v1 PodList decoded as WirePods.
type WirePodList struct {
	metav1.TypeMeta
	metav1.ListMeta `json:"metadata"`
	Items           []WirePod `json:"items"`
}

// Labels and annotations a WirePod keeps: those SlimPod reads, and the one that marks the end of
// a watch-list's initial events (the reflector reads it on a bookmark).
var (
	wireLabels      = []string{steps.ControlPlaneNSLabel, steps.ControlPlaneComponentLabel, podTemplateHashLabel}
	wireAnnotations = []string{steps.TrustRootSHA256Annotation, steps.RestartedAtAnnotation, metav1.InitialEventsAnnotationKey}
)

const podTemplateHashLabel = "pod-template-hash"

// DeepCopyObject implements runtime.Object.
func (p *WirePod) DeepCopyObject() runtime.Object { return &WirePod{Pod: *p.Pod.DeepCopy()} }

// Reset clears the pod, as the protobuf decoder expects before Unmarshal.
func (p *WirePod) Reset() { *p = WirePod{} }

// Unmarshal decodes a v1 Pod's protobuf, keeping what WirePod says. Container statuses other
// than the proxy's are folded into one that holds the latest start of any container.
func (p *WirePod) Unmarshal(data []byte) error {
	if err := decodePod(data, &p.Pod); err != nil {
		return fmt.Errorf("decoding a v1 Pod: %w", err)
	}
	return nil
}

// DeepCopyObject implements runtime.Object.
func (l *WirePodList) DeepCopyObject() runtime.Object {
	out := &WirePodList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]WirePod, len(l.Items))
	for i := range l.Items {
		l.Items[i].Pod.DeepCopyInto(&out.Items[i].Pod)
	}
	return out
}

// Reset clears the list, as the protobuf decoder expects before Unmarshal.
func (l *WirePodList) Reset() { *l = WirePodList{} }

// Unmarshal decodes a v1 PodList's protobuf: its list metadata, and each item as a WirePod.
func (l *WirePodList) Unmarshal(data []byte) error {
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes): // metadata
			m := wireReader{data: r.v}
			for m.next() {
				switch {
				case m.is(2, wireBytes):
					l.ResourceVersion = string(m.v)
				case m.is(3, wireBytes):
					l.Continue = string(m.v)
				case m.is(4, wireVarint):
					remaining := int64(m.n)
					l.RemainingItemCount = &remaining
				}
			}
			r.fail(m.err)
		case r.is(2, wireBytes): // items
			l.Items = append(l.Items, WirePod{})
			if err := decodePod(r.v, &l.Items[len(l.Items)-1].Pod); err != nil {
				// One pod that does not decode must not fail the list, and with it the informer
				// of every meshed pod: it is skipped, and counted (SkippedPods).
				skipped(&l.Items[len(l.Items)-1].Pod, err)
				l.Items = l.Items[:len(l.Items)-1]
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("decoding a v1 PodList: %w", r.err)
	}
	return nil
}

// skippedPods counts the pods a list skipped, or a watch could not decode (SkippedPods).
var skippedPods atomic.Int64

// SkippedPods is how many pods the wire decoder could not decode since the process started: a
// list skips them (WirePodList.Unmarshal), a watch event of one ends the watch, and the
// reflector lists again, without it. The operator exports it as a metric.
func SkippedPods() int64 { return skippedPods.Load() }

// skipped counts and logs a pod that did not decode, named as far as its metadata decoded.
func skipped(pod *corev1.Pod, err error) {
	skippedPods.Add(1)
	klog.Background().Error(err, "Skipping a meshed pod that does not decode", "pod", klog.KObj(pod))
}

// WireScheme returns a scheme for reading meshed pods as WirePods: v1 Pod and PodList are
// WirePod and WirePodList, with the meta kinds of options, watch events and errors.
func WireScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("Pod"), &WirePod{})
	s.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("PodList"), &WirePodList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return s
}

var (
	wireScheme     = WireScheme()
	wireParameters = runtime.NewParameterCodec(wireScheme)
)

// WirePodsListWatch lists and watches the meshed pods (MeshedPodSelector) of every namespace as
// WirePods, in protobuf, through core: a client that decodes with WireSerializer.
func WirePodsListWatch(core rest.Interface) *cache.ListWatch {
	request := func(o metav1.ListOptions) *rest.Request {
		o.LabelSelector = MeshedPodSelector
		var timeout time.Duration
		if o.TimeoutSeconds != nil {
			timeout = time.Duration(*o.TimeoutSeconds) * time.Second
		}
		return core.Get().UseProtobufAsDefault().Resource("pods").VersionedParams(&o, wireParameters).Timeout(timeout)
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			out := &WirePodList{}
			return out, request(o).Do(ctx).Into(out)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return request(o).Watch(ctx)
		},
	}
}

// MeshedPodsListWatch lists and watches the meshed pods of every namespace as WirePods: decoded
// off the wire when the clients can build a client with another serializer (kube.Clients),
// decoded in full through the typed client otherwise (a fake clientset).
func MeshedPodsListWatch(k kube.Interface) (*cache.ListWatch, error) {
	wc, ok := k.(interface {
		CoreClientFor(runtime.NegotiatedSerializer) (rest.Interface, error)
	})
	if !ok {
		return TypedPodsListWatch(k.CoreV1().Pods(metav1.NamespaceAll)), nil
	}
	core, err := wc.CoreClientFor(WireSerializer())
	if err != nil {
		return nil, err
	}
	return WirePodsListWatch(core), nil
}

// TypedPodsListWatch lists and watches the meshed pods of every namespace through a typed client
// that decodes them in full (a fake clientset's), handing them on as WirePods, so that the
// informer sees one type whichever client it has.
func TypedPodsListWatch(pods kube.Resource[*corev1.Pod, *corev1.PodList]) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = MeshedPodSelector
			list, err := pods.List(ctx, o)
			if err != nil {
				return nil, err
			}
			return WirePodsOf(list), nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = MeshedPodSelector
			w, err := pods.Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if pod, ok := e.Object.(*corev1.Pod); ok {
					e.Object = &WirePod{Pod: *pod}
				}
				return e, true
			}), nil
		},
	}
}

// WirePodsOf turns pods decoded in full (a client that does not decode WirePods, such as a fake
// clientset) into a WirePodList, so that the informer sees one type either way.
func WirePodsOf(list *corev1.PodList) *WirePodList {
	out := &WirePodList{TypeMeta: list.TypeMeta, ListMeta: list.ListMeta, Items: make([]WirePod, len(list.Items))}
	for i := range list.Items {
		out.Items[i].Pod = list.Items[i]
	}
	return out
}
