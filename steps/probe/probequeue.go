package probe

import (
	"container/heap"
	"sync"
	"time"
)

// probeQueue is the CertTracker's queue of pods to probe, in two lanes. The soon lane holds the
// pods the rotation may be waiting on right now: a pod incarnation never probed (it just
// started) and a pod whose last probe failed (its proxy has no certificate yet). The later lane
// holds re-probes of pods that answered with another issuer's certificate: after an issuer
// change that is every pod of the mesh, and none of them can converge before its proxy
// refreshes its certificate or the pod is replaced. A worker always takes from the soon lane
// first, so a new control-plane pod is never probed behind thousands of such re-probes; and some
// workers take only from it, so it is served even while slow re-probes occupy the others.
//
// Like client-go's workqueue, a key is queued at most once (adding it to the soon lane while
// it waits in the later lane moves it), and a key being probed is not handed out again until
// Done: re-added meanwhile, it is queued again at Done.
type probeQueue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	soon       []string
	later      []string
	queued     map[string]lane // keys waiting in a lane
	processing map[string]bool
	dirty      map[string]lane // keys added while processing: queued again at Done
	// Delayed adds: at most one per key, in a heap by time served by one goroutine and timer
	// (a time.AfterFunc per key cost ~150 bytes each, with 10,000 pods waiting).
	waiting  map[string]*delayed
	delays   delayHeap
	wake     chan struct{} // a sooner delay was added, or the queue shut down
	shutdown bool
}

// delayed is a pending AddAfter: one per pod while the expiry watch waits for its proxy's
// renewal, so kept to 32 bytes (the time in Unix nanoseconds, the lane and heap index narrow).
type delayed struct {
	key   string
	at    int64 // Unix nanoseconds
	lane  lane
	index int32 // in delays
}

// delayHeap orders delayed adds by time (container/heap).
type delayHeap []*delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = int32(i), int32(j)
}
func (h *delayHeap) Push(x any) {
	d := x.(*delayed)
	d.index = int32(len(*h))
	*h = append(*h, d)
}
func (h *delayHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

type lane int8

const (
	laneSoon lane = iota + 1
	laneLater
)

func newProbeQueue() *probeQueue {
	q := &probeQueue{
		queued:     map[string]lane{},
		processing: map[string]bool{},
		dirty:      map[string]lane{},
		waiting:    map[string]*delayed{},
		wake:       make(chan struct{}, 1),
	}
	q.cond = sync.NewCond(&q.mu)
	go q.runDelays()
	return q
}

// Add queues key in lane l, unless it is already queued in the same or a sooner lane.
func (q *probeQueue) Add(key string, l lane) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.shutdown {
		q.addLocked(key, l)
	}
}

// addLocked queues key in lane l, or marks it to be queued again at Done while it is being
// probed; q.mu is held.
func (q *probeQueue) addLocked(key string, l lane) {
	if q.processing[key] {
		if d, ok := q.dirty[key]; !ok || l < d {
			q.dirty[key] = l
		}
		return
	}
	q.enqueue(key, l)
}

// enqueue puts key in lane l; q.mu is held.
func (q *probeQueue) enqueue(key string, l lane) {
	switch cur, ok := q.queued[key]; {
	case ok && cur <= l:
		return
	case ok: // waiting in the later lane: move it
		q.later = remove(q.later, key)
	}
	q.queued[key] = l
	if l == laneSoon {
		q.soon = append(q.soon, key)
	} else {
		q.later = append(q.later, key)
	}
	q.cond.Broadcast()
}

// AddAfter queues key in lane l once d has passed. A key waits at most once: of two delayed
// adds, the earlier stays.
func (q *probeQueue) AddAfter(key string, l lane, d time.Duration) {
	if d <= 0 {
		q.Add(key, l)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d).UnixNano()
	if w, ok := q.waiting[key]; ok {
		if w.at <= at {
			return
		}
		w.at, w.lane = at, l
		heap.Fix(&q.delays, int(w.index))
	} else {
		w = &delayed{key: key, at: at, lane: l}
		q.waiting[key] = w
		heap.Push(&q.delays, w)
	}
	if q.delays[0].key == key { // the next delay to serve changed
		q.nudge()
	}
}

// nudge wakes runDelays; q.mu is held.
func (q *probeQueue) nudge() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Forget drops key's delayed add, if any: its pod is gone, and a re-probe of it, hours away for
// a converged pod (the expiry watch), would only hold its key until then.
func (q *probeQueue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w, ok := q.waiting[key]; ok {
		heap.Remove(&q.delays, int(w.index))
		delete(q.waiting, key)
	}
}

// runDelays adds the delayed keys whose time has come, until the queue shuts down.
func (q *probeQueue) runDelays() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		if q.shutdown {
			q.mu.Unlock()
			return
		}
		now := time.Now().UnixNano()
		for len(q.delays) > 0 && q.delays[0].at <= now {
			w := heap.Pop(&q.delays).(*delayed)
			delete(q.waiting, w.key)
			q.addLocked(w.key, w.lane)
		}
		var next <-chan time.Time
		if len(q.delays) > 0 {
			timer.Reset(time.Duration(q.delays[0].at - now))
			next = timer.C
		}
		q.mu.Unlock()
		select {
		case <-next:
		case <-q.wake:
		}
	}
}

// Get blocks until a key is available and returns it, from the soon lane first; with soonOnly,
// only from the soon lane. It returns false once the queue is shut down.
func (q *probeQueue) Get(soonOnly bool) (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.shutdown && len(q.soon) == 0 && (soonOnly || len(q.later) == 0) {
		q.cond.Wait()
	}
	if q.shutdown {
		return "", false
	}
	var key string
	if len(q.soon) > 0 {
		key, q.soon = q.soon[0], q.soon[1:]
	} else {
		key, q.later = q.later[0], q.later[1:]
	}
	delete(q.queued, key)
	q.processing[key] = true
	return key, true
}

// Done marks key probed; if it was added meanwhile it is queued again.
func (q *probeQueue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if l, ok := q.dirty[key]; ok {
		delete(q.dirty, key)
		if !q.shutdown {
			q.enqueue(key, l)
		}
	}
}

// Len returns the number of keys waiting in each lane.
func (q *probeQueue) Len() (soon, later int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.soon), len(q.later)
}

// ShutDown stops the pending delayed adds and wakes every Get.
func (q *probeQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.waiting, q.delays = map[string]*delayed{}, nil
	q.nudge()
	q.cond.Broadcast()
}

// remove deletes the first occurrence of key from s.
func remove(s []string, key string) []string {
	for i, k := range s {
		if k == key {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}
