package probe

import (
	"crypto/x509"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// tracked is what the CertTracker knows of one live pod incarnation (one UID): one map entry and
// one allocation per meshed pod, for the tracker's share of the operator's memory.
type tracked struct {
	workload string
	// result is the pod's last probe, when probed is set.
	result probeResult
	probed bool
	// ok is set while the chain of the last probe verifies to the root.
	ok bool
}

// probeResult is the last probe of one pod incarnation (one UID).
type probeResult struct {
	chain    *issuerChain // nil when the probe failed
	err      string
	failures int
	// rejected is set when the probe read a chain it rejected (ChainRejectedError): err says
	// what was wrong with it.
	rejected bool
	// refresh is when the proxy refreshes the certificate it presented (Unix nanoseconds; 0 when
	// unknown): until then a probe reads the same chain again.
	refresh int64
	// issued is when identity issued the leaf the probe read (Unix nanoseconds; 0 when unknown),
	// for the stale-issuer watch (stale.go), and expires when it expires, for the expiry watch
	// (expiry.go).
	issued, expires int64
}

// issuerChain is an issuer chain pods present (IssuerChain), shared by every pod that presents
// it: a mesh has a few, one per identity issuer its proxies hold certificates from.
type issuerChain struct {
	key    string // chainKey
	issuer string // fingerprint of the certificate that signed the leaf
	certs  []*x509.Certificate
}

// CertTracker probes meshed pods' live certificates and counts the pods whose chain verifies to
// the root it is given (steps.State.CertificateRoot: the active issuer's trust anchor), whichever
// issuer under that root signed them. It probes only pods that have not converged: a pod is
// probed when it starts running (see firstProbeDelay), and again with a per-pod backoff while its
// chain does not verify to the root. While urgent (during RenewingWorkloadCerts) the backoff is
// capped low so convergence is seen within seconds; otherwise a pod already observed off the
// root's path is not probed again until the root changes or the rotation needs it.
type CertTracker struct {
	index       *podindex.Index
	dial        DialFunc
	timeout     time.Duration
	concurrency int
	notify      func(*podindex.Pod)
	queue       *probeQueue

	leafLifetime leafLifetime
	// unprobed counts the pods of live not probed yet (Convergence.NotProbed), under mu.
	unprobed int

	mu     sync.Mutex
	root   *certificateCheck
	urgent bool
	// chains interns the issuer chains of results; pruned to those referenced once it grows
	// past pruneAt (every renewal of the issuer adds one).
	chains  map[string]*issuerChain
	pruneAt int
	// live holds the alive meshed pods of the index by UID, kept by PodChanged: the pods the
	// tracker counts. They are keyed by UID, not by name: a pod replaced under the same name (a
	// StatefulSet's, or a bare pod recreated) is another incarnation that must be probed on its
	// own. PodChanged drops a pod's entry when it goes, and a probe that ends after its pod went
	// stores nothing. converged counts the entries that are ok: the counts are converged of
	// len(live), both read under mu.
	live      map[string]*tracked
	converged int
	// behind counts, per workload, the live pods not ok, kept as both change, so that naming
	// the workloads behind costs what is behind, not the mesh.
	behind map[string]int
	// rejected holds the pod key of the live pods whose last probe read a chain they cannot
	// have presented (ChainRejectedError), by UID: named first whatever their workload.
	rejected map[string]string
	// watch is the issuer identity must sign with and from when (WatchIssuer), and stale the
	// live pods, by UID, whose last probe read a leaf issued since by another (stale.go).
	watch staleWatch
	stale map[string]staleLeaf
	// baseline holds the pods, by UID, alive and not probed yet at the first WatchIssuer: nil
	// before it, empty once each was probed or went (StaleLeavesComplete).
	baseline map[string]struct{}
	// expiring holds the live pods, by UID, whose last probe read a workload certificate their
	// proxy did not renew (expiry.go).
	expiring map[string]expiringLeaf
	// probed, when set (tests), is called after each probe is accounted for.
	probed func(key, uid string)
	// OnProbe, when set before Run, is called after each probe with its error (nil: the pod
	// presented a chain), for a probe count.
	OnProbe func(error)
}

// NewCertTracker returns a tracker over the index's pods. notify is called with the pod after a
// probe of it changes what the tracker counts.
func NewCertTracker(index *podindex.Index, dial DialFunc, concurrency int, timeout time.Duration, notify func(*podindex.Pod)) *CertTracker {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	if timeout <= 0 {
		timeout = defaultProbeTime
	}
	return &CertTracker{
		index: index, dial: dial, timeout: timeout, concurrency: max(concurrency, 1), notify: notify,
		queue:    newProbeQueue(),
		root:     newCertificateCheck(nil),
		chains:   map[string]*issuerChain{},
		pruneAt:  minPruneAt,
		live:     map[string]*tracked{},
		behind:   map[string]int{},
		rejected: map[string]string{},
		stale:    map[string]staleLeaf{},
		expiring: map[string]expiringLeaf{},
	}
}

// PodChanged is the podindex.Index's change hook, which must see every change from the index's
// creation: it keeps the set of pods the tracker counts, forgets what it knew of a replaced or
// deleted pod, and schedules a probe of a pod that started running.
func (t *CertTracker) PodChanged(old, cur *podindex.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old != nil && (cur == nil || cur.UID != old.UID || !cur.Alive || !cur.Meshed) {
		if tp := t.live[old.UID]; tp != nil {
			if tp.ok {
				t.converged--
			} else {
				addCount(t.behind, tp.workload, -1)
			}
			if !tp.probed {
				t.unprobed--
			}
			delete(t.live, old.UID)
			delete(t.rejected, old.UID)
			delete(t.stale, old.UID)
			delete(t.expiring, old.UID)
			delete(t.baseline, old.UID)
		}
		// A delayed re-probe of the pod gone (a converged pod's waits for its proxy's renewal,
		// hours away) goes with it; a pod that replaced it under the same name is queued below.
		t.queue.Forget(old.Key())
	}
	if cur == nil || !cur.Meshed || !cur.Alive {
		return
	}
	tp := t.live[cur.UID]
	if tp == nil {
		tp = &tracked{workload: cur.Workload}
		t.live[cur.UID] = tp
		addCount(t.behind, cur.Workload, +1)
		t.unprobed++
	}
	if !cur.Running {
		// Named "not running" from now on (Certificates), whatever its last probe read.
		delete(t.rejected, cur.UID)
	}
	if !cur.Running || tp.ok || t.root.root == nil {
		return
	}
	if !tp.probed {
		t.queue.AddAfter(cur.Key(), laneSoon, t.firstProbeDelay(cur))
	} else if old != nil && old.UID == cur.UID && cur.ProxyRestarts != old.ProxyRestarts {
		// The proxy restarted in place: it obtains a certificate anew, from the issuer of now.
		tp.result.failures = 0
		t.queue.AddAfter(cur.Key(), laneSoon, t.firstProbeDelay(cur))
	}
}

// firstProbeDelay is how long after a proxy starts its first probe waits. A pod runs as soon as
// its proxy container has started, and the proxy then asks identity for its certificate: probed
// at once, it usually has none yet, and the failed handshake is retried. While urgent the
// rotation waits on exactly these pods, and a control-plane pod's certificate is what a step
// waits on, so those are probed at once; otherwise nothing waits on the reading for a second.
// Called with t.mu held.
func (t *CertTracker) firstProbeDelay(p *podindex.Pod) time.Duration {
	if t.urgent || p.ControlPlane {
		return 0
	}
	return probeFirstDelay
}

// addCount adds delta to m[k], dropping the key at zero so that len(m) counts the non-zero ones,
// as the pod index keeps its counts per workload.
func addCount(m map[string]int, k string, delta int) {
	if m[k] += delta; m[k] == 0 {
		delete(m, k)
	}
}

// minPruneAt is the least number of interned issuer chains at which the tracker drops those no
// result refers to.
const minPruneAt = 16

// SetActive sets the certificate root pods must converge on (steps.State.CertificateRoot; nil
// when unknown), and whether convergence is urgent. Results are kept across a change of root:
// each pod's chain is judged again against the new one.
func (t *CertTracker) SetActive(root *x509.Certificate, urgent bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := !t.root.is(root)
	if !changed && urgent == t.urgent {
		return
	}
	becameUrgent := urgent && !t.urgent
	t.urgent = urgent
	if changed {
		t.root = newCertificateCheck(root)
		t.converged, t.behind = 0, map[string]int{}
		for _, tp := range t.live {
			c := tp.result.chain
			tp.ok = tp.probed && c != nil && t.root.verifies(c.key, c.certs)
			if tp.ok {
				t.converged++
			} else {
				t.behind[tp.workload]++
			}
		}
	}
	if changed || becameUrgent {
		// Everything not converged is probed again: pods never probed or whose probe failed
		// now, pods last seen off the root's path after them (see probeQueue), and only once
		// their proxy refreshes when that is known: until then they present the chain just
		// judged against the new root.
		now := time.Now().UnixNano()
		t.index.Each(func(p *podindex.Pod) {
			tp := t.live[p.UID]
			if p.Running && (tp == nil || !tp.ok) {
				l := laneSoon
				if tp != nil && tp.probed {
					r := &tp.result
					r.failures = 0
					if r.err == "" {
						l = laneLater
						if r.refresh > now {
							t.queue.AddAfter(p.Key(), l, min(time.Duration(r.refresh-now)+refreshMargin, probeRefreshCap))
							return
						}
					}
				}
				t.queue.Add(p.Key(), l)
			}
		})
	}
}

// intern returns the shared issuerChain of certs. Called with t.mu held.
func (t *CertTracker) intern(certs []*x509.Certificate) *issuerChain {
	key := chainKey(certs)
	if c := t.chains[key]; c != nil {
		return c
	}
	if len(t.chains) >= t.pruneAt {
		used := map[*issuerChain]bool{}
		for _, tp := range t.live {
			used[tp.result.chain] = true
		}
		for k, c := range t.chains {
			if !used[c] {
				delete(t.chains, k)
			}
		}
		t.pruneAt = max(minPruneAt, 2*len(t.chains))
	}
	c := &issuerChain{key: key, issuer: steps.Fingerprint(certs[0]), certs: certs}
	t.chains[key] = c
	return c
}

// Behind is the number of live meshed pods whose chain does not verify to the root: zero once
// the workload certificates have converged.
func (t *CertTracker) Behind() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live) - t.converged
}

// Certificates counts the alive meshed pods whose live certificate chain verifies to the root.
// It counts pods that are there, each by its own incarnation's probe: never a pod that is gone,
// nor a pod replaced under the same name by what its predecessor presented. Like
// podindex.Index.TrustBundle it reads counts kept per change, and names the pods whose chain was
// rejected (ChainRejectedError), then pods of the few workloads most behind.
func (t *CertTracker) Certificates() steps.Convergence {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := steps.Convergence{Converged: t.converged, Target: len(t.live), NotProbed: t.unprobed}
	if c.Done() {
		return c
	}
	c.Behind, c.BehindWorkloads = podindex.TopWorkloads(t.behind)
	c.Rejected = len(t.rejected)
	for uid, key := range t.rejected {
		ns, name, _ := strings.Cut(key, "/")
		c.Pods = append(c.Pods, steps.PodProblem{Namespace: ns, Name: name, Reason: t.live[uid].result.err})
	}
	podindex.SortProblems(c.Pods)
	c.Pods = c.Pods[:min(len(c.Pods), podindex.BehindLimit)]
	rejected := len(c.Pods)
	t.index.EachPodOf(c.Behind, func(p *podindex.Pod) bool {
		if len(c.Pods) >= podindex.BehindLimit {
			return false
		}
		tp := t.live[p.UID]
		if tp == nil || tp.ok {
			return true
		}
		reason := "not probed yet"
		switch r := &tp.result; {
		case !p.Running:
			reason = "not running"
		case !tp.probed:
		case r.rejected:
			if _, listed := t.rejected[p.UID]; listed {
				return true // named above
			}
			reason = r.err
		case r.err != "":
			reason = probeProblem(r.err, false)
		default:
			reason = t.root.offPath(r.chain.issuer)
		}
		c.Pods = append(c.Pods, steps.PodProblem{Namespace: p.Namespace, Name: p.Name, Reason: reason})
		return len(c.Pods) < podindex.BehindLimit
	})
	podindex.SortProblems(c.Pods[rejected:])
	return c
}

// LiveChains are the distinct issuer chains the alive meshed pods presented at their last
// successful probe (steps.State.LiveChains), whatever the root: the chains a bundle the rotation
// writes must keep an anchor for.
func (t *CertTracker) LiveChains() []steps.LiveChain {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lc liveChains
	t.index.Each(func(p *podindex.Pod) {
		if tp := t.live[p.UID]; tp != nil && tp.result.chain != nil {
			lc.add(tp.result.chain.key, tp.result.chain.certs, p.Key())
		}
	})
	return lc.list()
}
