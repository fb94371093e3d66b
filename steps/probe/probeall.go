package probe

import (
	"context"
	"crypto/x509"
	"net"
	"sync"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// ProbeResult is what one probe of a pod's admin port found.
type ProbeResult struct {
	// Issuer is the fingerprint of the certificate that signed the pod's live leaf; "" when the
	// probe failed.
	Issuer string
	// Chain is the live chain above the leaf, the leaf's issuer first (IssuerChain): what the
	// convergence verifies to the certificate root.
	Chain []*x509.Certificate
	// LeafNotAfter is when the pod's live leaf expires (zero when the probe failed): what a
	// recovery's plan tells each pod's deadline by.
	LeafNotAfter time.Time
	// Err says why the probe failed.
	Err error

	key string // chainKey(Chain), when known
}

// ProbeAll reads, once, the live certificate of every alive, running meshed pod, at most
// concurrency probes at a time, each bounded by timeout. It is the one-shot counterpart of the
// operator's CertTracker, for a CLI. done, when set, is called after each probe (from the probing
// goroutines, so it must be safe for concurrent use) to report progress. The results are keyed
// by pod key; a pod that is not running has none. An ended ctx stops the remaining probes.
func ProbeAll(ctx context.Context, dial DialFunc, pods []*podindex.Pod, concurrency int, timeout time.Duration, done func(p *podindex.Pod, r ProbeResult)) map[string]ProbeResult {
	p := StartProbes(ctx, dial, concurrency, timeout, done)
	p.Add(pods...)
	return p.Wait()
}

// Probes is ProbeAll over pods handed to it while the first ones are being probed, as a list
// returns them page by page (ReadFeeding). Add and Wait are for one goroutine; Add never blocks.
type Probes struct {
	ctx     context.Context
	dial    DialFunc
	timeout time.Duration
	done    func(*podindex.Pod, ProbeResult)
	wg      sync.WaitGroup
	stop    func() bool // stops the watch of ctx

	mu      sync.Mutex
	more    *sync.Cond // signalled on an Add, on Wait and when ctx ends
	queue   []*podindex.Pod
	ended   bool // no more Adds, or ctx ended
	results map[string]ProbeResult
}

// StartProbes starts concurrency probing goroutines that probe the pods Add hands them (see
// ProbeAll for the arguments); Wait returns the results.
func StartProbes(ctx context.Context, dial DialFunc, concurrency int, timeout time.Duration, done func(*podindex.Pod, ProbeResult)) *Probes {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	if timeout <= 0 {
		timeout = defaultProbeTime
	}
	p := &Probes{ctx: ctx, dial: dial, timeout: timeout, done: done, results: map[string]ProbeResult{}}
	p.more = sync.NewCond(&p.mu)
	p.stop = context.AfterFunc(ctx, p.end)
	for range max(concurrency, 1) {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

// Add queues the probeable pods (Probeable) among pods.
func (p *Probes) Add(pods ...*podindex.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pod := range pods {
		if Probeable(pod) {
			p.queue = append(p.queue, pod)
		}
	}
	p.more.Broadcast()
}

// Wait waits for the probes of every pod added, or until ctx ends, and returns the results by
// pod key. Nothing may be added after.
func (p *Probes) Wait() map[string]ProbeResult {
	p.end()
	p.wg.Wait()
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.results
}

func (p *Probes) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.more.Broadcast()
}

// next is the next pod to probe; nil once the queue is drained and ended, or ctx has ended.
func (p *Probes) next() *podindex.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && !p.ended {
		p.more.Wait()
	}
	if len(p.queue) == 0 || p.ctx.Err() != nil {
		return nil
	}
	pod := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	return pod
}

func (p *Probes) work() {
	defer p.wg.Done()
	for pod := p.next(); pod != nil; pod = p.next() {
		chain, leaf, err := ProbePod(p.ctx, p.dial, pod, p.timeout)
		r := ProbeResult{Chain: chain, Err: err}
		if err == nil {
			r.Issuer, r.key = steps.Fingerprint(chain[0]), chainKey(chain)
			r.LeafNotAfter = leaf.NotAfter
		}
		p.mu.Lock()
		p.results[pod.Key()] = r
		p.mu.Unlock()
		if p.done != nil {
			p.done(pod, r)
		}
	}
}

// LiveChains groups the probed pods by the issuer chain they present, as the operator's
// CertTracker does (steps.State.LiveChains).
func LiveChains(pods []*podindex.Pod, results map[string]ProbeResult) []steps.LiveChain {
	var lc liveChains
	for _, p := range pods {
		if r, ok := results[p.Key()]; ok && r.Err == nil && len(r.Chain) > 0 && p.Meshed && p.Alive {
			lc.add(r.key, r.Chain, p.Key())
		}
	}
	return lc.list()
}

// Probeable reports whether ProbeAll probes the pod.
func Probeable(p *podindex.Pod) bool { return p.Meshed && p.Alive && p.Running }

// CertificateCheck judges probed pods' live chains against the rotation's certificate root
// (steps.State.CertificateRoot: the active issuer's trust anchor), as the operator's CertTracker
// does, remembering the verdict per chain. It is not safe for concurrent use.
type CertificateCheck struct{ c *certificateCheck }

// NewCertificateCheck returns a check against root; nil root: no pod converges.
func NewCertificateCheck(root *x509.Certificate) *CertificateCheck {
	return &CertificateCheck{c: newCertificateCheck(root)}
}

// Problem says why a meshed pod's live certificate has not converged, or "" when its chain
// verifies to the root. r is nil when the pod was not probed. The wording is the operator's
// (CertTracker.Certificates).
func (k *CertificateCheck) Problem(p *podindex.Pod, r *ProbeResult) string {
	switch {
	case r != nil && r.Err == nil && k.c.verifies(r.key, r.Chain):
		return ""
	case !p.Running:
		return "not running"
	case r == nil:
		return "not probed yet"
	case r.Err != nil:
		return probeProblem(r.Err.Error(), rejectedChain(r.Err))
	}
	return k.c.offPath(r.Issuer)
}

// Convergence counts the alive meshed pods, control plane included, whose live chain verifies
// to the root, as the operator's CertTracker counts them, naming the pods whose chain was
// rejected first, then the first few others that are behind.
func (k *CertificateCheck) Convergence(pods []*podindex.Pod, results map[string]ProbeResult) steps.Convergence {
	var c steps.Convergence
	var others []steps.PodProblem
	behind := map[string]int{}
	for _, p := range pods {
		if !p.Meshed || !p.Alive {
			continue
		}
		c.Target++
		var r *ProbeResult
		if got, ok := results[p.Key()]; ok {
			r = &got
		}
		why := k.Problem(p, r)
		if why == "" {
			c.Converged++
			continue
		}
		if r == nil {
			c.NotProbed++
		}
		behind[p.Workload]++
		problem := steps.PodProblem{Namespace: p.Namespace, Name: p.Name, Reason: why}
		if r != nil && p.Running && rejectedChain(r.Err) {
			c.Rejected++
			c.Pods = append(c.Pods, problem)
		} else if len(others) < podindex.BehindLimit {
			others = append(others, problem)
		}
	}
	if !c.Done() {
		c.Behind, c.BehindWorkloads = podindex.TopWorkloads(behind)
		podindex.SortProblems(c.Pods)
		c.Pods = c.Pods[:min(len(c.Pods), podindex.BehindLimit)]
		podindex.SortProblems(others)
		c.Pods = append(c.Pods, others[:min(len(others), podindex.BehindLimit-len(c.Pods))]...)
	}
	return c
}
