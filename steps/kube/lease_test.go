package kube_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
)

// candidate runs an Election on the shared fake apiserver and reports its leadership.
type candidate struct {
	e       *kube.Election
	started chan struct{} // closed when it starts leading
	leadEnd chan struct{} // closed when its leading context ends
	done    chan struct{} // closed when Run returns
	cancel  context.CancelFunc
}

func runCandidate(t *testing.T, cs *fake.Clientset, id string, leaseDuration time.Duration) *candidate {
	t.Helper()
	c := &candidate{started: make(chan struct{}), leadEnd: make(chan struct{}), done: make(chan struct{})}
	c.e = &kube.Election{
		Leases: clientset.Kube(cs).CoordinationV1().Leases("linkerd"), Name: "trust-rotation-operator", Identity: id,
		LeaseDuration: leaseDuration, RenewDeadline: leaseDuration * 2 / 3, RetryPeriod: leaseDuration / 10,
		ReleaseOnCancel: true,
		OnStartedLeading: func(ctx context.Context) {
			close(c.started)
			<-ctx.Done()
			close(c.leadEnd)
		},
	}
	if err := c.e.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-c.done
	})
	return c
}

func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

func leaseOf(t *testing.T, cs *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("linkerd").Get(context.Background(), "trust-rotation-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestElectionOneLeaderThenHandOverOnRelease(t *testing.T) {
	cs := fake.NewClientset()
	a := runCandidate(t, cs, "a", 3*time.Second)
	within(t, a.started, 5*time.Second, "a leads an empty cluster")
	b := runCandidate(t, cs, "b", 3*time.Second)

	// b keeps trying while a renews: it must not lead. Watch a few of a's renewals go by.
	renewed := leaseOf(t, cs).Spec.RenewTime.Time
	deadline := time.Now().Add(10 * time.Second)
	for seen := 0; seen < 3; {
		if time.Now().After(deadline) {
			t.Fatal("a did not renew its lease")
		}
		select {
		case <-b.started:
			t.Fatal("b leads while a holds a valid lease")
		case <-time.After(50 * time.Millisecond):
		}
		if r := leaseOf(t, cs).Spec.RenewTime.Time; r.After(renewed) {
			renewed, seen = r, seen+1
		}
	}
	if got := ptr.Deref(leaseOf(t, cs).Spec.HolderIdentity, ""); got != "a" {
		t.Fatalf("holder = %q, want a", got)
	}

	// a stops: it releases the lease, and b takes it well before a's lease would have expired.
	stopped := time.Now()
	a.cancel()
	within(t, a.leadEnd, time.Second, "a stops leading")
	within(t, a.done, 5*time.Second, "a's Run returns")
	within(t, b.started, 2*time.Second, "b leads once a released the lease")
	if took := time.Since(stopped); took >= 3*time.Second {
		t.Errorf("b took over %s after the release, no faster than an expiry", took)
	}
	l := leaseOf(t, cs)
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != "b" {
		t.Errorf("holder = %q, want b", got)
	}
	if got := ptr.Deref(l.Spec.LeaseTransitions, 0); got != 1 {
		t.Errorf("leaseTransitions = %d, want 1 (a, then b)", got)
	}
}

// A leader that cannot renew stops leading within its renew deadline, before its lease expires
// for the others: never two leaders at once.
func TestElectionLeaderThatCannotRenewStopsBeforeTheLeaseExpires(t *testing.T) {
	cs := fake.NewClientset()
	var failing atomic.Bool
	cs.PrependReactor("*", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if failing.Load() && action.GetVerb() != "get" {
			return true, nil, apierrors.NewServiceUnavailable("apiserver unreachable")
		}
		return false, nil, nil
	})
	a := runCandidate(t, cs, "a", 3*time.Second)
	within(t, a.started, 5*time.Second, "a leads")
	lastRenew := leaseOf(t, cs).Spec.RenewTime.Time
	failing.Store(true)
	within(t, a.leadEnd, 5*time.Second, "a stops leading when renewals fail")
	// Renewals failed from lastRenew on at the latest; the others may take over after
	// lastRenew+LeaseDuration. a must have stopped before that.
	if stoppedAt, expires := time.Now(), lastRenew.Add(3*time.Second); !stoppedAt.Before(expires) {
		t.Errorf("a stopped leading at %s, after its lease expired at %s", stoppedAt.Format(time.StampMilli), expires.Format(time.StampMilli))
	}
}

// The watchdog (/healthz) passes while the leader renews, and fails once it has gone a lease
// duration without renewing.
func TestElectionWatchdog(t *testing.T) {
	cs := fake.NewClientset()
	var failing atomic.Bool
	cs.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, apierrors.NewServiceUnavailable("apiserver unreachable")
		}
		return false, nil, nil
	})
	a := runCandidate(t, cs, "a", 2*time.Second)
	within(t, a.started, 5*time.Second, "a leads")
	if err := a.e.Check(0); err != nil {
		t.Fatalf("watchdog of a renewing leader: %v", err)
	}
	failing.Store(true)
	deadline := time.Now().Add(6 * time.Second)
	for a.e.Check(0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the watchdog still passes 6s after renewals of a 2s lease began to fail")
		}
		<-time.After(50 * time.Millisecond)
	}
}

// A follower takes over a lease whose holder vanished, after seeing it unchanged for its
// duration, counting the transition.
func TestElectionTakesOverAnExpiredLease(t *testing.T) {
	cs := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "trust-rotation-operator", Namespace: "linkerd"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("gone"), LeaseDurationSeconds: ptr.To[int32](1),
			RenewTime: &metav1.MicroTime{Time: time.Now()}, LeaseTransitions: ptr.To[int32](4),
		},
	})
	first := time.Now()
	b := runCandidate(t, cs, "b", 3*time.Second)
	within(t, b.started, 5*time.Second, "b takes over the expired lease")
	if waited := time.Since(first); waited < time.Second {
		t.Errorf("b took over after %s, before the lease's 1s duration had passed since it saw it", waited)
	}
	l := leaseOf(t, cs)
	if got := ptr.Deref(l.Spec.LeaseTransitions, 0); got != 5 {
		t.Errorf("leaseTransitions = %d, want 5", got)
	}
	if got := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); got != 3 {
		t.Errorf("leaseDurationSeconds = %d, want 3", got)
	}
}

// Of two candidates racing for one free lease, the apiserver's conflict on the stale
// resourceVersion lets one win.
func TestElectionConflictingAcquisitionsElectOne(t *testing.T) {
	cs := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "trust-rotation-operator", Namespace: "linkerd", ResourceVersion: "1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
	})
	var updates atomic.Int32
	cs.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		// The fake does not check resourceVersions: the first update wins, every later
		// update of the version it replaced conflicts, as on a real apiserver.
		obj := action.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if obj.ResourceVersion == "1" && updates.Add(1) > 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, obj.Name, errors.New("the object has been modified"))
		}
		if obj.ResourceVersion == "1" {
			obj.ResourceVersion = "2"
		}
		return false, nil, nil
	})
	a := runCandidate(t, cs, "a", 3*time.Second)
	b := runCandidate(t, cs, "b", 3*time.Second)
	var winner, loser *candidate
	select {
	case <-a.started:
		winner, loser = a, b
	case <-b.started:
		winner, loser = b, a
	case <-time.After(5 * time.Second):
		t.Fatal("nobody leads")
	}
	if got := ptr.Deref(leaseOf(t, cs).Spec.HolderIdentity, ""); got != winner.e.Identity {
		t.Fatalf("holder = %q, want the leader %q", got, winner.e.Identity)
	}
	select {
	case <-loser.started:
		t.Fatalf("both %s and %s lead", a.e.Identity, b.e.Identity)
	case <-time.After(time.Second):
	}
}
