package app

import (
	"testing"
	"time"
)

// TestChurnPacesCountsAndPassesCompletions: a change that only moves the counts of pods behind
// waits until progressWriteInterval after the last reconcile began, and many such changes make
// one paced poke; a change that brings either count to zero, or a control-plane pod's, pokes at
// once.
func TestChurnPacesCountsAndPassesCompletions(t *testing.T) {
	start := time.Now()
	var p churn
	p.began(start)
	pokes := make(chan struct{}, 10)
	poke := func() { pokes <- struct{}{} }
	immediate := func(what string) {
		t.Helper()
		select {
		case <-pokes:
		default:
			t.Fatalf("%s: no poke at once", what)
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case <-pokes:
			t.Fatalf("%s: poked at once", what)
		default:
		}
	}

	at := func(d time.Duration) time.Time { return start.Add(d) }
	p.changed(5, 3, false, at(10*time.Millisecond), poke)
	none("5 pods behind on the bundle, 3 on certificates")
	p.changed(4, 3, false, at(20*time.Millisecond), poke)
	none("4 behind on the bundle")
	p.changed(0, 3, false, at(30*time.Millisecond), poke)
	immediate("the trust bundle converged")
	p.changed(1, 3, false, at(40*time.Millisecond), poke)
	none("a pod behind again")
	p.changed(1, 3, true, at(50*time.Millisecond), poke)
	immediate("a control-plane pod changed")
	p.changed(1, 0, false, at(60*time.Millisecond), poke)
	immediate("the workload certificates converged")
	p.changed(1, 0, false, at(70*time.Millisecond), poke)
	none("nothing completed again")

	// The one paced poke of all the changes above, about progressWriteInterval after the
	// reconcile began.
	select {
	case <-pokes:
	case <-time.After(10 * progressWriteInterval):
		t.Fatal("no paced poke")
	}
	none("a second paced poke")
	if waited := time.Since(start); waited < progressWriteInterval-20*time.Millisecond {
		t.Errorf("the paced poke came %v after the reconcile began, want about %v", waited, progressWriteInterval)
	}
	p.changed(2, 0, false, at(progressWriteInterval), poke)
	immediate("a change once the interval has passed")
}
