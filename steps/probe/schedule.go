package probe

import (
	"context"
	"crypto/x509"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// Backoff of probes of a pod that has not converged. A probe that fails (the proxy has no
// certificate yet, or does not answer yet) is retried soon: a new pod gets its certificate within
// a second or so of starting, and while urgent the rotation waits on exactly that, so the urgent
// cap bounds how late the last pod's convergence is seen. A proxy that answers with another
// issuer's certificate changes only when it refreshes it (minutes) or is restarted (a new pod,
// probed as it starts): re-probing it every few seconds was thousands of TLS handshakes a second
// at 10,000 pods for nothing, so it backs off from a second to half a minute.
const (
	probeBaseDelay = 100 * time.Millisecond
	probeUrgentCap = time.Second
	// While urgent, the first probeQuickRetries failures of a pod are retried every
	// probeQuickDelay: a pod that just started usually lacks its certificate for well under a
	// second, and the rotation is waiting on exactly that pod (the bench measured 1-2.5s from
	// the last new pod's certificate to the status with doubling delays).
	probeQuickDelay     = 200 * time.Millisecond
	probeQuickRetries   = 8
	probeOtherBase      = time.Second
	probeOtherUrgentCap = 30 * time.Second
	probeRelaxedCap     = 5 * time.Minute
	// refreshMargin follows a proxy's predicted refresh (steps.NextRefresh) before the probe
	// that looks for the new certificate: the refresh itself is a round trip to identity.
	refreshMargin = time.Second
	// probeRefreshCap is the longest a pod first seen off the root's path waits for its next
	// probe while urgent, however far its proxy's refresh; it doubles with each reading off the
	// path, probeRefreshCapDoublings times at most (40 minutes).
	probeRefreshCap          = 5 * time.Minute
	probeRefreshCapDoublings = 3
	// probeFirstDelay is how long after it starts a data-plane proxy is first probed while not
	// urgent (firstProbeDelay): linkerd2-proxy reports itself ready once it has its certificate
	// ("Certified identity", linkerd/app/src/lib.rs), usually well within this.
	probeFirstDelay  = time.Second
	defaultProbeTime = 5 * time.Second
)

// Run probes until ctx ends, with concurrency workers. A quarter of them probe only the pods the
// rotation may be waiting on (see probeQueue), so those never wait behind slow re-probes.
func (t *CertTracker) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		t.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	reserved := t.concurrency / 4
	for i := range t.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t.probeNext(ctx, i < reserved) {
			}
		}()
	}
	wg.Wait()
}

func (t *CertTracker) probeNext(ctx context.Context, soonOnly bool) bool {
	key, ok := t.queue.Get(soonOnly)
	if !ok {
		return false
	}
	defer t.queue.Done(key)
	p, ok := t.index.Get(key)
	if !ok || !p.Meshed || !p.Alive || !p.Running {
		return true
	}
	if t.skipReread(p) {
		t.afterProbe(key, p.UID)
		return true
	}
	certs, leaf, err := ProbePod(ctx, t.dial, p, t.timeout)
	if ctx.Err() != nil {
		return false
	}
	if t.OnProbe != nil {
		t.OnProbe(err)
	}
	t.leafLifetime.observe(leaf)
	changed := t.record(ctx, p, certs, predictRefresh(p, leaf), err)
	if t.leafTimes(p, leaf, time.Now()) {
		changed = true
	}
	if changed && t.notify != nil {
		t.notify(p)
	}
	t.afterProbe(key, p.UID)
	return true
}

// predictRefresh is when p's proxy refreshes leaf, the certificate it presented
// (steps.NextRefresh); zero when unknown, or when the reading cannot be relied on to last: a leaf
// issued before the pod was created belongs to no proxy of that pod. Such a reading is the
// previous holder of the pod's IP answering while its own pod goes. On a node that cannot happen
// (the old pod's sandbox holds the IP until its proxy is gone), but where it does (a simulated
// mesh whose kubelet lags, a CNI that hands out an IP early) the pod is probed again on the
// backoff, not at the other proxy's refresh, hours away.
//
// Linkerd's identity backdates NotBefore by its clock skew allowance (steps.DefaultClockSkew by
// default); leafBeforePodMargin covers the clocks of nodes. An identity configured with a larger
// allowance makes fresh leaves look older than their pods: those pods are probed on the backoff,
// as before refreshes were predicted, which costs probes and nothing else.
func predictRefresh(p *podindex.Pod, leaf *x509.Certificate) time.Time {
	if leaf == nil || p.RefreshMax <= 0 {
		return time.Time{}
	}
	if !p.Created.IsZero() && leaf.NotBefore.Add(steps.DefaultClockSkew+leafBeforePodMargin).Before(p.Created) {
		return time.Time{}
	}
	return steps.NextRefresh(leaf.NotBefore, leaf.NotAfter, p.RefreshMin, p.RefreshMax)
}

// leafBeforePodMargin is how much earlier than its pod's creation a leaf may have been issued
// (beyond the clock skew allowance) before predictRefresh distrusts the reading.
const leafBeforePodMargin = 5 * time.Second

// record accounts for a probe of p that returned certs or err, schedules the next probe of a pod
// that has not converged, and reports whether what the convergence says of the pod changed.
// refresh is when the proxy refreshes the certificate it presented (steps.NextRefresh); zero
// when unknown.
func (t *CertTracker) record(ctx context.Context, p *podindex.Pod, certs []*x509.Certificate, refresh time.Time, err error) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.live[p.UID]
	if tp == nil {
		// The pod was deleted, or replaced under the same name, while it was probed: what it
		// presented says nothing of any pod there is now (PodChanged queued a replacement).
		return false
	}
	first := !tp.probed
	if first {
		t.unprobed--
	}
	tp.probed = true
	r := &tp.result
	prevChain, prevErr := r.chain, r.err
	r.chain, r.err, r.refresh = nil, "", 0
	if err == nil && !refresh.IsZero() {
		r.refresh = refresh.UnixNano()
	}
	r.rejected = rejectedChain(err)
	if r.rejected {
		t.rejected[p.UID] = p.Key()
	} else {
		delete(t.rejected, p.UID)
	}
	if err == nil {
		r.chain = t.intern(certs)
	} else {
		r.err = err.Error()
		r.failures++
		if r.rejected {
			// Not a proxy still starting: something else answers on the pod's address.
			klog.FromContext(ctx).V(2).Info("Probe rejected the chain the pod's address presented", "pod", p.Key(), "reason", r.err)
		} else {
			klog.FromContext(ctx).V(4).Info("Probe failed", "pod", p.Key(), "err", err)
		}
	}
	wasOK := tp.ok
	nowOK := err == nil && t.root.verifies(r.chain.key, r.chain.certs)
	switch {
	case nowOK && !wasOK:
		addCount(t.behind, tp.workload, -1)
		t.converged++
	case wasOK && !nowOK:
		addCount(t.behind, tp.workload, +1)
		t.converged--
	}
	tp.ok = nowOK
	// What a convergence says of the pod changed: whether it converged, or why not (the
	// reason it names the pod with). The operator observes on changes only, so a probe that
	// turned "not probed yet" into "probe failed: …" must be one.
	changed = first || wasOK != nowOK || r.err != prevErr || r.chain != prevChain
	if nowOK {
		r.failures = 0
		return changed
	}
	if err == nil {
		r.failures++
	}
	t.retry(p, r, refresh, err)
	return changed
}

// retry schedules the next probe of p, which has not converged: its last probe failed with err,
// or read a chain off the root's path whose proxy refreshes at refresh (zero when unknown).
// While not urgent, a pod seen off the root's path waits for the next SetActive instead of being
// polled, and a failed probe backs off to probeRelaxedCap, unless the pod is starting: its
// proxy may still be obtaining its certificate, and the counts wait on exactly that reading.
// Called with t.mu held.
func (t *CertTracker) retry(p *podindex.Pod, r *probeResult, refresh time.Time, err error) {
	if !t.urgent && err == nil {
		return
	}
	prompt := t.urgent || err != nil && starting(p, time.Now())
	limit := probeRelaxedCap
	if prompt {
		limit = probeUrgentCap
	}
	delay, l := probeBaseDelay<<min(r.failures, 16), laneSoon
	if prompt && r.failures <= probeQuickRetries {
		delay = probeQuickDelay
	}
	if err == nil { // only while urgent
		delay, limit, l = probeOtherBase<<min(r.failures-1, 16), probeOtherUrgentCap, laneLater
		if until := time.Until(refresh); until > 0 {
			// Until the proxy refreshes, it presents this certificate: probing it again
			// before then is a handshake for nothing. A proxy that restarts in place meanwhile
			// is probed as the pod reports it (PodChanged). The wait is capped all the same,
			// so that a reading that does not hold cannot hold the rotation until the
			// refresh, hours later: a 10,000-pod bench run stalled on two pods read off the
			// root's path that presented the new issuer's certificate when probed again.
			// The cap doubles with each reading that found the pod still off the path (up to
			// probeRefreshCapDoublings times): a pod that waits for its restart all through a
			// long rollout is read again after 5, 10, 20 minutes, not every 5.
			delay, limit = until+refreshMargin, probeRefreshCap<<min(r.failures-1, probeRefreshCapDoublings)
		}
	}
	t.queue.AddAfter(p.Key(), l, min(delay, limit))
}

// starting reports whether p's proxy may still be obtaining its first certificate at now: the
// pod was created less than probeStartingWindow of its proxy's min refresh ago. A proxy that
// fails to obtain it (identity being restarted, as the last control-plane refresh does right
// before the final data-plane restart) tries again after its min refresh (linkerd2-proxy
// linkerd/proxy/identity-client/src/certify.rs: a failure sleeps min_refresh). On the relaxed
// backoff its certificate was read a dozen seconds or more after the proxy had it, and a
// rotation just Synced published a count still converging for as long. Retried as while
// urgent, a new pod is counted within a second of its certificate, for at most a few dozen
// handshakes per new pod whose proxy has none: a cost per change, not per pod of the mesh.
func starting(p *podindex.Pod, now time.Time) bool {
	minRefresh := p.RefreshMin
	if minRefresh <= 0 {
		minRefresh = steps.DefaultMinRefresh
	}
	return !p.Created.IsZero() && now.Sub(p.Created) < probeStartingWindow*minRefresh
}

// probeStartingWindow is, in min refreshes of a proxy, how long after its pod starts a failed
// probe is retried promptly (starting): the proxy's first attempt and two retries.
const probeStartingWindow = 3

// skipReread reports whether the probe of p now due would re-read, before its proxy's predicted
// refresh, a chain off the root's path (the refresh cap of retry) while p's Deployment rolls out
// a newer template (podindex.Index.Replacing). Such a pod is on its way out and its replacement is
// probed as it starts; the handshake would read the chain read last. Over the 10,000-pod bench's
// rotation, about 12,000 of the 42,000 chains read were such re-reads. The next re-read is
// scheduled as if this one had read the same chain: a rollout that stalls or is rolled back
// meanwhile leaves the pod read again at the next cap.
func (t *CertTracker) skipReread(p *podindex.Pod) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.live[p.UID]
	if tp == nil || !tp.probed || tp.result.chain == nil || tp.ok {
		return false
	}
	r := &tp.result
	refresh := time.Unix(0, r.refresh)
	if r.refresh == 0 || !time.Now().Before(refresh) || !t.index.Replacing(p) {
		return false
	}
	r.failures++
	t.retry(p, r, refresh, nil)
	return true
}

func (t *CertTracker) afterProbe(key, uid string) {
	if t.probed != nil {
		t.probed(key, uid)
	}
}
