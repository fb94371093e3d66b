package meshsim

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

// TestOutageMeasuresTheUnionOfEpisodes: two pods' leaves expire 5s apart and come back 21s and
// 10s later; the outage is the union of the two episodes, each from the first check that saw it
// to the first that did not (one tick late at each end), split at any instant asked.
func TestOutageMeasuresTheUnionOfEpisodes(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now().Truncate(time.Second))
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	start := clk.Now()
	for i := range 3 {
		o.setRoots(pod(i), p.oldOnly)
	}
	skew := 20 * time.Second // signLeaf backdates by it and adds it to the lifetime
	o.setChain(pod(0), p.oldIss.leaf(t, "a", start, 10*time.Second-skew))
	o.setChain(pod(1), p.oldIss.leaf(t, "b", start, 15*time.Second-skew))
	o.setChain(pod(2), p.oldIss.leaf(t, "c", start, time.Hour))
	step := func(to time.Duration) {
		for clk.Now().Before(start.Add(to)) {
			clk.Step(time.Second)
			o.Check()
		}
	}
	step(12 * time.Second) // pod 0's leaf expired at +10s: seen at +11s
	step(16 * time.Second) // pod 1's at +15s: seen at +16s
	step(25 * time.Second)
	o.setChain(pod(1), p.oldIss.leaf(t, "b", clk.Now(), time.Hour))
	step(31 * time.Second)
	o.setChain(pod(0), p.oldIss.leaf(t, "a", clk.Now(), time.Hour))
	step(40 * time.Second)

	all := o.Outage(start, clk.Now())
	if all.Down != 21*time.Second || all.Episodes != 2 || all.Started != 2 || all.MaxPairs != 2 {
		t.Errorf("outage over the whole run = %+v, want 21s down (from the check at +11s to the one at +32s), 2 episodes begun after the start, 2 pairs at most", all)
	}
	later := o.Outage(start.Add(20*time.Second), clk.Now())
	if later.Down != 12*time.Second || later.Episodes != 2 || later.Started != 0 {
		t.Errorf("outage from +20s = %+v, want 12s down in 2 episodes, none begun after +20s", later)
	}
	if after := o.Outage(start.Add(32*time.Second), time.Time{}); after.Down != 0 || after.Episodes != 0 {
		t.Errorf("outage after the recovery = %+v, want none", after)
	}
	t.Log(all)
}

// An InvalidLeaf episode says why the leaf was not renewed when the mesh knows (its proxy's last
// refresh error), so that a report names the cause, not only the expiry.
func TestInvalidLeafSaysWhyItWasNotRenewed(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now().Truncate(time.Second))
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	o.SetLeafExplainer(func(uid types.UID) string {
		if uid == pod(0).UID {
			return "its proxy's last refresh failed (2 failures so far): identity refused"
		}
		return ""
	})
	for i := range 2 {
		o.setRoots(pod(i), p.oldOnly)
		o.setChain(pod(i), p.oldIss.leaf(t, "a", clk.Now(), -10*time.Second)) // expires 10s from now
	}
	clk.Step(11 * time.Second)
	o.Check()
	vs := o.Violations()
	if len(vs) != 2 {
		t.Fatalf("want both leaves reported expired, got %v", vs)
	}
	for _, v := range vs {
		explained := strings.Contains(v.Reason, "identity refused")
		if want := v.Server == pod(0); explained != want || !strings.Contains(v.Reason, "leaf certificate expired") {
			t.Errorf("%s: reason %q (explained %v, want %v)", v.Server, v.Reason, explained, want)
		}
	}
}
