package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Election elects one leader among the operator's replicas on a coordination.k8s.io Lease.
//
// It is client-go's leader election (tools/leaderelection, uncoordinated, on a LeaseLock), the
// same algorithm on the same Lease fields, so replicas of an older release that still use
// client-go's elect with this one during an upgrade. It is written here because client-go's
// package imports the typed clients of every API group (see the package doc). The guarantee both
// rest on: a leader stops leading when it has not renewed for RenewDeadline, before
// LeaseDuration, after which a follower that saw the Lease unchanged for that long takes it; an
// update carries the resourceVersion read, so of two contenders one gets a conflict.
type Election struct {
	Leases   Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	Name     string // the Lease's name, in the namespace of Leases
	Identity string

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ReleaseOnCancel gives the Lease up when ctx ends while leading, so a follower takes over
	// at once rather than after LeaseDuration.
	ReleaseOnCancel bool

	// OnStartedLeading runs in its own goroutine once the Lease is acquired; its context ends
	// when leadership does. OnStoppedLeading runs when Run returns, leader or not. OnNewLeader
	// runs (in its own goroutine) when the Lease is seen held by another identity.
	OnStartedLeading func(context.Context)
	OnStoppedLeading func()
	OnNewLeader      func(identity string)

	mu sync.Mutex
	// observed is the Lease's spec last seen or written, first seen changed at observedTime
	// (by this process's clock: clocks of replicas are never compared); lease is the object
	// last read or written, whose resourceVersion the next update carries.
	observed     coordinationv1.LeaseSpec
	observedTime time.Time
	lease        *coordinationv1.Lease
	reported     string
}

// jitterFactor spreads the followers' attempts over up to 2.2 retry periods, as client-go does.
const jitterFactor = 1.2

// Validate says what is wrong with the durations, as client-go's NewLeaderElector does.
func (e *Election) Validate() error {
	switch {
	case e.LeaseDuration <= e.RenewDeadline:
		return fmt.Errorf("leader election: the lease duration (%s) must be longer than the renew deadline (%s)", e.LeaseDuration, e.RenewDeadline)
	case e.RenewDeadline <= time.Duration(jitterFactor*float64(e.RetryPeriod)):
		return fmt.Errorf("leader election: the renew deadline (%s) must be longer than %.1f times the retry period (%s)", e.RenewDeadline, jitterFactor, e.RetryPeriod)
	case e.RetryPeriod <= 0:
		return fmt.Errorf("leader election: the retry period (%s) must be positive", e.RetryPeriod)
	case e.Identity == "":
		return fmt.Errorf("leader election: no identity")
	}
	return nil
}

// Run campaigns until it holds the Lease, leads until it fails to renew it or ctx ends, and
// returns.
func (e *Election) Run(ctx context.Context) {
	if e.OnStoppedLeading != nil {
		defer e.OnStoppedLeading()
	}
	if !e.acquire(ctx) {
		return
	}
	leadCtx, stop := context.WithCancel(ctx)
	defer stop()
	go e.OnStartedLeading(leadCtx)
	e.renew(leadCtx)
	stop()
	if e.ReleaseOnCancel {
		e.release(ctx)
	}
}

func (e *Election) acquire(ctx context.Context) bool {
	log := klog.FromContext(ctx)
	log.Info("Attempting to acquire the leader lease", "lease", e.Name)
	for {
		ok := e.tryAcquireOrRenew(ctx)
		e.reportTransition()
		if ok {
			log.Info("Acquired the leader lease", "lease", e.Name)
			return true
		}
		next := e.RetryPeriod + time.Duration(rand.Float64()*jitterFactor*float64(e.RetryPeriod))
		if !Wait(ctx, next) {
			return false
		}
	}
}

// renew renews the Lease every RetryPeriod; a renewal that does not succeed within
// RenewDeadline, retried every RetryPeriod, ends leadership.
func (e *Election) renew(ctx context.Context) {
	log := klog.FromContext(ctx)
	for ctx.Err() == nil {
		if !e.renewWithin(ctx) {
			if ctx.Err() == nil {
				log.Info("Failed to renew the leader lease within the renew deadline", "lease", e.Name, "renewDeadline", e.RenewDeadline)
			}
			return
		}
		if !Wait(ctx, e.RetryPeriod) {
			return
		}
	}
}

func (e *Election) renewWithin(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, e.RenewDeadline)
	defer cancel()
	for {
		ok := e.tryAcquireOrRenew(ctx)
		e.reportTransition()
		if ok {
			return true
		}
		if !Wait(ctx, e.RetryPeriod) {
			return false
		}
	}
}

func (e *Election) tryAcquireOrRenew(ctx context.Context) bool {
	log := klog.FromContext(ctx)
	now := time.Now()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(e.Identity),
		LeaseDurationSeconds: ptr.To(int32(e.LeaseDuration / time.Second)),
		AcquireTime:          &metav1.MicroTime{Time: now},
		RenewTime:            &metav1.MicroTime{Time: now},
		LeaseTransitions:     ptr.To[int32](0),
	}

	// The fast path: the leader renews the Lease it last wrote, without reading it first.
	e.mu.Lock()
	leading, valid, last := e.isLeaderLocked(), e.validLocked(now), e.lease
	acquired, transitions := e.observed.AcquireTime, e.observed.LeaseTransitions
	e.mu.Unlock()
	if leading && valid && last != nil {
		spec.AcquireTime, spec.LeaseTransitions = acquired, transitions
		err := e.update(ctx, last, spec)
		if err == nil {
			return true
		}
		log.V(2).Info("Failed to renew the leader lease optimistically, reading it", "lease", e.Name, "err", err)
	}

	cur, err := e.Leases.Get(ctx, e.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.Name}, Spec: spec}
		created, err := e.Leases.Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			log.Error(err, "Failed to create the leader lease", "lease", e.Name)
			return false
		}
		e.observe(created, now)
		return true
	}
	if err != nil {
		log.Error(err, "Failed to read the leader lease", "lease", e.Name)
		return false
	}

	e.mu.Lock()
	e.lease = cur
	if !apiequality.Semantic.DeepEqual(e.observed, cur.Spec) {
		e.observed, e.observedTime = *cur.Spec.DeepCopy(), now
	}
	held := ptr.Deref(cur.Spec.HolderIdentity, "") != "" && e.validLocked(now) && !e.isLeaderLocked()
	leading = e.isLeaderLocked()
	e.mu.Unlock()
	if held {
		log.V(4).Info("The leader lease is held and has not expired", "lease", e.Name, "holder", ptr.Deref(cur.Spec.HolderIdentity, ""))
		return false
	}
	if leading {
		spec.AcquireTime, spec.LeaseTransitions = cur.Spec.AcquireTime, cur.Spec.LeaseTransitions
	} else {
		spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	}
	if err := e.update(ctx, cur, spec); err != nil {
		log.Error(err, "Failed to update the leader lease", "lease", e.Name)
		return false
	}
	return true
}

// update writes spec over lease, carrying its resourceVersion, and remembers what it wrote.
func (e *Election) update(ctx context.Context, lease *coordinationv1.Lease, spec coordinationv1.LeaseSpec) error {
	next := lease.DeepCopy()
	next.Spec = spec
	written, err := e.Leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	e.observe(written, time.Now())
	return nil
}

func (e *Election) observe(lease *coordinationv1.Lease, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lease, e.observed, e.observedTime = lease, *lease.Spec.DeepCopy(), at
}

// release gives the Lease up: no holder, a one-second duration.
func (e *Election) release(ctx context.Context) {
	log := klog.FromContext(ctx)
	// ctx has ended: the release gets a RenewDeadline of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.RenewDeadline)
	defer cancel()
	cur, err := e.Leases.Get(rctx, e.Name, metav1.GetOptions{})
	if err != nil {
		log.Error(err, "Failed to read the leader lease to release it", "lease", e.Name)
		return
	}
	e.mu.Lock()
	leading := e.isLeaderLocked()
	e.mu.Unlock()
	if !leading {
		return
	}
	now := &metav1.MicroTime{Time: time.Now()}
	spec := coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1),
		AcquireTime: now, RenewTime: now, LeaseTransitions: cur.Spec.LeaseTransitions,
	}
	if err := e.update(rctx, cur, spec); err != nil {
		log.Error(err, "Failed to release the leader lease", "lease", e.Name)
	}
}

func (e *Election) isLeaderLocked() bool {
	return ptr.Deref(e.observed.HolderIdentity, "") == e.Identity
}

// validLocked: the Lease as last observed has not expired, by this process's clock.
func (e *Election) validLocked(now time.Time) bool {
	d := time.Duration(ptr.Deref(e.observed.LeaseDurationSeconds, 0)) * time.Second
	return e.observedTime.Add(d).After(now)
}

func (e *Election) reportTransition() {
	e.mu.Lock()
	holder := ptr.Deref(e.observed.HolderIdentity, "")
	changed := holder != e.reported && holder != ""
	if changed {
		e.reported = holder
	}
	e.mu.Unlock()
	if changed && e.OnNewLeader != nil {
		go e.OnNewLeader(holder)
	}
}

// Check fails when this replica leads but has not renewed the Lease for longer than
// LeaseDuration and tolerance: a wedged leader, which /healthz reports so that its liveness
// probe restarts it.
func (e *Election) Check(tolerance time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.isLeaderLocked() {
		return nil
	}
	if since := time.Since(e.observedTime); since > e.LeaseDuration+tolerance {
		return fmt.Errorf("leader lease %s not renewed for %s", e.Name, since.Round(time.Millisecond))
	}
	return nil
}

// Wait waits for d or the end of ctx, and reports whether ctx is still alive: the pause
// between two attempts, here and in the operator's failure back-off.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
