package probe

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestLeafLifetimeKeepsTheLongest(t *testing.T) {
	var l leafLifetime
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{24 * time.Hour, 48 * time.Hour, time.Hour} {
		l.observe(&x509.Certificate{NotBefore: t0, NotAfter: t0.Add(d)})
	}
	l.observe(nil)
	if got := time.Duration(l.longest.Load()); got != 48*time.Hour {
		t.Errorf("longest %s", got)
	}
}
