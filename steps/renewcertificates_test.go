package steps

import (
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func TestRenewWorkloadCertificatesFallback(t *testing.T) {
	p := newPKI(t)
	since := time.Now().Add(-time.Minute)
	onNew := []stateOpt{issuer(p.newIssuer), func(s *State) {
		s.PhaseSince = since
		s.Certificates = Convergence{Converged: 1, Target: 2, Behind: []WorkloadCount{{"a/Deployment/x", 1}}, BehindWorkloads: 1}
	}}
	cases := map[string]struct {
		opts     []stateOpt
		outcome  workflow.Outcome
		reason   string
		contains string
	}{
		"proxies refresh on their own within twice the interval": {
			opts: append([]stateOpt{automatic(), workload("a/Deployment/x", behindPods())}, onNew...), outcome: workflow.Wait, reason: "WorkloadCertificatesRefreshing",
		},
		"after twice the interval, workloads still behind are restarted": {
			opts:    append([]stateOpt{automatic(), workload("a/Deployment/x", behindPods()), at(since.Add(10*time.Minute + time.Second))}, onNew...),
			outcome: workflow.Act, reason: "RestartingWorkloads", contains: "a/Deployment/x",
		},
		"with Evict nothing accelerated the proxies: restart at once": {
			opts:    append([]stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), workload("a/Deployment/x", behindPods())}, onNew...),
			outcome: workflow.Act, reason: "RestartingWorkloads",
		},
		"manual mode says the proxies ignore the interval": {
			opts:    append([]stateOpt{at(since.Add(11 * time.Minute))}, onNew...),
			outcome: workflow.Wait, reason: "WorkloadCertificatesRenewing", contains: "ignore LINKERD2_PROXY_IDENTITY_MAX_REFRESH",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := rotatingState(p, tc.opts...)
			d := observeCertificateRestarts(s, "")
			if d.Outcome != tc.outcome || d.Reason != tc.reason || !strings.Contains(d.Message, tc.contains) {
				t.Fatalf("got %v %s (%s), want %v %s with %q", d.Outcome, d.Reason, d.Message, tc.outcome, tc.reason, tc.contains)
			}
		})
	}
}

// TestRenewWorkloadCertificatesNamesARejectedChain: a pod whose address answers with a chain that
// is not its own is named in the message, with what was wrong, before any other pod behind.
func TestRenewWorkloadCertificatesNamesARejectedChain(t *testing.T) {
	p := newPKI(t)
	const reason = "presents identity db.app.serviceaccount.identity.linkerd.cluster.local, expected web.app.serviceaccount.identity.linkerd.cluster.local"
	s := rotatingState(p, issuer(p.newIssuer), func(s *State) {
		s.Certificates = Convergence{Converged: 1, Target: 3, Behind: []WorkloadCount{{"app/Deployment/web", 2}}, BehindWorkloads: 1, Rejected: 1,
			Pods: []PodProblem{{"app", "web-1", reason}, {"app", "web-0", "not probed yet"}}}
	})
	d := observeCertificatesRenewed(s, "")
	want := "; 1 pod answers with a certificate that is not its own, e.g. pod app/web-1: " + reason
	if d.Outcome != workflow.Wait || d.Reason != "WorkloadCertificatesRenewing" || !strings.HasSuffix(d.Message, want) {
		t.Fatalf("got %v %s (%s), want a wait ending %q", d.Outcome, d.Reason, d.Message, want)
	}
}
