package meshsim

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// AcceptAllVerifier, set in its environment, makes the test binary a stand-in verifier that
// speaks the protocol and accepts every chain: wrong on purpose, to see the oracle catch it.
const AcceptAllVerifier = "MESHSIM_TEST_ACCEPT_ALL_VERIFIER"

// RunAcceptAllVerifier is the stand-in verifier's loop, run by TestMain.
func RunAcceptAllVerifier() {
	fmt.Println(`{"verifier":"accept-all","version":"0"}`)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		fmt.Println(`{"ok":true}`)
	}
}

func oracleWithVerifier(t *testing.T, v *RealVerifier) (*Oracle, *testclock.FakeClock, *rotationPKI) {
	t.Helper()
	clk := testclock.NewFakeClock(time.Now())
	o := NewOracle(clk, time.Second, nil)
	o.SetVerifier(v)
	return o, clk, newRotationPKI(t, clk.Now())
}

// A verifier that accepts what the model refuses is a disagreement the oracle reports, naming
// the chain, and fails CheckNoViolationsSince; its verdict, not the model's, is the oracle's.
func TestOracleReportsADisagreementWithTheVerifier(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(AcceptAllVerifier, "1")
	v, err := StartVerifier(self)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Version() != "accept-all 0" {
		t.Errorf("version %q", v.Version())
	}
	o, clk, p := oracleWithVerifier(t, v)
	since := clk.Now()
	o.setRoots(pod(0), p.newOnly)
	o.setChain(pod(0), p.newIss.leaf(t, "a", clk.Now(), time.Hour))
	o.setRoots(pod(1), p.oldOnly)
	o.setChain(pod(1), p.oldIss.leaf(t, "b", clk.Now(), time.Hour))
	s := o.Check()
	if s.ActiveViolations != 0 {
		t.Errorf("the verifier accepts every chain, yet the oracle reports %d violations: %v", s.ActiveViolations, o.Violations())
	}
	ds := o.Disagreements()
	if len(ds) == 0 || !ds[0].Real.OK || !strings.HasPrefix(ds[0].Model, "UnknownIssuer") {
		t.Fatalf("disagreements %v, want the model's refusal of a chain to another anchor beside the verifier's acceptance", ds)
	}
	err = o.CheckNoViolationsSince(since)
	if err == nil || !strings.Contains(err.Error(), "disagreed") || !strings.Contains(err.Error(), shortFingerprints(ds[0].Chain)) {
		t.Errorf("CheckNoViolationsSince = %v, want the disagreement naming the chain", err)
	}
	if v.Calls() == 0 {
		t.Error("the verifier was never asked")
	}
}

// With the real rustls-webpki (WEBPKI_VERIFIER_BIN), the oracle's verdicts on a rotation's
// right and wrong orders come from it, and the model agrees with every one.
func TestOracleWithTheRealVerifier(t *testing.T) {
	bin := reallinkerd.FromEnv().Verifier
	if bin == "" {
		t.Skipf("%s is not set", reallinkerd.EnvVerifier)
	}
	v, err := StartVerifier(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	o, clk, p := oracleWithVerifier(t, v)
	since := clk.Now()
	for i := range 4 {
		o.setRoots(pod(i), p.both)
		iss := p.oldIss
		if i%2 == 0 {
			iss = p.newIss
		}
		o.setChain(pod(i), iss.leaf(t, "a", clk.Now(), time.Hour))
	}
	if s := o.Check(); s.ActiveViolations != 0 {
		t.Fatalf("violations in a safe mesh: %v", o.Violations())
	}
	o.setRoots(pod(4), p.oldOnly) // the wrong order: a pod on the old anchor alone
	o.setChain(pod(4), p.oldIss.leaf(t, "b", clk.Now(), time.Hour))
	if s := o.Check(); s.ActiveViolations != 1 {
		t.Fatalf("want one violation (pod 4 refusing the new issuer's pods), got %v", o.Violations())
	}
	if vs := o.Violations(); !strings.Contains(vs[0].Reason, "rustls-webpki") {
		t.Errorf("the verdict %q is not the real verifier's", vs[0].Reason)
	}
	if ds := o.Disagreements(); len(ds) != 0 {
		t.Errorf("the model and %s disagree: %v", v.Version(), ds)
	}
	if err := o.CheckNoViolationsSince(since); err == nil || strings.Contains(err.Error(), "disagreed") {
		t.Errorf("CheckNoViolationsSince = %v, want the violation alone", err)
	}
	t.Logf("%s answered %d verifications", v.Version(), v.Calls())
}
