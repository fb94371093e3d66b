package probe

import (
	"container/heap"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// TestCountsKeptPerChangeMatchAWalk drives a podindex.Index and its CertTracker through random pod
// events, probe results, changes of the certificate root and of the wanted trust-root hash, and
// after each one compares both convergences, read from the counts kept per change, with the same
// figures computed by walking every pod: the accounting must never drift from what a walk says.
func TestCountsKeptPerChangeMatchAWalk(t *testing.T) {
	anchorA, keyA := newCert(t, "root-a", true, nil, nil)
	anchorB, keyB := newCert(t, "root-b", true, nil, nil)
	issuerA, _ := newCert(t, "identity-a", true, anchorA, keyA)
	issuerB, _ := newCert(t, "identity-b", true, anchorB, keyB)
	chains := [][]*x509.Certificate{{issuerA}, {issuerB}}
	roots := []*x509.Certificate{anchorA, anchorB}
	hashes := []string{"hash-a", "hash-b"}

	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	tr.SetActive(anchorA, true)

	rng := rand.New(rand.NewPCG(1, 2))
	uid := 0
	want := hashes[0]
	for i := range 5000 {
		switch op := rng.IntN(10); {
		case op < 5: // a pod appears or changes, sometimes as a new incarnation
			n := rng.IntN(60)
			key := fmt.Sprintf("ns%d/pod-%d", n%3, n)
			p := &podindex.Pod{Namespace: fmt.Sprintf("ns%d", n%3), Name: fmt.Sprintf("pod-%d", n),
				Workload:      fmt.Sprintf("ns%d/Deployment/w%d", n%3, n%7),
				TrustRootHash: hashes[rng.IntN(2)], Meshed: rng.IntN(8) > 0, Alive: rng.IntN(8) > 0,
				Running: rng.IntN(4) > 0, ControlPlane: n%7 == 0}
			if old, ok := x.Get(key); ok && rng.IntN(3) > 0 {
				p.UID = old.UID
			} else {
				uid++
				p.UID = fmt.Sprint(uid)
			}
			x.Upsert(p)
		case op < 6:
			n := rng.IntN(60)
			x.Delete(fmt.Sprintf("ns%d/pod-%d", n%3, n))
		case op < 9: // a probe of some pod ends
			var pods []*podindex.Pod
			x.Each(func(p *podindex.Pod) { pods = append(pods, p) })
			if len(pods) == 0 {
				continue
			}
			p := pods[rng.IntN(len(pods))]
			if rng.IntN(4) == 0 {
				tr.record(t.Context(), p, nil, time.Time{}, errors.New("connection refused"))
			} else {
				tr.record(t.Context(), p, chains[rng.IntN(2)], time.Time{}, nil)
			}
		default:
			if rng.IntN(2) == 0 {
				tr.SetActive(roots[rng.IntN(2)], rng.IntN(2) == 0)
			} else {
				want = hashes[rng.IntN(2)]
			}
		}
		got, walked := x.TrustBundle(want), walkTrustBundle(x, want)
		if !sameConvergence(got, walked) {
			t.Fatalf("event %d: TrustBundle(%s) = %+v, a walk says %+v", i, want, got, walked)
		}
		if behind := x.Behind(); behind != walked.Target-walked.Converged {
			t.Fatalf("event %d: Behind() = %d, a walk says %d", i, behind, walked.Target-walked.Converged)
		}
		got, walked = tr.Certificates(), walkCertificates(tr)
		if !sameConvergence(got, walked) {
			t.Fatalf("event %d: Certificates() = %+v, a walk says %+v", i, got, walked)
		}
		if behind := tr.Behind(); behind != walked.Target-walked.Converged {
			t.Fatalf("event %d: CertTracker.Behind() = %d, a walk says %d", i, behind, walked.Target-walked.Converged)
		}
	}
}

// sameConvergence compares the counts and the workloads behind; the pods named are the first few
// of those workloads, checked by the unit tests of each convergence.
func sameConvergence(a, b steps.Convergence) bool {
	return a.Converged == b.Converged && a.Target == b.Target && a.BehindWorkloads == b.BehindWorkloads &&
		reflect.DeepEqual(a.Behind, b.Behind)
}

func walkTrustBundle(x *podindex.Index, hash string) steps.Convergence {
	c := steps.Convergence{}
	behind := map[string]int{}
	x.Each(func(p *podindex.Pod) {
		if p.ControlPlane {
			return
		}
		c.Target++
		if p.TrustRootHash == hash {
			c.Converged++
		} else {
			behind[p.Workload]++
		}
	})
	if !c.Done() {
		c.Behind, c.BehindWorkloads = walkTop(behind)
	}
	return c
}

func walkCertificates(tr *CertTracker) steps.Convergence {
	c := steps.Convergence{}
	behind := map[string]int{}
	tr.index.Each(func(p *podindex.Pod) {
		c.Target++
		if tp := tr.live[p.UID]; tp != nil && tp.probed && tp.result.chain != nil && tr.root.verifies(tp.result.chain.key, tp.result.chain.certs) {
			c.Converged++
		} else {
			behind[p.Workload]++
		}
	})
	if !c.Done() {
		c.Behind, c.BehindWorkloads = walkTop(behind)
	}
	return c
}

func walkTop(counts map[string]int) ([]steps.WorkloadCount, int) {
	var all []steps.WorkloadCount
	for w, n := range counts {
		all = append(all, steps.WorkloadCount{Workload: w, Pods: n})
	}
	sort.Slice(all, func(i, j int) bool {
		return all[i].Pods > all[j].Pods || all[i].Pods == all[j].Pods && all[i].Workload < all[j].Workload
	})
	return all[:min(len(all), podindex.BehindLimit)], len(all)
}

// TestProbeReportsWhatTheStatusWouldShow: the operator observes on changes only, so a probe
// result changes the tracker's report (and wakes the operator) whenever what a convergence says
// of the pod changes — its first result, another error, another chain — and only then.
func TestProbeReportsWhatTheStatusWouldShow(t *testing.T) {
	anchor, key := newCert(t, "root", true, nil, nil)
	other, otherKey := newCert(t, "other-root", true, nil, nil)
	issuer, _ := newCert(t, "identity", true, anchor, key)
	stranger, _ := newCert(t, "stranger", true, other, otherKey)
	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	tr.SetActive(anchor, true)
	p := &podindex.Pod{Namespace: "app", Name: "web-0", UID: "u", Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true}
	x.Upsert(p)
	refused, hung := errors.New("connection refused"), errors.New("context deadline exceeded")
	for i, step := range []struct {
		certs []*x509.Certificate
		err   error
		want  bool
	}{
		{nil, refused, true}, // first result: "not probed yet" becomes "probe failed"
		{nil, refused, false},
		{nil, hung, true},
		{[]*x509.Certificate{stranger}, nil, true}, // off the root's path
		{[]*x509.Certificate{stranger}, nil, false},
		{[]*x509.Certificate{issuer}, nil, true}, // converged
		{[]*x509.Certificate{issuer}, nil, false},
	} {
		if got := tr.record(t.Context(), p, step.certs, time.Time{}, step.err); got != step.want {
			t.Errorf("probe %d: changed = %v, want %v", i+1, got, step.want)
		}
	}
}

// TestOffPathPodWaitsForItsProxyRefresh: while urgent, a pod presenting a certificate off the
// root's path is probed again once its proxy refreshes (steps.NextRefresh), or after
// probeRefreshCap if that is sooner, not on a backoff of seconds; when the refresh is unknown, or
// already due, the backoff stays. A proxy restarted in place is probed again at once.
func TestOffPathPodWaitsForItsProxyRefresh(t *testing.T) {
	anchor, _ := newCert(t, "root", true, nil, nil)
	other, otherKey := newCert(t, "other-root", true, nil, nil)
	stranger, _ := newCert(t, "stranger", true, other, otherKey)
	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	defer tr.queue.ShutDown()
	tr.SetActive(anchor, true)
	p := &podindex.Pod{Namespace: "app", Name: "web-0", UID: "u", Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true}
	x.Upsert(p)
	due := func() time.Duration {
		d, _ := pendingDelay(tr.queue, p.Key())
		return d
	}
	forgetDelays := func() {
		tr.queue.mu.Lock()
		defer tr.queue.mu.Unlock()
		clear(tr.queue.waiting)
		tr.queue.delays = nil
	}
	off := []*x509.Certificate{stranger}

	tr.record(t.Context(), p, off, time.Now().Add(2*time.Minute), nil)
	if d := due(); d < 2*time.Minute-5*time.Second || d > 2*time.Minute+refreshMargin {
		t.Errorf("refresh in 2 minutes: next probe in %v, want at the refresh", d)
	}
	forgetDelays()
	tr.live[p.UID].result.failures = 0 // the pod's first reading off the path
	tr.record(t.Context(), p, off, time.Now().Add(time.Hour), nil)
	if d := due(); d < probeRefreshCap-5*time.Second || d > probeRefreshCap {
		t.Errorf("refresh in an hour: next probe in %v, want at most %v (a wrong reading is read again)", d, probeRefreshCap)
	}
	// Each further reading off the path doubles the cap, three times at most.
	for _, want := range []time.Duration{2 * probeRefreshCap, 4 * probeRefreshCap, 8 * probeRefreshCap, 8 * probeRefreshCap} {
		forgetDelays()
		tr.record(t.Context(), p, off, time.Now().Add(24*time.Hour), nil)
		if d := due(); d < want-5*time.Second || d > want {
			t.Errorf("read off the path %d times, refresh in a day: next probe in %v, want %v", tr.live[p.UID].result.failures, d, want)
		}
	}
	tr.live[p.UID].result.failures = 1
	forgetDelays()
	for _, refresh := range []time.Time{{}, time.Now().Add(-time.Minute)} {
		tr.record(t.Context(), p, off, refresh, nil)
		if d := due(); d <= 0 || d > probeOtherUrgentCap {
			t.Errorf("refresh %v: next probe in %v, want the backoff (at most %v)", refresh, d, probeOtherUrgentCap)
		}
	}

	for {
		if soon, _ := tr.queue.Len(); soon == 0 {
			break
		}
		key, _ := tr.queue.Get(false)
		tr.queue.Done(key)
	}
	restarted := *p
	restarted.ProxyRestarts++
	x.Upsert(&restarted)
	if soon, _ := tr.queue.Len(); soon != 1 {
		t.Errorf("after the proxy restarted in place: %d probes queued now, want 1", soon)
	}
	x.Upsert(&restarted)
	if soon, _ := tr.queue.Len(); soon != 1 {
		t.Errorf("another event of the same pod: %d probes queued now, want still 1", soon)
	}

	// A change of root judges again the chain the pod presented; the pod is probed again at its
	// refresh, not at once.
	tr.queue.ShutDown()
	tr.queue = newProbeQueue()
	tr.record(t.Context(), p, off, time.Now().Add(time.Hour), nil)
	third, _ := newCert(t, "third-root", true, nil, nil)
	tr.SetActive(third, true)
	if soon, later := tr.queue.Len(); soon+later != 0 {
		t.Errorf("after the root changed: %d+%d probes queued now, want none before the refresh", soon, later)
	}
	if d := due(); d < probeRefreshCap-5*time.Second {
		t.Errorf("after the root changed: next probe in %v, want at the refresh or the cap", d)
	}
	if tr.SetActive(other, true); tr.Certificates().Converged != 1 {
		t.Error("after the root changed to the one the chain verifies to: the pod has not converged")
	}
}

// TestRefreshIsNotPredictedFromALeafOlderThanThePod: a leaf issued before its pod was created
// (beyond the clock skew allowance and a margin) is another proxy's, answering on a reused IP:
// its refresh predicts nothing of the pod, which is probed again on the backoff.
func TestRefreshIsNotPredictedFromALeafOlderThanThePod(t *testing.T) {
	issued := time.Now().Add(-time.Hour).Truncate(time.Second)
	leaf := &x509.Certificate{NotBefore: issued.Add(-steps.DefaultClockSkew), NotAfter: issued.Add(24 * time.Hour)}
	pod := func(created time.Time) *podindex.Pod {
		return &podindex.Pod{Created: created, RefreshMin: steps.DefaultMinRefresh, RefreshMax: steps.DefaultMaxRefresh}
	}
	want := steps.NextRefresh(leaf.NotBefore, leaf.NotAfter, steps.DefaultMinRefresh, steps.DefaultMaxRefresh)
	for _, c := range []struct {
		name    string
		created time.Time
		want    time.Time
	}{
		{"pod created before the leaf", issued.Add(-10 * time.Second), want},
		{"pod created just after the leaf: clocks differ", issued.Add(leafBeforePodMargin - time.Second), want},
		{"pod created well after the leaf: another pod's proxy", issued.Add(leafBeforePodMargin + time.Second), time.Time{}},
		{"creation unknown", time.Time{}, want},
	} {
		if got := predictRefresh(pod(c.created), leaf); !got.Equal(c.want) {
			t.Errorf("%s: refresh %v, want %v", c.name, got, c.want)
		}
	}
	if got := predictRefresh(&podindex.Pod{Created: issued}, leaf); !got.IsZero() {
		t.Errorf("refresh bounds unknown: refresh %v, want none", got)
	}
}

// TestFirstProbeWaitsForTheProxyUnlessTheRotationDoes: a data-plane pod that starts running is
// first probed a second later while nothing urgent waits on it (its proxy is still asking for its
// certificate); a control-plane pod, and any pod while urgent, at once.
func TestFirstProbeWaitsForTheProxyUnlessTheRotationDoes(t *testing.T) {
	anchor, _ := newCert(t, "root", true, nil, nil)
	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	defer tr.queue.ShutDown()
	due := func(p *podindex.Pod) (time.Duration, bool) {
		tr.queue.mu.Lock()
		_, now := tr.queue.queued[p.Key()]
		tr.queue.mu.Unlock()
		if now {
			return 0, true
		}
		return pendingDelay(tr.queue, p.Key())
	}
	pod := func(name string, controlPlane bool) *podindex.Pod {
		return &podindex.Pod{Namespace: "app", Name: name, UID: name, Workload: "app/Deployment/" + name, ControlPlane: controlPlane,
			Meshed: true, Alive: true, Running: true}
	}

	tr.SetActive(anchor, false)
	app, cp := pod("web", false), pod("identity", true)
	x.Upsert(app)
	x.Upsert(cp)
	if d, ok := due(app); !ok || d < probeFirstDelay/2 || d > probeFirstDelay {
		t.Errorf("not urgent, data-plane pod: first probe in %v (queued %v), want in %v", d, ok, probeFirstDelay)
	}
	if d, ok := due(cp); !ok || d != 0 {
		t.Errorf("control-plane pod: first probe in %v (queued %v), want at once", d, ok)
	}

	tr.SetActive(anchor, true)
	urgent := pod("api", false)
	x.Upsert(urgent)
	if d, ok := due(urgent); !ok || d != 0 {
		t.Errorf("urgent, data-plane pod: first probe in %v (queued %v), want at once", d, ok)
	}
}

// pendingDelay is how long until the delayed add of key in q falls due, and whether one is
// pending.
func pendingDelay(q *probeQueue, key string) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.waiting[key]
	if !ok {
		return 0, false
	}
	return time.Until(time.Unix(0, w.at)), true
}

// TestOffPathPodIsNotReReadWhileItsDeploymentReplacesIt: while urgent, the capped re-read of a
// pod off the root's path is no handshake when its Deployment rolls out a newer template; the
// next re-read is scheduled at the doubled cap. A pod of the newest template, a rollout rolled
// back, or newer pods being deleted leave the re-read a handshake.
func TestOffPathPodIsNotReReadWhileItsDeploymentReplacesIt(t *testing.T) {
	anchor, _ := newCert(t, "root", true, nil, nil)
	other, otherKey := newCert(t, "other-root", true, nil, nil)
	stranger, _ := newCert(t, "stranger", true, other, otherKey)
	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	dials := 0 // of the old pod's address
	dial := func(_ context.Context, _, addr string) (net.Conn, error) {
		if addr == "10.0.0.1:4191" {
			dials++
		}
		return nil, errors.New("refused")
	}
	tr = NewCertTracker(x, dial, 1, 0, nil)
	defer tr.queue.ShutDown()
	tr.SetActive(anchor, true)
	t0 := time.Now().Add(-time.Hour)
	ips := 0
	pod := func(name, hash string, created time.Duration) *podindex.Pod {
		ips++
		return &podindex.Pod{Namespace: "app", Name: name, UID: name, Workload: "app/Deployment/web", TemplateHash: hash,
			Created: t0.Add(created), Meshed: true, Alive: true, Running: true, IP: fmt.Sprintf("10.0.0.%d", ips), AdminPort: 4191}
	}
	old := pod("web-a-1", "a", 0)
	x.Upsert(old)
	tr.record(t.Context(), old, []*x509.Certificate{stranger}, time.Now().Add(time.Hour), nil) // off the path, cap 5m
	reread := func() (handshake bool) {
		t.Helper()
		before := dials
		tr.queue.Add(old.Key(), laneLater)
		for { // the old pod's re-read, and the first probes of the pods upserted since
			if soon, later := tr.queue.Len(); soon+later == 0 {
				break
			}
			if !tr.probeNext(t.Context(), false) {
				t.Fatal("the queue shut down")
			}
		}
		return dials > before
	}

	if !reread() {
		t.Error("no newer template: the re-read made no handshake")
	}
	tr.record(t.Context(), old, []*x509.Certificate{stranger}, time.Now().Add(time.Hour), nil)
	failures := tr.live[old.UID].result.failures

	x.Upsert(pod("web-b-1", "b", time.Minute))
	tr.queue.mu.Lock()
	clear(tr.queue.waiting) // the retry the failed probe above scheduled
	tr.queue.delays = nil
	tr.queue.mu.Unlock()
	if reread() {
		t.Error("the Deployment rolls out template b: the re-read of a pod of template a made a handshake")
	}
	if got := tr.live[old.UID].result.failures; got != failures+1 {
		t.Errorf("readings off the path: %d, want %d", got, failures+1)
	}
	if d, _ := pendingDelay(tr.queue, old.Key()); d < probeRefreshCap<<min(failures, probeRefreshCapDoublings)-5*time.Second || d > probeRefreshCap<<min(failures, probeRefreshCapDoublings) {
		t.Errorf("next re-read in %v, want at the doubled cap %v", d, probeRefreshCap<<min(failures, probeRefreshCapDoublings))
	}
	if tr.Certificates().Converged != 0 {
		t.Error("a pod not read counted as converged")
	}

	rollback := pod("web-a-2", "a", 2*time.Minute)
	x.Upsert(rollback)
	if !reread() {
		t.Error("rolled back to template a: the re-read made no handshake")
	}
	x.Delete(rollback.Key())
	newer, _ := x.Get("app/web-b-1")
	gone := *newer
	gone.Terminating = true
	x.Upsert(&gone)
	if !reread() {
		t.Error("the only pod of template b is being deleted: the re-read made no handshake")
	}
}

// TestFailedProbeOfAStartingPodIsRetriedPromptly: while nothing urgent waits, a pod whose probes
// keep failing backs off to minutes; a pod created within its proxy's first certification
// attempts (starting) is retried as while urgent, every 200ms and then every second, so that a
// count published right after a rotation follows its certificate within a second.
func TestFailedProbeOfAStartingPodIsRetriedPromptly(t *testing.T) {
	anchor, _ := newCert(t, "root", true, nil, nil)
	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	defer tr.queue.ShutDown()
	tr.SetActive(anchor, false)
	noCert := errors.New("remote error: tls: internal error")
	// retryAfter records the failed probe that makes failures in a row, and returns when the
	// next probe of the pod falls due.
	retryAfter := func(p *podindex.Pod, failures int) time.Duration {
		t.Helper()
		tr.mu.Lock()
		tr.live[p.UID].result.failures = failures - 1
		tr.mu.Unlock()
		tr.queue.mu.Lock()
		if w := tr.queue.waiting[p.Key()]; w != nil {
			heap.Remove(&tr.queue.delays, int(w.index))
			delete(tr.queue.waiting, p.Key())
		}
		tr.queue.mu.Unlock()
		tr.record(t.Context(), p, nil, time.Time{}, noCert)
		d, ok := pendingDelay(tr.queue, p.Key())
		if !ok {
			t.Fatalf("%s: no probe scheduled after %d failures", p.Name, failures)
		}
		return d
	}
	pod := func(name string, age time.Duration) *podindex.Pod {
		return &podindex.Pod{Namespace: "app", Name: name, UID: name, Workload: "app/Deployment/" + name, Created: time.Now().Add(-age),
			RefreshMin: steps.DefaultMinRefresh, Meshed: true, Alive: true, Running: true}
	}
	fresh, old := pod("fresh", time.Second), pod("old", time.Hour)
	x.Upsert(fresh)
	x.Upsert(old)
	for _, c := range []struct {
		p        *podindex.Pod
		failures int
		min, max time.Duration
	}{
		{fresh, 6, probeQuickDelay / 2, probeQuickDelay},
		{fresh, 12, probeUrgentCap / 2, probeUrgentCap},
		{old, 6, 5 * time.Second, probeBaseDelay << 6},
		{old, 12, probeRelaxedCap / 2, probeRelaxedCap},
	} {
		if d := retryAfter(c.p, c.failures); d < c.min || d > c.max {
			t.Errorf("%s pod, %d failures: next probe in %v, want %v to %v", c.p.Name, c.failures, d, c.min, c.max)
		}
	}
	// Past its proxy's first attempts, a pod that still fails is retried on the relaxed backoff.
	if starting(pod("late", probeStartingWindow*steps.DefaultMinRefresh+time.Second), time.Now()) {
		t.Error("a pod past its proxy's first certification attempts is still starting")
	}
	if starting(&podindex.Pod{}, time.Now()) {
		t.Error("a pod of unknown creation is starting")
	}
}
