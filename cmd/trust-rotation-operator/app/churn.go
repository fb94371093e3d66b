package app

import (
	"sync"
	"time"
)

// churn paces the reconciles that meshed pods' changes and their probes' results ask for.
//
// While thousands of pods roll, nearly every pod event and probe result moves a convergence
// count, and reconciling on each was ~40 reconciles a second at 10,000 pods: most of the
// operator's CPU and garbage over a rotation, to write progress that holdProgress writes at most
// every progressWriteInterval anyway. A change that only moves counts therefore asks for a
// reconcile no sooner than progressWriteInterval after the last one began. A change that may let
// the rotation move on is observed at once: one that brings the pods behind on the trust bundle
// or on the workload certificates to zero (a convergence completing), and any change of a
// control-plane pod (the control-plane steps wait on those alone). Delaying a reconcile never
// makes one decide on stale counts: each reads the counts as they are when it runs.
//
// The progress a control-plane change makes is written at once too (holdProgress): the counts
// then say that the control plane's own proxies moved, which the user's next move may wait on
// (the guide restarts the workloads once the control plane presents the new issuer's
// certificates), and a rotation's control-plane changes are a handful.
type churn struct {
	mu sync.Mutex
	// bundleBehind and certsBehind are the pods behind last seen.
	bundleBehind, certsBehind int
	// last is when the last reconcile began; timer is the pending paced reconcile, if any.
	last  time.Time
	timer *time.Timer
	// controlPlane: a control-plane pod changed since the last reconcile began.
	controlPlane bool
}

// began records that a reconcile begins at now, and returns whether a control-plane pod
// changed since the last one began.
func (p *churn) began(now time.Time) (controlPlane bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = now
	controlPlane, p.controlPlane = p.controlPlane, false
	return controlPlane
}

// churned is called after a meshed pod changed or a probe changed what the CertTracker counts.
func (c *Controller) churned(controlPlane bool) {
	c.churn.changed(c.index.Behind(), c.certs.Behind(), controlPlane, time.Now(), c.poke)
}

// changed decides, for the counts of pods behind seen after a change, whether to poke now or
// once progressWriteInterval has passed since the last reconcile began. poke must not block.
func (p *churn) changed(bundleBehind, certsBehind int, controlPlane bool, now time.Time, poke func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	completed := bundleBehind == 0 && p.bundleBehind != 0 || certsBehind == 0 && p.certsBehind != 0
	p.bundleBehind, p.certsBehind = bundleBehind, certsBehind
	p.controlPlane = p.controlPlane || controlPlane
	wait := progressWriteInterval - now.Sub(p.last)
	switch {
	case controlPlane || completed || wait <= 0:
		poke()
	case p.timer == nil:
		p.timer = time.AfterFunc(wait, func() {
			p.mu.Lock()
			p.timer = nil
			p.mu.Unlock()
			poke()
		})
	}
}
