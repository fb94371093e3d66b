package observe

import (
	"crypto/x509"
	"sync/atomic"
	"time"

	"github.com/linkerd/trust-rotation/steps"
)

// What the next rotation's deadline reads of the data plane (steps.DeadlineInputs), kept as
// the pods and the probes come, so that a reconcile reads it without a walk of the mesh.

// oldestPod tracks the creation of the oldest alive meshed data-plane pod. Adding a pod keeps it
// exact; removing the oldest marks it stale, and the next read walks the index once.
type oldestPod struct {
	at    time.Time
	stale bool
}

// count accounts for p entering (delta > 0) or leaving the counted pods. Called with the
// index's lock held.
func (o *oldestPod) count(p *Pod, delta int) {
	if p.Created.IsZero() {
		return
	}
	switch {
	case delta > 0 && !o.stale && (o.at.IsZero() || p.Created.Before(o.at)):
		o.at = p.Created
	case delta < 0 && !p.Created.After(o.at):
		o.stale = true
	}
}

// OldestMeshed is when the oldest alive meshed pod outside the control plane was created; zero
// when there is none.
func (x *PodIndex) OldestMeshed() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.oldest.stale {
		x.oldest = oldestPod{}
		for _, p := range x.pods {
			if p.Meshed && p.Alive && !p.ControlPlane {
				x.oldest.count(p, +1)
			}
		}
	}
	return x.oldest.at
}

// leafLifetime is the longest lifetime (NotAfter - NotBefore) of the workload certificates the
// probes read.
type leafLifetime struct{ longest atomic.Int64 }

func (l *leafLifetime) observe(leaf *x509.Certificate) {
	if leaf == nil {
		return
	}
	d := int64(leaf.NotAfter.Sub(leaf.NotBefore))
	for {
		cur := l.longest.Load()
		if d <= cur || l.longest.CompareAndSwap(cur, d) {
			return
		}
	}
}

// LeafLifetime is the longest lifetime of the workload certificates probed so far, zero
// before the first.
func (t *CertTracker) LeafLifetime() time.Duration {
	return time.Duration(t.leafLifetime.longest.Load())
}

// FillDeadline sets what the deadline reads of the data plane.
func FillDeadline(s *steps.State, index *PodIndex, certs *CertTracker) {
	s.Deadline = steps.DeadlineInputs{WorkloadCertificateLifetime: certs.LeafLifetime(), OldestMeshedPod: index.OldestMeshed()}
}
