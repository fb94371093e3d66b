package podindex

import (
	"bytes"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
)

// WireSerializer decodes v1 Pods as WirePods: the serializer of the core client
// WirePodsListWatch reads through (kube.Clients.CoreClientFor).
//
// Its protobuf decoding reads a watch event and the envelope of a Pod or PodList in place.
// client-go's decoders copy a pod event's bytes twice before the pod itself is decoded: once
// into the event's RawExtension (metav1.WatchEvent.Unmarshal), once more into the
// runtime.Unknown envelope (protobuf.Serializer.Decode). Each copy is a pod's whole protobuf,
// a few kilobytes; over a 10,000-pod rotation the two were 37 % of the operator's allocations
// (2 GB of 5.4 GB, docs/performance-log.md), garbage the collector then had to chase. A
// WirePod's decoder keeps nothing of its input (every string it keeps is converted, so
// copied), so reading the frame in place is safe: the watch's frame buffer is reused only once
// the event has been decoded (client-go rest/watch.Decoder.Decode decodes the object before it
// reads the next frame). Anything else — an error Status, JSON — goes through client-go's own
// decoders, unchanged.
func WireSerializer() runtime.NegotiatedSerializer {
	return wireSerializer
}

var wireSerializer = newWireNegotiated(serializer.NewCodecFactory(wireScheme).WithoutConversion())

// wireNegotiated is a NegotiatedSerializer whose protobuf decoders read pods in place.
type wireNegotiated struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func newWireNegotiated(ns runtime.NegotiatedSerializer) wireNegotiated {
	infos := slices.Clone(ns.SupportedMediaTypes())
	for i, info := range infos {
		if info.MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		info.Serializer = wireObjects{info.Serializer}
		if info.StreamSerializer != nil {
			stream := *info.StreamSerializer
			stream.Serializer = wireWatchEvents{stream.Serializer}
			info.StreamSerializer = &stream
		}
		infos[i] = info
	}
	return wireNegotiated{NegotiatedSerializer: ns, infos: infos}
}

// SupportedMediaTypes implements runtime.NegotiatedSerializer.
func (n wireNegotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }

// wireWatchEvents decodes the frames of a protobuf watch stream into metav1.WatchEvents whose
// Object.Raw is the frame's own bytes, not a copy: valid until the next frame is read.
type wireWatchEvents struct{ runtime.Serializer }

var watchEventKind = metav1.SchemeGroupVersion.WithKind("WatchEvent")

// Decode implements runtime.Decoder.
func (d wireWatchEvents) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	event, ok := into.(*metav1.WatchEvent)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	*event = metav1.WatchEvent{}
	r := wireReader{data: data}
	for r.next() {
		switch {
		case r.is(1, wireBytes):
			event.Type = watchEventType(r.v)
		case r.is(2, wireBytes): // a RawExtension, its bytes in field 1
			o := wireReader{data: r.v}
			for o.next() {
				if o.is(1, wireBytes) {
					event.Object.Raw = o.v
				}
			}
			r.fail(o.err)
		}
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event: %w", r.err)
	}
	return event, &watchEventKind, nil
}

// watchEventType returns a watch event's type without allocating for the five there are.
func watchEventType(b []byte) string {
	for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(b) == string(t) {
			return string(t)
		}
	}
	return string(b)
}

// wireObjects decodes the protobuf envelope (runtime.Unknown, after the "k8s\x00" prefix) of a v1
// Pod or PodList in place, straight into a WirePod or WirePodList. Any other object goes
// through the protobuf serializer it wraps.
type wireObjects struct{ runtime.Serializer }

// protobufPrefix starts every protobuf object the apiserver sends (k8s.io/apimachinery
// pkg/runtime/serializer/protobuf).
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Decode implements runtime.Decoder.
func (d wireObjects) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	kind, raw, ok := podEnvelope(data)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	var obj interface {
		runtime.Object
		Reset()
		Unmarshal([]byte) error
	}
	switch kind {
	case "Pod":
		pod, _ := into.(*WirePod)
		if pod == nil {
			pod = &WirePod{}
		}
		obj = pod
	case "PodList":
		list, _ := into.(*WirePodList)
		if list == nil {
			list = &WirePodList{}
		}
		obj = list
	}
	if into != nil && runtime.Object(obj) != into {
		// Asked for another type: the wrapped serializer says what it makes of that.
		return d.Serializer.Decode(data, defaults, into)
	}
	gvk := corev1.SchemeGroupVersion.WithKind(kind)
	obj.Reset()
	if err := obj.Unmarshal(raw); err != nil {
		if pod, ok := obj.(*WirePod); ok {
			skipped(&pod.Pod, err)
		}
		return nil, &gvk, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, &gvk, nil
}

// podEnvelope reads the envelope of a protobuf object: its kind and its bytes when it is a v1
// Pod or PodList, stored as is (no content encoding); ok is false for anything else.
func podEnvelope(data []byte) (kind string, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return "", nil, false
	}
	var apiVersion []byte
	var encoded bool
	r := wireReader{data: data[len(protobufPrefix):]}
	for r.next() {
		switch {
		case r.is(1, wireBytes): // typeMeta
			t := wireReader{data: r.v}
			for t.next() {
				switch {
				case t.is(1, wireBytes):
					apiVersion = t.v
				case t.is(2, wireBytes):
					switch string(t.v) {
					case "Pod":
						kind = "Pod"
					case "PodList":
						kind = "PodList"
					default:
						kind = ""
					}
				}
			}
			r.fail(t.err)
		case r.is(2, wireBytes):
			raw = r.v
		case r.is(3, wireBytes):
			encoded = len(r.v) > 0
		}
	}
	if r.err != nil || encoded || kind == "" || string(apiVersion) != "v1" {
		return "", nil, false
	}
	return kind, raw, true
}
