package probe

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

func get(t *testing.T, q *probeQueue, soonOnly bool) string {
	t.Helper()
	key, ok := q.Get(soonOnly)
	if !ok {
		t.Fatal("queue shut down")
	}
	q.Done(key)
	return key
}

func TestProbeQueueServesTheSoonLaneFirst(t *testing.T) {
	q := newProbeQueue()
	q.Add("old-1", laneLater)
	q.Add("old-2", laneLater)
	q.Add("new-1", laneSoon)
	q.Add("old-2", laneSoon)  // moves to the soon lane
	q.Add("new-1", laneLater) // already queued sooner: stays
	if soon, later := q.Len(); soon != 2 || later != 1 {
		t.Fatalf("Len() = %d, %d; want 2 soon, 1 later", soon, later)
	}
	var got []string
	for range 3 {
		got = append(got, get(t, q, false))
	}
	if want := "new-1 old-2 old-1"; strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", strings.Join(got, " "), want)
	}
}

func TestProbeQueueSoonOnlyWaitsForTheSoonLane(t *testing.T) {
	q := newProbeQueue()
	q.Add("old", laneLater)
	got := make(chan string)
	go func() {
		key, _ := q.Get(true)
		got <- key
	}()
	q.Add("new", laneSoon)
	if key := <-got; key != "new" {
		t.Errorf("a soon-only Get returned %q, want new", key)
	}
	if key := get(t, q, false); key != "old" {
		t.Errorf("Get returned %q, want old", key)
	}
}

func TestProbeQueueRequeuesAKeyAddedWhileProbed(t *testing.T) {
	q := newProbeQueue()
	q.Add("pod", laneLater)
	key, _ := q.Get(false)
	q.Add("pod", laneLater)
	q.Add("pod", laneSoon)
	if soon, later := q.Len(); soon+later != 0 {
		t.Fatalf("a key being probed was queued again before Done (%d soon, %d later)", soon, later)
	}
	q.Done(key)
	if soon, later := q.Len(); soon != 1 || later != 0 {
		t.Fatalf("after Done: %d soon, %d later; want the key once, in the soonest lane it was added to", soon, later)
	}
}

func TestProbeQueueAddAfterKeepsTheEarlierWait(t *testing.T) {
	q := newProbeQueue()
	defer q.ShutDown()
	q.AddAfter("pod", laneLater, time.Hour)
	q.AddAfter("pod", laneSoon, time.Millisecond) // replaces the hour
	q.AddAfter("pod", laneLater, time.Hour)       // later than the pending wait: ignored
	if key := get(t, q, true); key != "pod" {
		t.Errorf("Get returned %q", key)
	}
	q.mu.Lock()
	waiting := len(q.waiting)
	q.mu.Unlock()
	if waiting != 0 {
		t.Errorf("%d delayed adds pending, want none: the hour-long ones were dropped", waiting)
	}
}

func TestProbeQueueShutDownWakesGet(t *testing.T) {
	q := newProbeQueue()
	done := make(chan bool)
	go func() {
		_, ok := q.Get(false)
		done <- ok
	}()
	q.AddAfter("pod", laneSoon, time.Hour)
	q.ShutDown()
	if <-done {
		t.Error("Get returned a key after ShutDown")
	}
}

// TestCertTrackerProbesNewPodsBeforeReprobes is the case the probe lanes exist for: the issuer
// moved onto the new anchor, every pod of the mesh answered with the old one and is re-probed, and a new pod (a
// control-plane pod restarted on the new issuer, which the rotation waits on) starts. Its probe
// must not wait for the re-probes: here they hang until the test ends.
func TestCertTrackerProbesNewPodsBeforeReprobes(t *testing.T) {
	oldAnchor, oldAnchorKey := newCert(t, "root-old", true, nil, nil)
	newAnchor, newAnchorKey := newCert(t, "root-new", true, nil, nil)
	oldIssuer, oldKey := newCert(t, "identity-old", true, oldAnchor, oldAnchorKey)
	newIssuer, newKey := newCert(t, "identity-new", true, newAnchor, newAnchorKey)
	const identity = "default.app.serviceaccount.identity.linkerd.cluster.local"
	oldPort := serveAdmin(t, identity, oldIssuer, oldKey)
	newPort := serveAdmin(t, identity, newIssuer, newKey)

	// Once hang is closed, probes of the old pods block until the test ends.
	hang, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "127.0.0.2:") {
			select {
			case <-hang:
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil, ctx.Err()
			default:
			}
			addr = net.JoinHostPort("127.0.0.1", fmt.Sprint(oldPort))
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}

	changed := make(chan struct{}, 1)
	var tracker *CertTracker
	index := podindex.New(func(old, cur *podindex.Pod) { tracker.PodChanged(old, cur) })
	tracker = NewCertTracker(index, dial, 4, time.Minute, func(*podindex.Pod) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	// A guard against hanging, not a measure: a pod queued behind the hanging re-probes would
	// never be probed.
	guard, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	waitFor := func(what string, cond func(steps.Convergence) bool) {
		t.Helper()
		for c := tracker.Certificates(); !cond(c); c = tracker.Certificates() {
			select {
			case <-changed:
			case <-guard.Done():
				t.Fatalf("%s: never happened; %+v", what, c)
			}
		}
	}
	tracker.SetActive(oldAnchor, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go tracker.Run(ctx)

	const bulk = 40
	for i := range bulk {
		index.Upsert(&podindex.Pod{Namespace: "app", Name: fmt.Sprintf("old-%d", i), UID: fmt.Sprint(i), Workload: "app/Deployment/old",
			Meshed: true, Alive: true, Running: true, IP: "127.0.0.2", AdminPort: 1, Identity: identity})
	}
	waitFor("every pod converged on the old issuer", func(c steps.Convergence) bool { return c.Converged == bulk })

	close(hang)
	tracker.SetActive(newAnchor, true)
	if soon, later := tracker.queue.Len(); soon != 0 || later < bulk-4 {
		t.Fatalf("after the issuer change: %d re-probes in the soon lane, %d in the later lane; want them all later", soon, later)
	}
	index.Upsert(&podindex.Pod{Namespace: "linkerd", Name: "destination-new", UID: "new", Workload: "linkerd/Deployment/destination",
		ControlPlane: true, Meshed: true, Alive: true, Running: true, IP: "127.0.0.1", AdminPort: newPort, Identity: identity})
	waitFor("the new pod converged while the re-probes hang", func(c steps.Convergence) bool { return c.Converged == 1 })
}

func TestProbeQueueServesDelaysInTimeOrder(t *testing.T) {
	q := newProbeQueue()
	defer q.ShutDown()
	// Due 150 ms apart: the order holds unless these four calls take that long.
	q.AddAfter("third", laneSoon, 400*time.Millisecond)
	q.AddAfter("second", laneSoon, 250*time.Millisecond)
	q.AddAfter("first", laneSoon, time.Hour)
	q.AddAfter("first", laneSoon, 100*time.Millisecond) // moved to the front of the heap
	var got []string
	for range 3 {
		got = append(got, get(t, q, true))
	}
	if want := "first second third"; strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", strings.Join(got, " "), want)
	}
}

// Forget drops a key's delayed add and leaves the others in time order; a key not waiting is
// nothing to forget.
func TestProbeQueueForgetDropsADelayedAdd(t *testing.T) {
	q := newProbeQueue()
	defer q.ShutDown()
	q.AddAfter("third", laneSoon, 300*time.Millisecond)
	q.AddAfter("gone", laneSoon, 100*time.Millisecond)
	q.AddAfter("second", laneSoon, 200*time.Millisecond)
	q.Forget("gone")
	q.Forget("never added")
	var got []string
	for range 2 {
		got = append(got, get(t, q, true))
	}
	if want := "second third"; strings.Join(got, " ") != want {
		t.Errorf("served %q, want %q", strings.Join(got, " "), want)
	}
	q.mu.Lock()
	waiting, delays := len(q.waiting), len(q.delays)
	q.mu.Unlock()
	if waiting != 0 || delays != 0 {
		t.Errorf("%d keys waiting, %d delays left, want none", waiting, delays)
	}
}

// A pod deleted takes its delayed re-probe with it: a converged pod's waits hours for its
// proxy's renewal (the expiry watch), and every rotation replaces every pod twice.
func TestCertTrackerForgetsTheReprobeOfAPodGone(t *testing.T) {
	anchor, _ := newCert(t, "root", true, nil, nil)
	tr, x := trackerOn(t, anchor)
	for _, name := range []string{"kept", "gone"} {
		x.Upsert(&podindex.Pod{Namespace: "app", Name: name, UID: "uid-" + name, Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true})
		tr.queue.AddAfter("app/"+name, laneLater, time.Hour) // as the expiry watch schedules
	}
	x.Delete("app/gone")
	tr.queue.mu.Lock()
	_, kept := tr.queue.waiting["app/kept"]
	_, gone := tr.queue.waiting["app/gone"]
	n := len(tr.queue.delays)
	tr.queue.mu.Unlock()
	if !kept || gone || n != 1 {
		t.Errorf("waiting: app/kept %v, app/gone %v, %d delays; want app/kept's alone", kept, gone, n)
	}
}
