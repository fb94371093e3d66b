package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// reasonPhaseChanged is the reason of the operator's Events of a phase change.
const reasonPhaseChanged = "PhaseChanged"

// TestEventWriterCountsRepeatsAndFiltersSpam: an Event is written in "default" for the
// cluster-scoped TrustAnchorRotation, from the operator's component; the same Event again raises
// its count, another message is another Event, an Event whose object was deleted is written
// anew, and an object that emits more than the burst has the rest dropped.
func TestEventWriterCountsRepeatsAndFiltersSpam(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	k := fake.NewClientset()
	s := runtime.NewScheme()
	if err := kube.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	w := kube.NewEventRecorder(ctx, clientset.Kube(k), s, "trust-rotation-operator")
	written := make(chan error, kube.EventQueue)
	kube.SetWrote(w, func(_ *corev1.Event, err error) { written <- err })
	wait := func(n int) {
		t.Helper()
		for range n {
			select {
			case err := <-written:
				if err != nil {
					t.Fatalf("writing an Event: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("an Event was not written within a minute")
			}
		}
	}
	list := func() []corev1.Event {
		t.Helper()
		evs, err := k.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return evs.Items
	}
	tar := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "u1"}}

	w.Eventf(tar, corev1.EventTypeNormal, reasonPhaseChanged, "%s -> %s", "Synced", "RefreshingControlPlane")
	wait(1)
	evs := list()
	if len(evs) != 1 {
		t.Fatalf("%d Events, want 1", len(evs))
	}
	e := evs[0]
	if e.InvolvedObject.Kind != "TrustAnchorRotation" || e.InvolvedObject.Name != "cluster" || e.InvolvedObject.UID != "u1" ||
		e.Source.Component != "trust-rotation-operator" || e.Count != 1 || e.Type != corev1.EventTypeNormal ||
		e.Message != "Synced -> RefreshingControlPlane" || !strings.HasPrefix(e.Name, "cluster.") {
		t.Errorf("Event %+v", e)
	}

	w.Event(tar, corev1.EventTypeNormal, reasonPhaseChanged, "Synced -> RefreshingControlPlane")
	wait(1)
	if evs := list(); len(evs) != 1 || evs[0].Count != 2 {
		t.Errorf("the same Event again: %d Events (count %d), want 1 of count 2", len(evs), evs[0].Count)
	}
	w.Event(tar, corev1.EventTypeNormal, reasonPhaseChanged, "RefreshingControlPlane -> PropagatingTrustRoots")
	wait(1)
	if evs := list(); len(evs) != 2 {
		t.Errorf("another message: %d Events, want 2", len(evs))
	}

	if err := k.CoreV1().Events(metav1.NamespaceDefault).Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Event(tar, corev1.EventTypeNormal, reasonPhaseChanged, "Synced -> RefreshingControlPlane")
	wait(1)
	if evs := list(); len(evs) != 2 {
		t.Errorf("an expired Event repeated: %d Events, want it written anew beside the other", len(evs))
	}

	other := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: "other", UID: "u2"}}
	for i := range kube.EventBurst + 5 {
		w.Eventf(other, corev1.EventTypeWarning, v1alpha1.ReasonNotDriven, "message %d", i)
	}
	wait(kube.EventBurst)
	n := 0
	for _, e := range list() {
		if e.InvolvedObject.UID == "u2" {
			n++
		}
	}
	if n != kube.EventBurst {
		t.Errorf("%d Events of an object that emitted %d at once, want the burst, %d", n, kube.EventBurst+5, kube.EventBurst)
	}
	select {
	case err := <-written:
		t.Errorf("an Event past the burst was written (%v)", err)
	default:
	}
}
