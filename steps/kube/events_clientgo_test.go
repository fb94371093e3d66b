package kube_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// eventClients are where both recorders write: a real apiserver, or under -short a fake
// Clientset.
func eventClients(t *testing.T) (kube.Interface, kubernetes.Interface) {
	if testing.Short() {
		cs := fake.NewClientset()
		return clientset.Kube(cs), cs
	}
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ours, err := kube.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return ours, c.Kube()
}

// The Events the operator's recorder (NewEventRecorder) writes are those client-go's recorder (tools/record)
// writes for the same calls: every field but the name's suffix, the timestamps' instants and the
// apiserver's metadata, for a cluster-scoped object (its Events go to "default") and a
// namespaced one, an Event repeated (counted, not written twice) and another.
func TestEventWriterWritesWhatClientGoRecords(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ours, cs := eventClients(t)
	s := runtime.NewScheme()
	if err := kube.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	// A namespace of its own for the namespaced object's Events, which the apiserver writes only
	// in a namespace that exists.
	suffix := fmt.Sprint(time.Now().UnixNano())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "events-" + suffix}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	const component = "trust-rotation-operator"
	b := record.NewBroadcaster(record.WithContext(ctx))
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})

	// Each recorder records on objects of its own (their UIDs differ), the same calls.
	recorders := map[string]kube.EventRecorder{
		"ours":      kube.NewEventRecorder(ctx, ours, s, component),
		"client-go": b.NewRecorder(s, corev1.EventSource{Component: component}),
	}
	for who, r := range recorders {
		uid := func(kind string) types.UID { return types.UID(who + "-" + kind + "-" + suffix) }
		tar := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: uid("tar"), ResourceVersion: "12"}}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity", Namespace: ns.Name, UID: uid("deploy")}}
		r.Eventf(tar, corev1.EventTypeNormal, "PhaseChanged", "%s -> %s", "Synced", "RefreshingControlPlane")
		r.Event(tar, corev1.EventTypeNormal, "PhaseChanged", "Synced -> RefreshingControlPlane")
		r.Event(tar, corev1.EventTypeWarning, v1alpha1.ReasonNotDriven, "spec.suspend is true")
		r.Eventf(dep, corev1.EventTypeNormal, "RestartedWorkload", "restarted %d pod(s)", 3)
	}

	// written is the Events of who's objects once all are there, the repeated one counted.
	written := func(who string) ([]corev1.Event, error) {
		var evs []corev1.Event
		for _, in := range []string{metav1.NamespaceDefault, ns.Name} {
			l, err := cs.CoreV1().Events(in).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			for _, e := range l.Items {
				if strings.HasPrefix(string(e.InvolvedObject.UID), who+"-") && strings.HasSuffix(string(e.InvolvedObject.UID), suffix) {
					evs = append(evs, e)
				}
			}
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].Message+evs[i].Reason < evs[j].Message+evs[j].Reason })
		return evs, nil
	}
	got := map[string][]corev1.Event{}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		done := true
		for who := range recorders {
			evs, err := written(who)
			if err != nil {
				return false, err
			}
			counted := 0
			for _, e := range evs {
				counted += int(e.Count)
			}
			got[who] = evs
			done = done && len(evs) == 3 && counted == 4
		}
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting for 3 Events of each recorder, one counted twice: %v\nours:      %s\nclient-go: %s", err, asJSON(got["ours"]), asJSON(got["client-go"]))
	}
	for i := range got["ours"] {
		o, c := normalised(t, "ours", got["ours"][i]), normalised(t, "client-go", got["client-go"][i])
		if !apiequality.Semantic.DeepEqual(o, c) {
			t.Errorf("Event %q:\nours:      %s\nclient-go: %s", o.Message, asJSON(o), asJSON(c))
		}
	}
}

// normalised is e without what differs between two recorders by design: its name's suffix (the
// time), the timestamps' instants, its object's UID and what the apiserver sets. It checks those
// are as client-go's recorder sets them.
func normalised(t *testing.T, who string, e corev1.Event) corev1.Event {
	t.Helper()
	if !strings.HasPrefix(e.Name, e.InvolvedObject.Name+".") {
		t.Errorf("%s: Event %s is not named after its object %s", who, e.Name, e.InvolvedObject.Name)
	}
	first, last := e.FirstTimestamp, e.LastTimestamp
	if first.IsZero() || (e.Count == 1 && !last.Equal(&first)) || last.Before(&first) {
		t.Errorf("%s: Event %q of count %d: first timestamp %s, last %s", who, e.Message, e.Count, first, last)
	}
	if strings.TrimPrefix(string(e.InvolvedObject.UID), who) == string(e.InvolvedObject.UID) {
		t.Errorf("%s: Event %q is of object UID %s", who, e.Message, e.InvolvedObject.UID)
	}
	e.ObjectMeta = metav1.ObjectMeta{Namespace: e.Namespace, Annotations: e.Annotations, Labels: e.Labels}
	e.FirstTimestamp, e.LastTimestamp = metav1.Time{}, metav1.Time{}
	e.InvolvedObject.UID = types.UID(strings.TrimPrefix(string(e.InvolvedObject.UID), who))
	return e
}
