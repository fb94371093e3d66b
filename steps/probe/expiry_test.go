package probe

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// TestExpiringLeavesKeptPerProbe: the expiring set holds the live pods whose last probe read a
// certificate with less than 9 % of its lifetime left, kept as probes arrive and pods go; the
// soonest expiry covers every pod read.
func TestExpiringLeavesKeptPerProbe(t *testing.T) {
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	iss, _ := newCert(t, "issuer", true, anchor, anchorKey)
	tr, x := trackerOn(t, anchor)

	now := time.Now().Truncate(time.Second)
	const life = 100 * time.Second
	// read presents pod name's leaf, received elapsed ago, to a probe at now.
	read := func(name string, elapsed time.Duration) bool {
		t.Helper()
		p, ok := x.Get("app/" + name)
		if !ok {
			p = &podindex.Pod{Namespace: "app", Name: name, UID: "uid-" + name, Workload: "app/Deployment/web", Meshed: true, Alive: true, Running: true}
			x.Upsert(p)
		}
		received := now.Add(-elapsed)
		leaf := &x509.Certificate{NotBefore: received.Add(-steps.DefaultClockSkew), NotAfter: received.Add(life)}
		tr.record(t.Context(), p, []*x509.Certificate{iss, anchor}, time.Time{}, nil)
		return tr.leafTimes(p, leaf, now)
	}
	want := func(what string, n int, example string, expires time.Duration) {
		t.Helper()
		got := tr.ExpiringLeaves()
		if got.Pods != n || got.Example != example || n > 0 && !got.Soonest.Equal(now.Add(expires)) {
			t.Fatalf("%s: expiring %+v, want %d pod(s), soonest %s expiring at now%+v", what, got, n, example, expires)
		}
	}

	if read("fresh", 10*time.Second) {
		t.Error("a fresh certificate changed the expiring set")
	}
	if read("late", 80*time.Second) { // past the proxy's renewal at 70 %: retried at 91 %
		t.Error("a certificate past one renewal only is expiring")
	}
	want("one renewal missed", 0, "", 0)
	if !read("stuck", 95*time.Second) {
		t.Error("a certificate with 5% of its lifetime left did not enter the expiring set")
	}
	read("expired", 120*time.Second)
	want("two not renewed", 2, "app/expired", -20*time.Second)
	if at, pod, ok := tr.SoonestLeafExpiry(); !ok || pod != "app/expired" || !at.Equal(now.Add(-20*time.Second)) {
		t.Errorf("soonest expiry %s of %s (%v), want the expired pod's", at, pod, ok)
	}

	if !read("expired", 0) { // its proxy renewed at last
		t.Error("a renewed certificate did not leave the expiring set")
	}
	want("one renewed", 1, "app/stuck", 5*time.Second)
	x.Delete("app/stuck")
	want("the other gone", 0, "", 0)
	if at, pod, ok := tr.SoonestLeafExpiry(); !ok || pod != "app/late" || !at.Equal(now.Add(20*time.Second)) {
		t.Errorf("soonest expiry %s of %s (%v), want app/late's, at now+20s", at, pod, ok)
	}

	// A leaf issued before its pod was created belongs to the pod that held the address before:
	// it says nothing of this pod's proxy.
	p, _ := x.Get("app/late")
	q := *p
	q.UID, q.Name, q.Created = "uid-new", "new", now
	x.Upsert(&q)
	leaf := &x509.Certificate{NotBefore: now.Add(-95 * time.Second), NotAfter: now.Add(5 * time.Second)}
	tr.record(t.Context(), &q, []*x509.Certificate{iss, anchor}, time.Time{}, nil)
	if tr.leafTimes(&q, leaf, now) {
		t.Error("another pod's certificate, read on a new pod's address, entered the expiring set")
	}
}

// TestNextLeafRead: the watch reads a pod again once its proxy should have renewed, and after
// each retry of a proxy that did not.
func TestNextLeafRead(t *testing.T) {
	received := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: received.Add(-steps.DefaultClockSkew), NotAfter: received.Add(24 * time.Hour)}
	p := &podindex.Pod{RefreshMin: 10 * time.Second, RefreshMax: 10 * time.Second} // a rotation's override
	margin := 24 * time.Hour / 100
	for _, c := range []struct {
		name     string
		now      time.Time
		want     time.Time
		whatWant string
	}{
		{"fresh", received.Add(time.Minute), received.Add(24 * time.Hour * 7 / 10).Add(margin), "at 70% of its lifetime, whatever the override"},
		{"renewal missed", received.Add(24 * time.Hour * 7 / 10).Add(margin), received.Add(24 * time.Hour * 7 / 10).Add(margin).Add((24*time.Hour*3/10 - margin) * 7 / 10).Add(margin), "at 70% of what is left"},
		{"expired", received.Add(25 * time.Hour), received.Add(25 * time.Hour).Add(10 * time.Second).Add(margin), "after the min refresh"},
	} {
		if got := nextLeafRead(p, leaf, c.now); !got.Equal(c.want) {
			t.Errorf("%s: read again at %s, want %s (%s)", c.name, got, c.want, c.whatWant)
		}
	}
}

// trackerOn is a tracker over a new index, counting pods on anchor, not probing (no Run), shut
// down with the test.
func trackerOn(t *testing.T, anchor *x509.Certificate) (*CertTracker, *podindex.Index) {
	var tr *CertTracker
	x := podindex.New(func(before, cur *podindex.Pod) { tr.PodChanged(before, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	t.Cleanup(tr.queue.ShutDown)
	tr.SetActive(anchor, false)
	return tr, x
}
