package observe

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/linkerd/trust-rotation/steps"
)

// ProbeResult is what one probe of a pod's admin port found.
type ProbeResult struct {
	// Issuer is the fingerprint of the certificate that signed the pod's live leaf; "" when the
	// probe failed.
	Issuer string
	// Err says why the probe failed.
	Err error
}

// ProbeAll reads, once, the live certificate of every alive, running meshed pod, at most
// concurrency probes at a time, each bounded by timeout. It is the one-shot counterpart of the
// operator's CertTracker, for a CLI. done, when set, is called after each probe (from the probing
// goroutines, so it must be safe for concurrent use) to report progress. The results are keyed
// by pod key; a pod that is not running has none. An ended ctx stops the remaining probes.
func ProbeAll(ctx context.Context, dial DialFunc, pods []*Pod, concurrency int, timeout time.Duration, done func(p *Pod, r ProbeResult)) map[string]ProbeResult {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	if timeout <= 0 {
		timeout = defaultProbeTime
	}
	var (
		mu      sync.Mutex
		results = make(map[string]ProbeResult, len(pods))
		wg      sync.WaitGroup
		work    = make(chan *Pod)
	)
	for range max(concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				issuer, err := ProbePod(ctx, dial, p, timeout)
				r := ProbeResult{Issuer: issuer, Err: err}
				mu.Lock()
				results[p.Key()] = r
				mu.Unlock()
				if done != nil {
					done(p, r)
				}
			}
		}()
	}
feed:
	for _, p := range pods {
		if !p.Meshed || !p.Alive || !p.Running {
			continue
		}
		select {
		case work <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return results
}

// Probeable reports whether ProbeAll probes the pod.
func Probeable(p *Pod) bool { return p.Meshed && p.Alive && p.Running }

// BundleProblem says why a meshed non-control-plane pod has not converged on the trust bundle
// of the given hash, or "" when it has. The wording is the operator's (PodIndex.TrustBundle).
func BundleProblem(p *Pod, hash string) string {
	if p.TrustRootHash == hash {
		return ""
	}
	return fmt.Sprintf("trust-root-sha256 %s, want %s", shortHash(p.TrustRootHash), shortHash(hash))
}

// CertificateProblem says why a meshed pod's live certificate is not from the active issuer, or
// "" when it is. r is nil when the pod was not probed. The wording is the operator's
// (CertTracker.Certificates).
func CertificateProblem(p *Pod, r *ProbeResult, active string) string {
	switch {
	case r != nil && r.Err == nil && r.Issuer == active && active != "":
		return ""
	case !p.Running:
		return "not running"
	case r == nil:
		return "not probed yet"
	case r.Err != nil:
		return "probe failed: " + r.Err.Error()
	}
	return "certificate issued by " + shortHash(r.Issuer) + ", not the active issuer " + shortHash(active)
}

// CertificateConvergence counts the alive meshed pods, control plane included, whose live
// certificate is signed by the active issuer, as the operator's CertTracker counts them, naming
// the first few that are behind.
func CertificateConvergence(pods []*Pod, results map[string]ProbeResult, active string) steps.Convergence {
	var c steps.Convergence
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
		why := CertificateProblem(p, r, active)
		if why == "" {
			c.Converged++
			continue
		}
		behind[p.Workload]++
		if len(c.Pods) < behindLimit {
			c.Pods = append(c.Pods, steps.PodProblem{Namespace: p.Namespace, Name: p.Name, Reason: why})
		}
	}
	if !c.Done() {
		c.Behind, c.BehindWorkloads = topWorkloads(behind)
		sortProblems(c.Pods)
	}
	return c
}
