package steps

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestLeafExpiring: under 9 % of its lifetime left, past the proxy's renewal at 70 % and its
// retry at 91 %.
func TestLeafExpiring(t *testing.T) {
	received := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	notAfter := received.Add(24 * time.Hour)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{time.Hour, false}, {24 * time.Hour * 7 / 10, false}, {24 * time.Hour * 91 / 100, false}, {24 * time.Hour * 92 / 100, true}, {25 * time.Hour, true}} {
		if got := LeafExpiring(received, notAfter, received.Add(c.at)); got != c.want {
			t.Errorf("read %s into a 24h certificate: expiring %v, want %v", c.at, got, c.want)
		}
	}
	if LeafExpiring(notAfter, received, notAfter) {
		t.Error("a certificate with no lifetime is expiring")
	}
}

// TestExpiringLeavesCondition: condition WorkloadCertificatesExpiring follows what the probes
// read, whatever the phase, and a new leader keeps a True one until it has read every pod.
func TestExpiringLeavesCondition(t *testing.T) {
	p := newPKI(t)
	s := syncedOn(p, p.newIssuer)
	var prev v1alpha1.TrustAnchorRotationStatus
	project := func() *metav1.Condition {
		res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepDetectAnchorRotation}, Phase: string(v1alpha1.PhaseSynced), Decision: observeDetect(s, "")}
		prev = Project(rotationSteps, prev, s.Spec, 1, s, res, s.Now)
		return meta.FindStatusCondition(prev.Conditions, v1alpha1.ConditionWorkloadCertificatesExpiring)
	}
	if c := project(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonWorkloadCertificatesRenewed {
		t.Fatalf("nothing expiring: condition %+v, want False", c)
	}
	s.ExpiringLeaves = ExpiringLeaves{Pods: 2, Soonest: s.Now.Add(90 * time.Minute), Example: "app/web-1"}
	c := project()
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonWorkloadCertificatesNotRenewed {
		t.Fatalf("two pods not renewed: condition %+v, want True", c)
	}
	for _, w := range []string{"2 meshed pod(s)", "app/web-1, expires in 1h30m", "linkerd/linkerd-identity"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("message %q does not say %q", c.Message, w)
		}
	}
	s.ExpiringLeaves, s.ExpiringLeavesPartial = ExpiringLeaves{}, true
	if c := project(); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("a new leader still reading the pods: condition %+v, want the previous True", c)
	}
	s.ExpiringLeavesPartial = false
	if c := project(); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("every pod read again, none expiring: condition %+v, want False", c)
	}
}
