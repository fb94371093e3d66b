package podindex

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// FuzzWirePodAgreesWithTheLibrary is a differential test of the pod wire decoder against
// apimachinery's protobuf decoding of the same bytes (the generated corev1.Pod.Unmarshal, which
// client-go runs): where the library decodes a pod, the wire decoder decodes it too, to the same
// SlimPod, resourceVersion and deletion timestamp; where the library refuses it, the wire
// decoder may refuse it or read it, but never panics. The seeds are the pods of every shape
// wirePods makes, as the apiserver encodes them.
func FuzzWirePodAgreesWithTheLibrary(f *testing.F) {
	for _, pod := range wirePods() {
		data, err := pod.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	cfg := steps.DefaultConfig()
	f.Fuzz(func(t *testing.T, data []byte) {
		var full corev1.Pod
		libErr := full.Unmarshal(data)
		var wire WirePod
		wireErr := wire.Unmarshal(data)
		if libErr != nil {
			return
		}
		if wireErr != nil {
			t.Fatalf("the library decodes the pod, the wire decoder refuses it: %v", wireErr)
		}
		if want, got := SlimPod(cfg, &full), SlimPod(cfg, &wire.Pod); !reflect.DeepEqual(got, want) {
			t.Fatalf("SlimPod of the WirePod:\n got %+v\nwant %+v", got, want)
		}
		if wire.ResourceVersion != full.ResourceVersion || !reflect.DeepEqual(wire.DeletionTimestamp, full.DeletionTimestamp) {
			t.Fatalf("resourceVersion %q deletion %v, want %q %v", wire.ResourceVersion, wire.DeletionTimestamp, full.ResourceVersion, full.DeletionTimestamp)
		}
	})
}

// A pod of a list that does not decode is skipped and counted; the others are read: one bad
// pod never fails the list, and with it the informer of every meshed pod.
func TestWirePodListSkipsAPodThatDoesNotDecode(t *testing.T) {
	pods := wirePods()
	good, err := pods["sidecar"].Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// An item whose metadata holds a field of wire type 7, which no protobuf has.
	bad := []byte{0x0a, 0x01, 0x0f}
	field := func(num int, b []byte) []byte { return append([]byte{byte(num<<3 | 2), byte(len(b))}, b...) }
	meta := field(2, []byte("42")) // resourceVersion
	list := append(field(1, meta), append(field(2, bad), append([]byte{0x12}, protoLen(good)...)...)...)
	before := SkippedPods()
	var l WirePodList
	if err := l.Unmarshal(list); err != nil {
		t.Fatalf("the list failed: %v", err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != pods["sidecar"].Name || l.ResourceVersion != "42" {
		t.Fatalf("items %d (%v), resourceVersion %q", len(l.Items), l.Items, l.ResourceVersion)
	}
	if got := SkippedPods() - before; got != 1 {
		t.Errorf("skipped %d pods, want 1", got)
	}
}

// protoLen is b after its length as a varint.
func protoLen(b []byte) []byte {
	var out []byte
	n := uint64(len(b))
	for n >= 0x80 {
		out = append(out, byte(n)|0x80)
		n >>= 7
	}
	return append(append(out, byte(n)), b...)
}
