package probe

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// TestStaleLeavesKeptPerProbe: the stale set holds the live pods whose last probe read a leaf
// issued after the watch's due time by another issuer than the watched one — kept as probes
// arrive and pods go, and rebuilt when the watch changes.
func TestStaleLeavesKeptPerProbe(t *testing.T) {
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	old, _ := newCert(t, "old-issuer", true, anchor, anchorKey)
	renewed, _ := newCert(t, "renewed-issuer", true, anchor, anchorKey)
	tr, x := trackerOn(t, anchor)

	due := time.Now().Truncate(time.Second)
	tr.WatchIssuer(steps.Fingerprint(renewed), due)
	pods := map[string]*podindex.Pod{}
	probe := func(name string, signer *x509.Certificate, issued time.Duration) {
		t.Helper()
		p := pods[name]
		if p == nil {
			p = &podindex.Pod{Namespace: "app", Name: name, UID: "uid-" + name, Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true}
			pods[name] = p
			x.Upsert(p)
		}
		// identity backdates NotBefore by its clock skew allowance
		leaf := &x509.Certificate{NotBefore: due.Add(issued - steps.DefaultClockSkew), NotAfter: due.Add(issued + 24*time.Hour)}
		tr.record(t.Context(), p, []*x509.Certificate{signer, anchor}, time.Time{}, nil)
		tr.leafTimes(p, leaf, time.Now())
	}
	want := func(what string, signer *x509.Certificate, n int, example string, latest time.Duration) {
		t.Helper()
		got := tr.StaleLeaves()
		if signer == nil {
			if len(got) != 0 {
				t.Fatalf("%s: stale leaves %+v, want none", what, got)
			}
			return
		}
		if len(got) != 1 || got[0].Signer != signer || got[0].Pods != n || got[0].Example != example || !got[0].Latest.Equal(due.Add(latest)) {
			t.Fatalf("%s: stale leaves %s, want %d pod(s) signed by %s, e.g. %s, latest at due%+v", what, describeStale(got), n, signer.Subject.CommonName, example, latest)
		}
	}

	probe("a", old, time.Minute)
	probe("b", old, -time.Minute)
	probe("c", renewed, 2*time.Minute)
	want("issued after the due time by the old issuer", old, 1, "app/a", time.Minute)
	probe("d", old, 3*time.Minute)
	want("two of them", old, 2, "app/a", 3*time.Minute)
	probe("a", renewed, 4*time.Minute) // its proxy refreshed onto the renewed issuer
	want("one refreshed", old, 1, "app/d", 3*time.Minute)
	x.Delete("app/d")
	want("the other gone", nil, 0, "", 0)

	probe("e", old, 5*time.Minute)
	tr.WatchIssuer(steps.Fingerprint(renewed), due.Add(10*time.Minute))
	want("the due time moved past it", nil, 0, "", 0)
	tr.WatchIssuer(steps.Fingerprint(renewed), due)
	want("rebuilt from the results", old, 1, "app/e", 5*time.Minute)
	tr.WatchIssuer(steps.Fingerprint(old), due)
	want("watching the old issuer", renewed, 2, "app/a", 4*time.Minute)
	tr.WatchIssuer("", time.Time{})
	want("watching nothing", nil, 0, "", 0)
}

func describeStale(ls []steps.StaleLeaves) string {
	s := "["
	for _, l := range ls {
		s += fmt.Sprintf("{%s %d %s %s}", l.Signer.Subject.CommonName, l.Pods, l.Example, l.Latest.Format(time.RFC3339))
	}
	return s + "]"
}

// TestWatchIssuerProbesASampleAfterTheirRefresh: a new watch has the three converged pods whose
// proxies refresh first after the due time probed again then, and no other.
func TestWatchIssuerProbesASampleAfterTheirRefresh(t *testing.T) {
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	old, _ := newCert(t, "old-issuer", true, anchor, anchorKey)
	tr, x := trackerOn(t, anchor)
	now := time.Now()
	due := now.Add(time.Hour)
	// refresh in hours: pod-0 before the due time, the others after it, in no order.
	refresh := map[string]time.Duration{"pod-0": 30 * time.Minute, "pod-1": 5 * time.Hour, "pod-2": 2 * time.Hour, "pod-3": 4 * time.Hour, "pod-4": 3 * time.Hour}
	for name, in := range refresh {
		p := &podindex.Pod{Namespace: "app", Name: name, UID: "uid-" + name, Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true}
		x.Upsert(p)
		tr.record(t.Context(), p, []*x509.Certificate{old, anchor}, now.Add(in), nil)
	}
	tr.queue.mu.Lock()
	clear(tr.queue.waiting)
	tr.queue.delays = nil
	tr.queue.mu.Unlock()
	for {
		if soon, _ := tr.queue.Len(); soon == 0 {
			break
		}
		key, _ := tr.queue.Get(false)
		tr.queue.Done(key)
	}

	tr.WatchIssuer(steps.Fingerprint(old), due)
	for name, in := range refresh {
		d, queued := pendingDelay(tr.queue, "app/"+name)
		want := name == "pod-2" || name == "pod-3" || name == "pod-4"
		switch {
		case queued != want:
			t.Errorf("%s (refresh in %v): queued %v, want %v", name, in, queued, want)
		case want && (d < in-time.Minute || d > in+refreshMargin):
			t.Errorf("%s: probed again in %v, want at its refresh in %v", name, d, in)
		}
	}
}

// TestStaleLeavesCompleteOnceTheFirstPodsAreProbed: complete once every pod alive at the first
// watch was probed or went; pods that start later do not hold it back.
func TestStaleLeavesCompleteOnceTheFirstPodsAreProbed(t *testing.T) {
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	iss, _ := newCert(t, "issuer", true, anchor, anchorKey)
	tr, x := trackerOn(t, anchor)
	pod := func(name string) *podindex.Pod {
		p := &podindex.Pod{Namespace: "app", Name: name, UID: "uid-" + name, Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true}
		x.Upsert(p)
		return p
	}
	probe := func(p *podindex.Pod) {
		tr.record(t.Context(), p, []*x509.Certificate{iss, anchor}, time.Time{}, nil)
		tr.leafTimes(p, &x509.Certificate{NotBefore: time.Now(), NotAfter: time.Now().Add(24 * time.Hour)}, time.Now())
	}
	a, _ := pod("a"), pod("b")
	if tr.StaleLeavesComplete() {
		t.Fatal("complete before any watch")
	}
	tr.WatchIssuer(steps.Fingerprint(iss), time.Now())
	later := pod("c")
	probe(a)
	probe(later)
	if tr.StaleLeavesComplete() {
		t.Fatal("complete with pod b never probed")
	}
	x.Delete("app/b")
	if !tr.StaleLeavesComplete() {
		t.Fatal("not complete once a was probed and b went")
	}
	pod("d")
	if !tr.StaleLeavesComplete() {
		t.Fatal("a pod started later made it incomplete again")
	}
}
