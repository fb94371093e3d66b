package probe

import (
	"crypto/x509"
	"sort"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// The tracker's share of the stale-issuer watch (steps.State.StaleIssuer): of the pods it
// probes anyway, those whose leaf was issued after identity should have loaded the issuer in the
// Secret, and was signed by another. The set is kept per probe and per pod gone, so reading it
// costs what is stale, not the mesh; it is rebuilt from the results when the watched issuer
// changes, about daily.

// staleWatch is what WatchIssuer set: a leaf issued after due must be signed by issuer.
type staleWatch struct {
	issuer string // fingerprint; "" watches nothing
	due    int64  // Unix nanoseconds
}

// staleLeaf is a live pod's leaf that the watched issuer should have signed and another did.
type staleLeaf struct {
	pod    string
	signer *issuerChain
	issued int64
}

// leafIssued is when identity issued a leaf: its NotBefore, which identity backdates by its clock
// skew allowance (steps.DefaultClockSkew by default), plus that allowance.
func leafIssued(leaf *x509.Certificate) int64 {
	if leaf == nil {
		return 0
	}
	return leaf.NotBefore.Add(steps.DefaultClockSkew).UnixNano()
}

// WatchIssuer sets the issuer identity must sign with (its fingerprint) for every certificate
// issued after due; "" watches nothing.
func (t *CertTracker) WatchIssuer(issuer string, due time.Time) {
	w := staleWatch{issuer: issuer}
	if issuer != "" {
		w.due = due.UnixNano()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w == t.watch {
		return
	}
	t.watch = w
	clear(t.stale)
	var sample staleSample
	baseline := t.baseline == nil
	if baseline {
		t.baseline = map[string]struct{}{}
	}
	t.index.Each(func(p *podindex.Pod) {
		if tp := t.live[p.UID]; tp != nil {
			if baseline && !tp.probed {
				t.baseline[p.UID] = struct{}{}
			}
			t.judgeLeafLocked(p.UID, p.Key(), tp)
			if w.issuer != "" && tp.ok && p.Running && tp.result.refresh > w.due {
				sample.offer(p.Key(), tp.result.refresh)
			}
		}
	})
	now := time.Now().UnixNano()
	for _, c := range sample.pods[:sample.n] {
		t.queue.AddAfter(c.key, laneLater, time.Duration(c.at-now)+refreshMargin)
	}
}

// staleSampleSize is how many converged pods WatchIssuer has probed again once their proxy has
// refreshed its certificate after the due time: in a mesh where no pod starts for hours, their
// new certificates are what says which issuer identity signs with. The probes read pods that
// converged only when something changes, so without these a quiet mesh would say nothing.
const staleSampleSize = 3

// staleSample keeps the staleSampleSize pods whose proxies refresh first.
type staleSample struct {
	pods [staleSampleSize]struct {
		key string
		at  int64
	}
	n int
}

func (s *staleSample) offer(key string, at int64) {
	i := s.n
	if s.n < len(s.pods) {
		s.n++
	} else if at >= s.pods[s.n-1].at {
		return
	} else {
		i = s.n - 1
	}
	for ; i > 0 && s.pods[i-1].at > at; i-- {
		s.pods[i] = s.pods[i-1]
	}
	s.pods[i].key, s.pods[i].at = key, at
}

// StaleLeavesComplete reports whether every pod alive at the first WatchIssuer has been probed
// (or has gone): until then StaleLeaves may miss what a previous leader saw.
func (t *CertTracker) StaleLeavesComplete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.baseline != nil && len(t.baseline) == 0
}

// judgeLeafLocked files the pod's last probe in the stale set or out of it. Called with t.mu
// held.
func (t *CertTracker) judgeLeafLocked(uid, key string, tp *tracked) {
	r := &tp.result
	if t.watch.issuer == "" || r.chain == nil || r.issued <= t.watch.due || r.chain.issuer == t.watch.issuer {
		delete(t.stale, uid)
		return
	}
	t.stale[uid] = staleLeaf{pod: key, signer: r.chain, issued: r.issued}
}

// StaleLeaves groups the stale set by the issuer that signed the leaves (steps.State.StaleLeaves).
func (t *CertTracker) StaleLeaves() []steps.StaleLeaves {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.stale) == 0 {
		return nil
	}
	by := map[string]*steps.StaleLeaves{}
	var out []*steps.StaleLeaves
	for _, l := range t.stale {
		g := by[l.signer.issuer]
		if g == nil {
			g = &steps.StaleLeaves{Signer: l.signer.certs[0], Example: l.pod}
			by[l.signer.issuer] = g
			out = append(out, g)
		}
		g.Pods++
		if l.pod < g.Example {
			g.Example = l.pod
		}
		if at := time.Unix(0, l.issued); at.After(g.Latest) {
			g.Latest = at
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Latest.After(out[j].Latest) })
	res := make([]steps.StaleLeaves, len(out))
	for i, g := range out {
		res[i] = *g
	}
	return res
}
