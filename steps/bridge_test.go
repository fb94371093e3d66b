package steps

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// A cross-signed rotation whose restart is left to churn until a deadline after the bridge's
// expiry says so in its blocking message, naming the anchor's Secret and both times; a deadline
// before the expiry, a self-signed anchor and a standard rotation say nothing.
func TestBridgeExpiresBeforeRestartDeadline(t *testing.T) {
	p := newCrossPKI(t) // the new anchor, the bridge, expires in 24h
	bridgeEnd := p.newAnchor.cert.NotAfter
	res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepRemoveOldTrustRoots}, Phase: string(v1alpha1.PhaseRemovingOldTrustRoots),
		Decision: workflow.Waiting("WorkloadsBehind", "Waiting for 3 pod(s)")}
	prev := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseRefreshingControlPlane}
	spec := func(churn time.Duration) v1alpha1.TrustAnchorRotationSpec {
		return v1alpha1.TrustAnchorRotationSpec{Strategy: v1alpha1.StrategyCrossSigned, NaturalChurnPeriod: &metav1.Duration{Duration: churn}}
	}
	retiring := func(s *State) { s.Retiring = Fingerprint(p.newAnchor.cert) }
	s := crossState(p, issuer(p.newIssuer), previous(p.newAnchor), bundleOf(p.newAnchor), retiring)
	now := time.Now()

	st := Project(rotationSteps, prev, spec(48*time.Hour), 1, s, res, now)
	if st.RestartDeadline == nil {
		t.Fatal("no status.restartDeadline")
	}
	for _, want := range []string{"Waiting for 3 pod(s)", "the bridge certificate, trust anchor", "in Secret cert-manager/linkerd-trust-anchor",
		"expires at " + bridgeEnd.UTC().Format(time.RFC3339), "before status.restartDeadline " + st.RestartDeadline.Deadline.UTC().Format(time.RFC3339)} {
		if !strings.Contains(st.BlockingMessage, want) {
			t.Errorf("blocking message %q lacks %q", st.BlockingMessage, want)
		}
	}

	if st := Project(rotationSteps, prev, spec(12*time.Hour), 1, s, res, now); strings.Contains(st.BlockingMessage, "bridge") {
		t.Errorf("a deadline before the bridge's expiry was reported: %q", st.BlockingMessage)
	}
	selfSigned := anchorCA(t, "anchor")
	if got := BridgeExpiryProblem(crossState(p, anchor(selfSigned)), st.RestartDeadline); got != "" {
		t.Errorf("a self-signed anchor was reported as a bridge: %q", got)
	}
	standard := crossState(p, func(s *State) { s.Strategy = v1alpha1.StrategyStandard })
	if got := BridgeExpiryProblem(standard, st.RestartDeadline); got != "" {
		t.Errorf("a standard rotation was reported: %q", got)
	}
	if got := BridgeExpiryProblem(s, nil); got != "" {
		t.Errorf("no restart deadline (automatic restarts), yet reported: %q", got)
	}
}

// After a second cross-signed rotation the anchor's Secret is [C, B] (C signed by B, B by the
// first, self-signed root A) and the identity issuer's [I_C, C, B]. Pods that have not restarted
// onto [C] trust B and verify through C; none verifies through B, but linkerd-identity clamps
// every workload certificate to B's expiry all the same. Each bridge expiring before
// status.restartDeadline is named, where it is carried and what its expiry breaks; one expiring
// after it is not.
func TestOlderBridgesExpireBeforeRestartDeadline(t *testing.T) {
	now := time.Now()
	a := anchorCA(t, "anchor")
	b := newCert(t, "anchor", a, true, now.Add(10*time.Hour))
	c := newCert(t, "anchor", b, true, now.Add(48*time.Hour))
	issuerC := newCert(t, "issuer", c, true, now.Add(time.Hour))
	res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepRemoveOldTrustRoots}, Phase: string(v1alpha1.PhaseRemovingOldTrustRoots),
		Decision: workflow.Waiting("WorkloadsBehind", "Waiting for 3 pod(s)")}
	prev := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseRefreshingControlPlane}
	spec := func(churn time.Duration) v1alpha1.TrustAnchorRotationSpec {
		return v1alpha1.TrustAnchorRotationSpec{Strategy: v1alpha1.StrategyCrossSigned, NaturalChurnPeriod: &metav1.Duration{Duration: churn}}
	}
	s := rotatingState(pki{oldAnchor: c, newAnchor: c, oldIssuer: issuerC}, anchorWith(c, b), previous(c), bundleOf(c), issuedWith(issuerC, c, b),
		func(s *State) {
			s.Now, s.Rotation, s.Strategy, s.Retiring = now, Fingerprint(c.cert), v1alpha1.StrategyCrossSigned, Fingerprint(c.cert)
		})

	st := Project(rotationSteps, prev, spec(24*time.Hour), 1, s, res, now)
	if st.RestartDeadline == nil {
		t.Fatal("no status.restartDeadline")
	}
	for _, want := range []string{"Waiting for 3 pod(s)",
		"the older bridge certificate " + ShortFingerprint(Fingerprint(b.cert)) + ", certificate 2 of the trust anchor Secret cert-manager/linkerd-trust-anchor's tls.crt, " +
			"and certificate 3 of the identity issuer Secret linkerd/linkerd-identity-issuer's tls.crt, which no pod verifies through",
		"expires at " + b.cert.NotAfter.UTC().Format(time.RFC3339), "restarting does not help", "go back to a self-signed trust anchor"} {
		if !strings.Contains(st.BlockingMessage, want) {
			t.Errorf("blocking message %q lacks %q", st.BlockingMessage, want)
		}
	}
	if strings.Contains(st.BlockingMessage, "trust anchor "+ShortFingerprint(Fingerprint(c.cert))) {
		t.Errorf("the newest bridge, valid past the deadline, was reported: %q", st.BlockingMessage)
	}

	// A deadline after both: each is named, the earliest first in the summary, the newest as the
	// one the remaining pods verify through.
	got := BridgeExpiryProblem(s, &v1alpha1.RestartDeadline{Deadline: metav1.NewTime(now.Add(72 * time.Hour)), ChurnPeriod: metav1.Duration{Duration: 72 * time.Hour}})
	for _, want := range []string{"2 bridge certificates expire before status.restartDeadline, the first at " + b.cert.NotAfter.UTC().Format(time.RFC3339),
		"the bridge certificate, trust anchor " + ShortFingerprint(Fingerprint(c.cert)) + " in Secret cert-manager/linkerd-trust-anchor (signed by the previous anchor)",
		"pods that still trust only the previous anchor reject every new certificate chain", "the older bridge certificate " + ShortFingerprint(Fingerprint(b.cert))} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	// An identity issuer whose chain no longer carries B (re-issued from a self-signed anchor's
	// Secret, say) leaves B to the anchor's Secret, which hands it to the issuer's next renewal.
	issuedWith(issuerC)(s)
	if got := BridgeExpiryProblem(s, st.RestartDeadline); !strings.Contains(got, "certificate 2 of the trust anchor Secret cert-manager/linkerd-trust-anchor's tls.crt, which") {
		t.Errorf("B in the anchor's Secret alone was not reported as carried there: %q", got)
	}
}
