package kube_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/test/cluster"
)

// Short leases keep the hand-overs by expiry short; the renew deadline leaves the apiserver of
// a busy test machine well over a second to answer a renewal.
const (
	handoverLeaseDuration = 2 * time.Second
	handoverRenewDeadline = 1500 * time.Millisecond
	handoverRetryPeriod   = 200 * time.Millisecond
)

// handover runs contenders, ours and client-go's, for one Lease of a real apiserver, and
// records every version of the Lease the apiserver stored.
type handover struct {
	ns, name string
	kube     kubernetes.Interface
	ours     *kube.Clients

	mu       sync.Mutex
	versions []coordinationv1.Lease // every version of the Lease, in order
	ended    bool                   // the Lease's watch ended
	leader   string                 // the contender that leads, by its own callbacks
	twice    []string               // contenders that began to lead while another did
}

// contender is one candidate for the Lease.
type contender struct {
	id        string
	started   chan struct{} // closed once it leads
	startedAt time.Time     // set before started is closed
	done      chan struct{} // closed when its Run returns
	cancel    context.CancelFunc
	// seen is the resolution at which it sees the Lease change: client-go compares the Lease as
	// a LeaderElectionRecord in JSON, whose times are whole seconds, so renewals within one
	// second look the same to it, and it counts the Lease's duration from the first.
	seen time.Duration
}

func newHandover(t *testing.T) *handover {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ours, err := kube.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := &handover{ns: metav1.NamespaceDefault, name: "handover-" + strconv.FormatInt(time.Now().UnixNano(), 36), kube: c.Kube(), ours: ours}
	w, err := h.kube.CoordinationV1().Leases(h.ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", h.name).String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for e := range w.ResultChan() {
			if l, ok := e.Object.(*coordinationv1.Lease); ok {
				h.mu.Lock()
				h.versions = append(h.versions, *l)
				h.mu.Unlock()
			}
		}
		h.mu.Lock()
		h.ended = true
		h.mu.Unlock()
	}()
	return h
}

// lead is what a contender runs when it starts leading.
func (h *handover) lead(c *contender) func(context.Context) {
	return func(ctx context.Context) {
		h.mu.Lock()
		if h.leader != "" {
			h.twice = append(h.twice, fmt.Sprintf("%s began to lead while %s did", c.id, h.leader))
		}
		h.leader = c.id
		c.startedAt = time.Now()
		h.mu.Unlock()
		close(c.started)
		<-ctx.Done()
		h.stopped(c)
	}
}

func (h *handover) stopped(c *contender) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leader == c.id {
		h.leader = ""
	}
}

func (h *handover) run(t *testing.T, c *contender, run func(context.Context)) *contender {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		run(ctx)
	}()
	t.Cleanup(func() { h.stop(t, c) })
	return c
}

func newContender(id string) *contender {
	return &contender{id: id, started: make(chan struct{}), done: make(chan struct{})}
}

// runOurs runs the operator's Election.
func (h *handover) runOurs(t *testing.T, id string, release bool) *contender {
	c := newContender(id)
	e := &kube.Election{
		Leases: h.ours.CoordinationV1().Leases(h.ns), Name: h.name, Identity: id,
		LeaseDuration: handoverLeaseDuration, RenewDeadline: handoverRenewDeadline, RetryPeriod: handoverRetryPeriod,
		ReleaseOnCancel: release, OnStartedLeading: h.lead(c),
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	return h.run(t, c, e.Run)
}

// runClientGo runs client-go's LeaderElector, uncoordinated, on a LeaseLock.
func (h *handover) runClientGo(t *testing.T, id string, release bool) *contender {
	c := newContender(id)
	c.seen = time.Second
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.name}, Client: h.kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration: handoverLeaseDuration, RenewDeadline: handoverRenewDeadline, RetryPeriod: handoverRetryPeriod,
		ReleaseOnCancel: release, Name: h.name,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: h.lead(c), OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h.run(t, c, le.Run)
}

// stop ends c's Run (releasing the Lease if it was told to) and waits for it to return. c no
// longer leads from the moment it is told to stop.
func (h *handover) stop(t *testing.T, c *contender) {
	h.stopped(c)
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Run did not return within 10s of its context's end", c.id)
	}
}

func (h *handover) until(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		h.mu.Lock()
		ended := h.ended
		h.mu.Unlock()
		if ended {
			return false, fmt.Errorf("the Lease's watch ended")
		}
		return cond()
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (h *handover) waitLeads(t *testing.T, c *contender) {
	t.Helper()
	h.until(t, c.id+" leads", func() (bool, error) { return leads(c), nil })
}

// renewals is how many versions of the Lease c's renewals wrote.
func (h *handover) renewals(c *contender) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.versions {
		if ptr.Deref(v.Spec.HolderIdentity, "") == c.id {
			n++
		}
	}
	return n
}

// holdsAgainst: while leader renews the Lease, three times more, follower does not lead.
func (h *handover) holdsAgainst(t *testing.T, leader, follower *contender) {
	t.Helper()
	from := h.renewals(leader)
	h.until(t, leader.id+" renews while "+follower.id+" waits", func() (bool, error) {
		if leads(follower) {
			return false, fmt.Errorf("%s leads while %s holds the Lease and renews it", follower.id, leader.id)
		}
		return h.renewals(leader) >= from+3, nil
	})
}

func leads(c *contender) bool {
	select {
	case <-c.started:
		return true
	default:
		return false
	}
}

// lastRenewal is when leader last renewed the Lease, by the Lease.
func (h *handover) lastRenewal(t *testing.T, leader *contender) time.Time {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.versions) - 1; i >= 0; i-- {
		if v := h.versions[i]; ptr.Deref(v.Spec.HolderIdentity, "") == leader.id {
			return v.Spec.RenewTime.Time
		}
	}
	t.Fatalf("%s never held the Lease", leader.id)
	return time.Time{}
}

// handOver stops from and waits for to to lead: at once on a released Lease, else after from's
// Lease expired.
func (h *handover) handOver(t *testing.T, from, to *contender, released bool) {
	t.Helper()
	h.holdsAgainst(t, from, to)
	h.stop(t, from)
	h.waitLeads(t, to)
	last := h.lastRenewal(t, from)
	if expiry := last.Add(handoverLeaseDuration); released && !to.startedAt.Before(expiry) {
		t.Errorf("%s took the released Lease at %s, not before %s's expired at %s", to.id, to.startedAt.Format(time.StampMilli), from.id, expiry.Format(time.StampMilli))
	}
	if expiry := last.Truncate(to.seen).Add(handoverLeaseDuration); !released && to.startedAt.Before(expiry) {
		t.Errorf("%s took the Lease at %s, before %s's expired at %s (its last renewal %s, seen at a resolution of %s)",
			to.id, to.startedAt.Format(time.StampMilli), from.id, expiry.Format(time.StampMilli), last.Format(time.StampMilli), to.seen)
	}
}

// The operator's leader election and client-go's (tools/leaderelection) elect one leader on the
// same Lease of a real apiserver, as the replicas of two releases do during an upgrade: each
// follows while the other renews, takes a released Lease at once and an abandoned one once it
// expired, in both directions, and counts every transition.
func TestElectionHandsOverWithClientGo(t *testing.T) {
	h := newHandover(t)

	a := h.runOurs(t, "ours-a", true)
	h.waitLeads(t, a)
	b := h.runClientGo(t, "client-go-b", false)
	h.handOver(t, a, b, true) // ours releases, client-go takes it
	c := h.runOurs(t, "ours-c", false)
	h.handOver(t, b, c, false) // client-go stops renewing, ours takes it once expired
	d := h.runClientGo(t, "client-go-d", true)
	h.handOver(t, c, d, false) // ours stops renewing, client-go takes it once expired
	e := h.runOurs(t, "ours-e", false)
	h.handOver(t, d, e, true) // client-go releases, ours takes it

	h.mu.Lock()
	defer h.mu.Unlock()
	for _, msg := range h.twice {
		t.Error(msg)
	}
	// The holders the apiserver stored, each change once, with the transitions counted.
	var got []string
	prev := "-"
	for _, v := range h.versions {
		holder := ptr.Deref(v.Spec.HolderIdentity, "")
		if holder != prev {
			got = append(got, fmt.Sprintf("%q/%d", holder, ptr.Deref(v.Spec.LeaseTransitions, -1)))
			prev = holder
		}
	}
	want := []string{`"ours-a"/0`, `""/0`, `"client-go-b"/1`, `"ours-c"/2`, `"client-go-d"/3`, `""/3`, `"ours-e"/4`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("holders of the Lease:\n got %v\nwant %v", got, want)
	}
	t.Logf("holders of the Lease over %d versions: %v", len(h.versions), got)
}
