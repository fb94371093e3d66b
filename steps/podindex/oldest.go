package podindex

import "time"

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
func (x *Index) OldestMeshed() time.Time {
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
