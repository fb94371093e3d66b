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
