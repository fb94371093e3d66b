package probe

import (
	"crypto/x509"
	"sync/atomic"
	"time"
)

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
