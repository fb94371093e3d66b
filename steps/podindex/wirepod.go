package podindex

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

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
			r.fail(decodePod(r.v, &l.Items[len(l.Items)-1].Pod))
		}
	}
	if r.err != nil {
		return fmt.Errorf("decoding a v1 PodList: %w", r.err)
	}
	return nil
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

// decodePod decodes the fields of a v1 Pod that WirePod keeps (field numbers from
// k8s.io/api/core/v1/generated.proto and k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto).
func decodePod(data []byte, pod *corev1.Pod) error {
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes):
			r.fail(decodeObjectMeta(r.v, &pod.ObjectMeta))
		case r.is(2, wireBytes):
			r.fail(decodePodSpec(r.v, &pod.Spec))
		case r.is(3, wireBytes):
			r.fail(decodePodStatus(r.v, &pod.Status))
		}
	}
	return r.err
}

func decodeObjectMeta(data []byte, m *metav1.ObjectMeta) error {
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes):
			m.Name = string(r.v)
		case r.is(3, wireBytes):
			m.Namespace = string(r.v)
		case r.is(5, wireBytes):
			m.UID = types.UID(r.v)
		case r.is(6, wireBytes):
			m.ResourceVersion = string(r.v)
		case r.is(8, wireBytes):
			m.CreationTimestamp = r.time()
		case r.is(9, wireBytes):
			t := r.time()
			m.DeletionTimestamp = &t
		case r.is(11, wireBytes):
			r.fail(keepEntry(r.v, &m.Labels, wireLabels))
		case r.is(12, wireBytes):
			r.fail(keepEntry(r.v, &m.Annotations, wireAnnotations))
		case r.is(13, wireBytes):
			var ref metav1.OwnerReference
			controller := false
			o := wireReader{data: r.v}
			for o.next() {
				switch {
				case o.is(1, wireBytes):
					ref.Kind = string(o.v)
				case o.is(3, wireBytes):
					ref.Name = string(o.v)
				case o.is(4, wireBytes):
					ref.UID = types.UID(o.v)
				case o.is(5, wireBytes):
					ref.APIVersion = string(o.v)
				case o.is(6, wireVarint):
					controller = o.n != 0
				}
			}
			r.fail(o.err)
			if controller { // the only owner the rotation reads (metav1.GetControllerOf)
				ref.Controller = &controller
				m.OwnerReferences = append(m.OwnerReferences, ref)
			}
		}
	}
	return r.err
}

// keepEntry adds a map entry (key 1, value 2) to *m when its key is one of keep.
func keepEntry(data []byte, m *map[string]string, keep []string) error {
	var key, value []byte
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes):
			key = r.v
		case r.is(2, wireBytes):
			value = r.v
		}
	}
	for _, k := range keep {
		if string(key) == k {
			if *m == nil {
				*m = make(map[string]string, 2)
			}
			(*m)[k] = string(value)
		}
	}
	return r.err
}

func decodePodSpec(data []byte, spec *corev1.PodSpec) error {
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(2, wireBytes):
			r.fail(keepProxyContainer(r.v, &spec.Containers))
		case r.is(20, wireBytes):
			r.fail(keepProxyContainer(r.v, &spec.InitContainers))
		case r.is(8, wireBytes):
			spec.ServiceAccountName = string(r.v)
		}
	}
	return r.err
}

// keepProxyContainer decodes a container and appends it to *list if it is the proxy: its name,
// restart policy, ports, and the refresh bounds of its env (steps.ProxyRefreshBounds).
func keepProxyContainer(data []byte, list *[]corev1.Container) error {
	var name []byte
	r := wireReader{data: data}
	for r.next() {
		if r.is(1, wireBytes) {
			name = r.v
		}
	}
	if r.err != nil || string(name) != steps.ProxyContainerName {
		return r.err
	}
	c := corev1.Container{Name: steps.ProxyContainerName}
	r = wireReader{data: data}
	for r.next() {
		switch {
		case r.is(24, wireBytes):
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicy(r.v))
		case r.is(6, wireBytes):
			var port corev1.ContainerPort
			p := wireReader{data: r.v}
			for p.next() {
				switch {
				case p.is(1, wireBytes):
					port.Name = string(p.v)
				case p.is(3, wireVarint):
					port.ContainerPort = int32(p.n)
				}
			}
			r.fail(p.err)
			c.Ports = append(c.Ports, port)
		case r.is(7, wireBytes):
			var name, value []byte
			valueFrom := false
			e := wireReader{data: r.v}
			for e.next() {
				switch {
				case e.is(1, wireBytes):
					name = e.v
				case e.is(2, wireBytes):
					value = e.v
				case e.is(3, wireBytes):
					valueFrom = true
				}
			}
			r.fail(e.err)
			var env corev1.EnvVar
			switch string(name) { // compared without a copy
			case steps.MinRefreshEnv:
				env.Name = steps.MinRefreshEnv
			case steps.MaxRefreshEnv:
				env.Name = steps.MaxRefreshEnv
			}
			if env.Name != "" {
				env.Value = string(value)
				if valueFrom {
					env.ValueFrom = &corev1.EnvVarSource{} // not known from the spec: that it is set is enough
				}
				c.Env = append(c.Env, env)
			}
		}
	}
	*list = append(*list, c)
	return r.err
}

// decodePodStatus decodes the phase, the IP, and of the container statuses what SlimPod reads:
// the proxy's (its restart count) where it is, and the latest start of any container, kept as
// one status of spec.containers (lastStarted).
func decodePodStatus(data []byte, st *corev1.PodStatus) error {
	var latest metav1.Time
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes):
			st.Phase = corev1.PodPhase(r.v)
		case r.is(6, wireBytes):
			st.PodIP = string(r.v)
		case r.is(8, wireBytes), r.is(10, wireBytes):
			proxy, restarts, started, err := decodeContainerStatus(r.v)
			r.fail(err)
			if started.After(latest.Time) {
				latest = started
			}
			if proxy {
				cs := corev1.ContainerStatus{Name: steps.ProxyContainerName, RestartCount: restarts}
				if r.num == 8 {
					st.ContainerStatuses = append(st.ContainerStatuses, cs)
				} else {
					st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
				}
			}
		}
	}
	if !latest.IsZero() {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: latest}}})
	}
	return r.err
}

// decodeContainerStatus decodes whether a container status is the proxy's, its restart count,
// and its state.running.startedAt (zero when not running).
func decodeContainerStatus(data []byte) (proxy bool, restarts int32, started metav1.Time, err error) {
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes):
			proxy = string(r.v) == steps.ProxyContainerName
		case r.is(5, wireVarint):
			restarts = int32(r.n)
		case r.is(2, wireBytes): // state
			s := wireReader{data: r.v}
			for s.next() {
				if s.is(2, wireBytes) { // running
					t := wireReader{data: s.v}
					for t.next() {
						if t.is(1, wireBytes) {
							started = t.time()
						}
					}
					s.fail(t.err)
				}
			}
			r.fail(s.err)
		}
	}
	return proxy, restarts, started, r.err
}

// wireReader reads the fields of a protobuf message
// (https://protobuf.dev/programming-guides/encoding/), one at a time, without allocating.
type wireReader struct {
	data []byte
	num  int      // the field's number
	wt   wireType // the field's wire type
	v    []byte   // a length-delimited field's bytes
	n    uint64   // a varint field's value
	err  error    // the first error; next returns false once set
}

type wireType int

const (
	wireVarint  wireType = 0
	wireFixed64 wireType = 1
	wireBytes   wireType = 2
	wireFixed32 wireType = 5
)

var errTruncated = errors.New("truncated protobuf")

// next reads the next field; false at the end of the message or on an error (r.err).
func (r *wireReader) next() bool {
	if r.err != nil || len(r.data) == 0 {
		return false
	}
	tag, k := uvarint(r.data)
	if k == 0 {
		return r.fail(errTruncated)
	}
	r.data = r.data[k:]
	r.num, r.wt, r.v, r.n = int(tag>>3), wireType(tag&7), nil, 0
	if r.num <= 0 {
		return r.fail(fmt.Errorf("invalid protobuf field number %d", r.num))
	}
	switch r.wt {
	case wireVarint:
		if r.n, k = uvarint(r.data); k == 0 {
			return r.fail(errTruncated)
		}
		r.data = r.data[k:]
	case wireFixed64, wireFixed32:
		size := 8
		if r.wt == wireFixed32 {
			size = 4
		}
		if len(r.data) < size {
			return r.fail(errTruncated)
		}
		r.data = r.data[size:]
	case wireBytes:
		l, k := uvarint(r.data)
		if k == 0 || uint64(len(r.data)-k) < l {
			return r.fail(errTruncated)
		}
		r.v, r.data = r.data[k:k+int(l)], r.data[k+int(l):]
	default:
		return r.fail(fmt.Errorf("unsupported protobuf wire type %d of field %d", r.wt, r.num))
	}
	return true
}

// is reports whether the field just read is number num of wire type wt.
func (r *wireReader) is(num int, wt wireType) bool { return r.num == num && r.wt == wt }

// fail records err (if not nil and the first) and returns false.
func (r *wireReader) fail(err error) bool {
	if err != nil && r.err == nil {
		r.err = err
	}
	return false
}

// time decodes the current field as a meta/v1 Time, as its own Unmarshal does: seconds (field 1)
// in the local zone, nanoseconds dropped; an empty message is the zero time.
func (r *wireReader) time() metav1.Time {
	if len(r.v) == 0 {
		return metav1.Time{}
	}
	var sec int64
	t := wireReader{data: r.v}
	for t.next() {
		if t.is(1, wireVarint) {
			sec = int64(t.n)
		}
	}
	r.fail(t.err)
	return metav1.NewTime(time.Unix(sec, 0).Local())
}

// uvarint decodes a varint; k is the number of bytes read, 0 when data ends first or the value
// overflows 64 bits.
func uvarint(data []byte) (v uint64, k int) {
	for i, b := range data {
		if i == 10 {
			return 0, 0
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
