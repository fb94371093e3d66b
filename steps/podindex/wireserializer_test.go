package podindex

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"reflect"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/linkerd/trust-rotation/steps/kube"
)

// watchStream decodes a protobuf watch stream the way client-go's rest.Request does
// (newStreamWatcher): the negotiator's stream decoder, framer and object decoder for the
// content type the apiserver answers with.
func watchStream(t *testing.T, ns runtime.NegotiatedSerializer, stream []byte) []watch.Event {
	t.Helper()
	objects, events, framer, err := runtime.NewClientNegotiator(ns, corev1.SchemeGroupVersion).
		StreamDecoder(runtime.ContentTypeProtobuf, map[string]string{"stream": "watch"})
	if err != nil {
		t.Fatal(err)
	}
	d := restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), events), objects)
	var out []watch.Event
	for {
		typ, obj, err := d.Decode()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("event %d: %v", len(out), err)
		}
		out = append(out, watch.Event{Type: typ, Object: obj})
	}
}

// frame is a watch event as the apiserver frames it in protobuf.
func frame(t *testing.T, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	var envelope bytes.Buffer
	if err := protobuf.NewSerializer(kube.Scheme, kube.Scheme).Encode(obj, &envelope); err != nil {
		t.Fatal(err)
	}
	raw, err := (&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: envelope.Bytes()}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(raw))), raw...) //nolint:gosec // a few KB
}

// TestWireSerializerDecodesAsClientGoDoes: a watch stream of pods of every shape, a bookmark and
// an error Status, and a PodList, decode through WireSerializer (events and envelopes read in
// place) into exactly what client-go's own protobuf decoders make of them with the same scheme;
// and every pod decoded still holds its values once the frames after it have reused the
// buffer.
func TestWireSerializerDecodesAsClientGoDoes(t *testing.T) {
	var stream []byte
	for _, pod := range wirePods() {
		pod.APIVersion, pod.Kind = "v1", "Pod"
		stream = append(stream, frame(t, watch.Added, pod)...)
		pod.ResourceVersion += "1"
		stream = append(stream, frame(t, watch.Modified, pod)...)
	}
	bookmark := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "100", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	stream = append(stream, frame(t, watch.Bookmark, bookmark)...)
	gone := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (100)"}
	stream = append(stream, frame(t, watch.Error, gone)...)

	stock := serializer.NewCodecFactory(wireScheme).WithoutConversion()
	want, got := watchStream(t, stock, stream), watchStream(t, WireSerializer(), stream)
	if len(want) != 2*len(wirePods())+2 {
		t.Fatalf("client-go decoded %d events of %d", len(want), 2*len(wirePods())+2)
	}
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("event %d decoded as %s %#v, client-go decodes %s %#v", i, got[i].Type, got[i].Object, want[i].Type, want[i].Object)
			}
		}
		t.Fatalf("decoded %d events, client-go %d", len(got), len(want))
	}
	if s, ok := got[len(got)-1].Object.(*metav1.Status); !ok || s.Code != http.StatusGone {
		t.Errorf("the error event decoded as %#v, want the Status", got[len(got)-1].Object)
	}

	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "7", Continue: "more"}}
	for _, pod := range wirePods() {
		list.Items = append(list.Items, *pod)
	}
	var envelope bytes.Buffer
	if err := protobuf.NewSerializer(kube.Scheme, kube.Scheme).Encode(list, &envelope); err != nil {
		t.Fatal(err)
	}
	decode := func(ns runtime.NegotiatedSerializer) *WirePodList {
		d, err := runtime.NewClientNegotiator(ns, corev1.SchemeGroupVersion).Decoder(runtime.ContentTypeProtobuf, nil)
		if err != nil {
			t.Fatal(err)
		}
		into := &WirePodList{}
		if err := runtime.DecodeInto(d, envelope.Bytes(), into); err != nil {
			t.Fatal(err)
		}
		return into
	}
	if got, want := decode(WireSerializer()), decode(stock); !reflect.DeepEqual(got, want) || len(got.Items) != len(wirePods()) {
		t.Errorf("the PodList decoded as %+v, client-go decodes %+v", got, want)
	}
}

// TestWireWatchEventsReadInPlace: the event's object is the frame's own bytes, not a copy.
func TestWireWatchEventsReadInPlace(t *testing.T) {
	f := frame(t, watch.Modified, wirePods()["sidecar"])[4:]
	var event metav1.WatchEvent
	if _, _, err := (wireWatchEvents{}).Decode(f, nil, &event); err != nil {
		t.Fatal(err)
	}
	start, end := uintptr(unsafe.Pointer(&f[0])), uintptr(unsafe.Pointer(&f[len(f)-1]))
	if event.Type != "MODIFIED" || len(event.Object.Raw) == 0 {
		t.Fatalf("decoded %+v", event)
	}
	if at := uintptr(unsafe.Pointer(&event.Object.Raw[0])); at < start || at > end {
		t.Error("the event's object was copied out of the frame")
	}
	for _, bad := range [][]byte{{0x12, 0x05, 0x0a}, {0x0b}} {
		if _, _, err := (wireWatchEvents{}).Decode(bad, nil, &event); err == nil {
			t.Errorf("a malformed event % x decoded without error", bad)
		}
	}
}
