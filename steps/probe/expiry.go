package probe

import (
	"crypto/x509"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// The tracker's share of the workload-certificate expiry watch (steps.LeafExpiring): every pod
// is read again once its proxy should have renewed the certificate it presented, and again at
// each retry of a proxy that did not, so that the pods presenting a certificate their proxy did
// not renew are known (the expiring set, kept per probe and per pod gone) and so is the soonest
// expiry of the certificates the mesh presents (SoonestLeafExpiry).
//
// The cost is one handshake per pod per 70 % of the issuance lifetime: at the 24h default and
// 150,000 pods, under three a second. The re-read waits for the proxy's own renewal, not for the
// refresh override a rotation sets (LINKERD2_PROXY_IDENTITY_MAX_REFRESH): that would be a
// handshake per pod every few seconds, and a proxy renews at 70 % whatever the override.

// expiringLeaf is a live pod whose last probe read a certificate steps.LeafExpiring.
type expiringLeaf struct {
	pod     string
	expires int64 // Unix nanoseconds
}

// leafTimes records on the pod's result when the leaf a probe of p read at now was issued and
// expires (zero when the probe failed), files the pod in the stale and expiring sets or out of
// them, and schedules the watch's next read. It reports whether the pod entered or left the
// expiring set.
func (t *CertTracker) leafTimes(p *podindex.Pod, leaf *x509.Certificate, now time.Time) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.baseline, p.UID)
	tp := t.live[p.UID]
	if tp == nil {
		return false
	}
	r := &tp.result
	r.issued, r.expires = 0, 0
	if r.chain != nil && leaf != nil && leaf.NotAfter.After(leaf.NotBefore) {
		r.issued, r.expires = leafIssued(leaf), leaf.NotAfter.UnixNano()
	}
	t.judgeLeafLocked(p.UID, p.Key(), tp)
	_, was := t.expiring[p.UID]
	// A leaf issued before its pod was created is another pod's answering on the address
	// (predictRefresh): it says nothing of this pod's proxy.
	own := r.expires != 0 && !issuedBeforePod(p, leaf)
	is := own && steps.LeafExpiring(time.Unix(0, r.issued), leaf.NotAfter, now)
	if is {
		t.expiring[p.UID] = expiringLeaf{pod: p.Key(), expires: r.expires}
	} else {
		delete(t.expiring, p.UID)
	}
	if own {
		t.queue.AddAfter(p.Key(), laneLater, nextLeafRead(p, leaf, now).Sub(now))
	}
	return is != was
}

// issuedBeforePod reports whether leaf was issued before p was created, beyond the clocks'
// margin (see predictRefresh).
func issuedBeforePod(p *podindex.Pod, leaf *x509.Certificate) bool {
	return !p.Created.IsZero() && leaf.NotBefore.Add(steps.DefaultClockSkew+leafBeforePodMargin).Before(p.Created)
}

// nextLeafRead is when the watch reads p again after reading leaf at now: once its proxy should
// have renewed it (70 % of its lifetime, clamped only by the proxy's min refresh), and, when that
// time has passed, after the proxy's next attempt: a proxy whose renewal failed tries again at
// 70 % of what is left of the certificate it holds, never sooner than its min refresh
// (linkerd2-proxy certify.rs, refresh_in), from a failure no later than now. The margin covers the
// round trip to identity and the clocks: a second, or a hundredth of the lifetime.
func nextLeafRead(p *podindex.Pod, leaf *x509.Certificate, now time.Time) time.Time {
	minRefresh := p.RefreshMin
	if minRefresh <= 0 {
		minRefresh = steps.DefaultMinRefresh
	}
	received := leaf.NotBefore.Add(steps.DefaultClockSkew)
	margin := max(refreshMargin, leaf.NotAfter.Sub(received)/100)
	if renew := steps.NextRefresh(leaf.NotBefore, leaf.NotAfter, minRefresh, maxDuration); now.Before(renew) {
		return renew.Add(margin)
	}
	return now.Add(max(leaf.NotAfter.Sub(now)*7/10, minRefresh)).Add(margin)
}

const maxDuration = time.Duration(1<<63 - 1)

// ExpiringLeaves summarises the expiring set (steps.State.ExpiringLeaves): its size, and the
// soonest expiry in it with its pod. It costs what is expiring, not the mesh.
func (t *CertTracker) ExpiringLeaves() steps.ExpiringLeaves {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out steps.ExpiringLeaves
	var soonest int64
	for _, l := range t.expiring {
		out.Pods++
		if out.Example == "" || l.expires < soonest || l.expires == soonest && l.pod < out.Example {
			soonest, out.Example = l.expires, l.pod
		}
	}
	if out.Pods > 0 {
		out.Soonest = time.Unix(0, soonest)
	}
	return out
}

// SoonestLeafExpiry is the soonest expiry of the workload certificates the live meshed pods
// presented at their last probe, and the pod presenting it; ok is false when none was read. It
// walks every pod (a metrics scrape reads it, not a reconcile). Certificates their proxies
// renewed since are read again at the renewal (nextLeafRead), so a reading is at most a margin
// behind the proxy.
func (t *CertTracker) SoonestLeafExpiry() (at time.Time, pod string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var soonest int64
	t.index.Each(func(p *podindex.Pod) {
		if tp := t.live[p.UID]; tp != nil && tp.result.chain != nil {
			if e := tp.result.expires; e != 0 && (pod == "" || e < soonest) {
				soonest, pod = e, p.Key()
			}
		}
	})
	if pod == "" {
		return time.Time{}, "", false
	}
	return time.Unix(0, soonest), pod, true
}
