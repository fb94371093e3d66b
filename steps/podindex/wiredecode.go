package podindex

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
)

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
	// wireStartGroup and wireEndGroup delimit a group, a proto2 encoding nothing of Kubernetes
	// writes; the generated decoders skip one in a field they do not know, and so does next.
	wireStartGroup wireType = 3
	wireEndGroup   wireType = 4
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
	case wireStartGroup:
		n, err := skipGroup(r.data)
		if err != nil {
			return r.fail(err)
		}
		r.data = r.data[n:]
	default:
		return r.fail(fmt.Errorf("unsupported protobuf wire type %d of field %d", r.wt, r.num))
	}
	return true
}

// skipGroup returns the length of the group whose start tag was just read, up to and including
// its end tag, as the generated decoders' skip (skipGenerated in k8s.io/api's generated.pb.go)
// measures it: fields inside are skipped by their wire type alone, nested groups counted.
func skipGroup(data []byte) (int, error) {
	depth, i := 1, 0
	for i < len(data) {
		tag, k := uvarint(data[i:])
		if k == 0 {
			return 0, errTruncated
		}
		i += k
		switch wireType(tag & 7) {
		case wireVarint:
			if _, k = uvarint(data[i:]); k == 0 {
				return 0, errTruncated
			}
			i += k
		case wireFixed64:
			i += 8
		case wireFixed32:
			i += 4
		case wireBytes:
			l, k := uvarint(data[i:])
			if k == 0 || uint64(len(data)-i-k) < l {
				return 0, errTruncated
			}
			i += k + int(l)
		case wireStartGroup:
			depth++
		case wireEndGroup:
			depth--
		default:
			return 0, fmt.Errorf("unsupported protobuf wire type %d in a group", tag&7)
		}
		if i > len(data) {
			return 0, errTruncated
		}
		if depth == 0 {
			return i, nil
		}
	}
	return 0, errTruncated
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
