package meshsim

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

func pod(i int) PodRef {
	return PodRef{Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}
}

type rotationPKI struct {
	now              time.Time
	oldRoot, newRoot *testCA
	oldIss, newIss   *testCA
	oldOnly, newOnly *rootSet
	both             *rootSet
}

func newRotationPKI(t testing.TB, now time.Time) *rotationPKI {
	p := &rotationPKI{now: now}
	p.oldRoot = newTestRoot(t, "old", now.Add(-time.Hour), now.Add(240*time.Hour))
	p.newRoot = newTestRoot(t, "new", now.Add(-time.Hour), now.Add(240*time.Hour))
	p.oldIss = p.oldRoot.issue(t, now.Add(-time.Hour), now.Add(48*time.Hour))
	p.newIss = p.newRoot.issue(t, now.Add(-time.Hour), now.Add(48*time.Hour))
	p.oldOnly = newRootSet([]*x509.Certificate{p.oldRoot.cert})
	p.newOnly = newRootSet([]*x509.Certificate{p.newRoot.cert})
	p.both = newRootSet([]*x509.Certificate{p.newRoot.cert, p.oldRoot.cert, p.newRoot.cert})
	return p
}

func TestOracleTrueNegativeDuringCorrectRotation(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	// Pods trust old+new; some hold old-issuer certs, some new-issuer certs: all safe.
	for i := 0; i < 6; i++ {
		o.setRoots(pod(i), p.both)
		iss := p.oldIss
		if i%2 == 0 {
			iss = p.newIss
		}
		o.setChain(pod(i), iss.leaf(t, "a.ns.serviceaccount.identity.linkerd.cluster.local", clk.Now(), time.Hour))
	}
	// Plus a pod that trusts only the new root with a new-issuer cert: it rejects old certs!
	s := o.Check()
	if s.ActiveViolations != 0 || s.TotalViolations != 0 {
		t.Fatalf("violations in a safe mesh: %+v %v", s, o.Violations())
	}
	if s.RootClasses != 1 || s.ChainClasses != 2 || s.PodsWithCertificate != 6 {
		t.Errorf("classes = %d roots × %d chains, %d pods with certs; want 1 × 2, 6", s.RootClasses, s.ChainClasses, s.PodsWithCertificate)
	}
	if err := o.CheckNoViolationsSince(clk.Now().Add(-time.Hour)); err != nil {
		t.Error(err)
	}
}

func TestOracleTruePositives(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	reg := prometheus.NewRegistry()
	o := NewOracle(clk, time.Second, reg)
	start := clk.Now()
	// Wrong order (b): pod 0 trusts only the new root while pods 1..3 still present old-chain certs.
	o.setRoots(pod(0), p.newOnly)
	o.setChain(pod(0), p.newIss.leaf(t, "x", clk.Now(), time.Hour))
	for i := 1; i <= 3; i++ {
		o.setRoots(pod(i), p.both)
		o.setChain(pod(i), p.oldIss.leaf(t, "y", clk.Now(), time.Hour))
	}
	// The violation is recorded at the change, before any full check.
	if n := o.ViolationCount(); n != 1 {
		t.Fatalf("violations recorded on change = %d, want 1: %v", n, o.Violations())
	}
	s := o.Check()
	if s.ViolatingPairs != 3 || s.ActiveViolations != 1 {
		t.Fatalf("status %+v, want 3 violating pairs (pod0 rejects pods 1-3) in 1 episode", s)
	}
	v := o.Violations()[0]
	if v.Kind != ViolationUntrustedChain || v.Client != pod(0) || v.Server.Name == "p0" || v.Pairs != 3 || v.Reason == "" {
		t.Errorf("violation = %+v", v)
	}
	// The report names the anchors on each side: pod 0's roots, the new anchor alone, and the
	// old issuer the rejected chain presents.
	if !slices.Equal(v.ClientRoots, p.newOnly.fingerprints) || !slices.Equal(v.ServerChain, []string{Fingerprint(p.oldIss.cert)}) {
		t.Errorf("violation's roots %.12v and chain %.12v, want the new anchor %.12s and the old issuer %.12s",
			v.ClientRoots, v.ServerChain, Fingerprint(p.newRoot.cert), Fingerprint(p.oldIss.cert))
	}
	if want := fmt.Sprintf("; roots [%.12s]; chain [%.12s]", Fingerprint(p.newRoot.cert), Fingerprint(p.oldIss.cert)); !strings.HasSuffix(v.String(), want) {
		t.Errorf("violation %q does not end with %q", v, want)
	}
	if err := o.CheckNoViolationsSince(start); err == nil {
		t.Error("CheckNoViolationsSince passed with a violation")
	}
	if got := metricValue(o.metrics.violations); got != 1 {
		t.Errorf("violations_total = %v", got)
	}
	if got := metricValue(o.metrics.pairs); got != 3 {
		t.Errorf("violating_pod_pairs = %v", got)
	}
	// The episode ends when the offending pod leaves; later checks are clean.
	clk.Step(time.Second)
	o.remove(pod(0).UID)
	s = o.Check()
	if s.ActiveViolations != 0 {
		t.Fatalf("violation still active after the pod left: %+v", s)
	}
	if got := o.Violations()[0]; got.End.IsZero() {
		t.Error("episode has no end")
	}
	clk.Step(time.Second)
	if err := o.CheckNoViolationsSince(clk.Now()); err != nil {
		t.Errorf("a finished episode counted as recent: %v", err)
	}
	if len(o.ViolationsSince(start)) != 1 {
		t.Error("ViolationsSince(start) lost the episode")
	}

	// Wrong order (a): data plane trusts only the old root, a restarted pod holds a new-issuer cert.
	o.setRoots(pod(10), p.oldOnly)
	o.setChain(pod(10), p.oldIss.leaf(t, "z", clk.Now(), time.Hour))
	o.setRoots(pod(11), p.both)
	o.setChain(pod(11), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
	s = o.Check()
	found := false
	for _, v := range o.ViolationsSince(clk.Now()) {
		if v.Client == pod(10) && v.Server == pod(11) {
			found = true
		}
	}
	if !found || s.ViolatingPairs == 0 {
		t.Errorf("new-issuer cert vs old-only roots not reported: %+v %v", s, o.Violations())
	}
}

func TestOracleExpiredLeafAndPodsWithoutCertificates(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	o.setRoots(pod(0), p.oldOnly)
	o.setRoots(pod(1), p.oldOnly)
	o.setRoots(pod(2), p.oldOnly) // never gets a certificate
	o.setChain(pod(0), p.oldIss.leaf(t, "a", clk.Now(), 10*time.Second))
	o.setChain(pod(1), p.oldIss.leaf(t, "b", clk.Now(), time.Hour))
	s := o.Check()
	if s.ActiveViolations != 0 || s.PodsWithoutCertificate != 1 {
		t.Fatalf("status %+v", s)
	}
	clk.Step(time.Minute) // pod 0's leaf (10s + 20s skew) expired
	s = o.Check()
	if s.ActiveViolations != 1 || s.ViolatingPairs != 2 {
		t.Fatalf("expired leaf: status %+v, violations %v", s, o.Violations())
	}
	if v := o.Violations()[0]; v.Kind != ViolationInvalidLeaf || v.Server != pod(0) {
		t.Errorf("violation %+v", v)
	}
}

// TestOracleNamesPodsWithoutCertificates: the oracle names the pods whose proxy runs without a
// certificate (status), and, once a bound is set, CheckNoViolationsSince fails on each pod that
// waited longer than it for its first certificate — whether it got one later, stopped without
// one, or still waits — and on none that got one in time.
func TestOracleNamesPodsWithoutCertificates(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	start := clk.Now()
	for i := 0; i < 4; i++ {
		o.setRoots(pod(i), p.oldOnly)
	}
	clk.Step(500 * time.Millisecond)
	o.setChain(pod(0), p.oldIss.leaf(t, "a", clk.Now(), time.Hour)) // in time
	s := o.Check()
	if s.PodsWithoutCertificate != 3 || len(s.WithoutCertificate) != 3 || s.WithoutCertificate[0].Pod != pod(1) || !s.WithoutCertificate[0].Start.Equal(start) {
		t.Fatalf("status names %+v, want pods 1, 2, 3 since %s", s.WithoutCertificate, start)
	}
	if err := o.CheckNoViolationsSince(start); err != nil {
		t.Fatalf("no bound set: %v", err)
	}

	o.SetCertificateBound(time.Minute)
	clk.Step(70 * time.Second)
	o.remove(pod(2).UID) // stopped without one
	clk.Step(20 * time.Second)
	o.setChain(pod(1), p.oldIss.leaf(t, "b", clk.Now(), time.Hour)) // late
	err := o.CheckNoViolationsSince(start)
	if err == nil {
		t.Fatal("CheckNoViolationsSince passed with pods 1, 2 and 3 late")
	}
	for _, want := range []string{"3 meshed pod(s) ran without a certificate for longer than 1m0s", "ns/p1: no certificate for 1m30.5s", "got one at",
		"ns/p2: no certificate for 1m10.5s", "stopped without one at", "ns/p3: no certificate for 1m30.5s", "still without one"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "ns/p0") {
		t.Errorf("error names pod 0, which got its certificate in time: %v", err)
	}
	if ws := o.UncertifiedSince(clk.Now()); len(ws) != 2 || ws[0].Pod != pod(1) || ws[1].Pod != pod(3) {
		t.Errorf("uncertified since now: %+v, want pod 1 (ended now) and pod 3 (ongoing)", ws)
	}
	o.setChain(pod(3), p.oldIss.leaf(t, "c", clk.Now(), time.Hour))
	clk.Step(time.Second)
	if err := o.CheckNoViolationsSince(clk.Now()); err != nil {
		t.Errorf("every pod certified and every wait over: %v", err)
	}
}

func TestOracleVerificationCacheExpires(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	now := clk.Now()
	root := newTestRoot(t, "r", now.Add(-time.Hour), now.Add(time.Hour))
	iss := root.issue(t, now.Add(-time.Hour), now.Add(30*time.Minute))
	o := NewOracle(clk, time.Second, nil)
	rs := newRootSet([]*x509.Certificate{root.cert})
	for i := 0; i < 2; i++ {
		o.setRoots(pod(i), rs)
		o.setChain(pod(i), iss.leaf(t, "n", now, 24*time.Hour)) // clamped to the issuer's expiry
	}
	if s := o.Check(); s.ActiveViolations != 0 {
		t.Fatalf("%+v", s)
	}
	clk.Step(31 * time.Minute) // the issuer expired: the cached "ok" must not survive
	if s := o.Check(); s.ActiveViolations == 0 {
		t.Fatalf("expired issuer not reported: %+v", s)
	}
}

// compressedMesh is n pods in a handful of class pairs: every thousandth trusts only the old
// root, half present the old issuer's chain, half the new one's.
func compressedMesh(t testing.TB, n int) *Oracle {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	oldChain := p.oldIss.leaf(t, "a", clk.Now(), time.Hour)
	newChain := p.newIss.leaf(t, "b", clk.Now(), time.Hour)
	for i := 0; i < n; i++ {
		rs := p.both
		if i%1000 == 0 {
			rs = p.oldOnly
		}
		o.setRoots(pod(i), rs)
		if i%2 == 0 {
			o.setChain(pod(i), oldChain)
		} else {
			o.setChain(pod(i), newChain)
		}
	}
	return o
}

// TestOracleClassCompressionScales checks 10,000 pods in a handful of class pairs.
func TestOracleClassCompressionScales(t *testing.T) {
	const n = 10000
	o := compressedMesh(t, n)
	start := time.Now()
	s := o.Check()
	elapsed := time.Since(start)
	if s.RootClasses != 2 || s.ChainClasses != 2 || s.Pods != n {
		t.Fatalf("status %+v", s)
	}
	// 10 pods trust only the old root: each rejects the 5,000 new-chain pods.
	if s.ViolatingPairs != 10*5000 || s.ActiveViolations != 1 {
		t.Errorf("violating pairs = %d in %d episodes, want 50000 in 1", s.ViolatingPairs, s.ActiveViolations)
	}
	t.Logf("full check of %d pods: %v (a figure, not a bound: BenchmarkOracleCheck measures it)", n, elapsed)
}

func TestOracleWaitForViolation(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	o := NewOracle(clk, time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go o.Run(ctx)
	since := clk.Now()
	go func() {
		o.setRoots(pod(0), p.newOnly)
		o.setRoots(pod(1), p.oldOnly)
		o.setChain(pod(1), p.oldIss.leaf(t, "a", clk.Now(), time.Hour))
	}()
	v, err := o.WaitForViolation(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if v.Client != pod(0) || v.Server != pod(1) {
		t.Errorf("violation %+v", v)
	}
}

func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// BenchmarkOracleCheck is the cost of one full check of 10,000 pods in a handful of class pairs.
func BenchmarkOracleCheck(b *testing.B) {
	o := compressedMesh(b, 10000)
	b.ResetTimer()
	for b.Loop() {
		o.Check()
	}
}
