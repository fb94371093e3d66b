package steps

import (
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// renewWorkloadCertificatesStep waits for every meshed pod to present a new-anchor certificate.
func renewWorkloadCertificatesStep(w Writer) Step {
	return Step{
		Step: workflow.Step[*State]{
			Name: StepRenewWorkloadCertificates, Phase: string(v1alpha1.PhaseRenewingWorkloadCerts),
			Doc:     "Wait until every meshed pod presents a certificate that chains to the new anchor, from the new issuer or a later renewal of it (restart workloads, or let proxies refresh).",
			Observe: observeCertificateRestarts, Act: actRestarts(w, renew), Describe: describeRestarts(renew),
		},
		ReliesOnBundle: true, Assumes: AssumeCertificatesRenewed,
		Manual: func(s *State) string {
			if s.CrossSigned() {
				return "let proxies refresh (spec.strategy CrossSigned: nothing is restarted here)"
			}
			return "restart workloads, or let proxies refresh"
		},
		Automated: func(s *State) string {
			spec := s.Spec
			if StrategyOf(spec) == v1alpha1.StrategyCrossSigned {
				return ""
			}
			if restartMethod(spec) == v1alpha1.Evict {
				return restartsBehind(s)
			}
			return automatedRestarts(spec, "restarts the workloads whose proxies have not refreshed onto the new anchor's issuer within twice the refresh interval")
		},
	}
}

// restartsForCertificates reports whether step is renew-workload-certificates, which (under
// automatic restarts) restarts workloads for their certificates, not for a bundle they load.
func restartsForCertificates(step string) bool { return step == StepRenewWorkloadCertificates }

func observeCertificatesRenewed(s *State, _ string) workflow.Decision {
	if !s.IssuerOnCurrentAnchor() {
		// cert-manager renewed the anchor again, or the issuer went back: not safe to go on.
		return workflow.Waiting(ReasonIssuerNotOnCurrentAnchor, fmt.Sprintf("identity issuer in Secret %s is not signed by the current trust anchor %s", s.Issuer.Ref(), ShortFingerprint(s.Anchor.Fingerprint())))
	}
	c := s.Certificates
	if c.Done() {
		return workflow.Completed("WorkloadCertificatesRenewed", fmt.Sprintf("%d of %d meshed pod(s) present certificates that chain to the new trust anchor %s",
			c.Converged, c.Target, ShortFingerprint(s.Anchor.Fingerprint())))
	}
	msg := certificatesBehind(s)
	if len(c.Behind) > 0 {
		msg += "; restart or wait for: " + c.describeBehind(5)
	}
	switch {
	case c.Rejected > 0 && len(c.Pods) > 0:
		// Something other than the pod's proxy answers on its address (Convergence.Rejected):
		// said first, as no restart of the pod's workload may be what it takes.
		p := c.Pods[0]
		msg += fmt.Sprintf("; %d %s with a certificate that is not %s own, e.g. pod %s/%s: %s",
			c.Rejected, Plural(c.Rejected, "pod answers", "pods answer"), Plural(c.Rejected, "its", "their"), p.Namespace, p.Name, p.Reason)
	case len(c.Pods) > 0:
		p := c.Pods[0]
		msg += fmt.Sprintf("; e.g. pod %s/%s: %s", p.Namespace, p.Name, p.Reason)
	}
	return workflow.Waiting("WorkloadCertificatesRenewing", msg)
}

// certificatesBehind says how many pods the certificate convergence waits for, and on what.
// Any issuer the new anchor signs will do: a renewal of the issuer during the step (cert-manager's
// own schedule) leaves the pods on the previous one converged.
func certificatesBehind(s *State) string {
	c := s.Certificates
	return fmt.Sprintf("Waiting for %d pod(s) to present a certificate that chains to the new trust anchor %s (identity issuer now %s)",
		c.Target-c.Converged, ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Issuer.Fingerprint()))
}

// fallbackAfter is how long after the issuer switch the operator waits for proxies to refresh
// on their own before it restarts them: twice the accelerated interval.
func (s *State) fallbackAfter() time.Duration { return 2 * RefreshInterval(s.Spec) }

// observeCertificateRestarts is the Observe of renew-workload-certificates: proxies given the
// accelerated refresh interval move onto the new anchor's issuer by themselves; a workload whose
// certificates did not move within twice the interval runs a proxy that ignores it (a Linkerd
// older than edge-26.4.3), and is restarted (Automatic) or named (Manual). With Evict nothing
// set the interval, so the operator restarts at once.
func observeCertificateRestarts(s *State, token string) workflow.Decision {
	if s.CrossSigned() {
		return crossSignedRenewal(s, token)
	}
	d := observeCertificatesRenewed(s, token)
	if d.Outcome == workflow.Done || !s.IssuerOnCurrentAnchor() { // done, or waiting for the issuer (ReasonIssuerNotOnCurrentAnchor)
		return d
	}
	c := s.Certificates
	behind := certificatesBehind(s)
	due := !s.PhaseSince.IsZero() && !s.Now.Before(s.PhaseSince.Add(s.fallbackAfter()))
	var fallback time.Time // when the fallback restart falls due
	if !s.PhaseSince.IsZero() && len(c.Behind) > 0 {
		fallback = s.after(s.PhaseSince.Add(s.fallbackAfter()))
	}
	if !s.automaticRestarts() {
		if due && len(c.Behind) > 0 {
			d.Message += fmt.Sprintf("; their certificates did not move within %s (twice the refresh interval): their proxies ignore %s (Linkerd before edge-26.4.3?) or were never given it: restart them",
				s.fallbackAfter(), MaxRefreshEnv)
		}
		return d.RecheckBy(fallback)
	}
	if s.restartMethod() != v1alpha1.Evict && !due && token == "" {
		when := "twice the refresh interval after the issuer switch"
		if !s.PhaseSince.IsZero() {
			when = s.PhaseSince.Add(s.fallbackAfter()).UTC().Format(time.RFC3339)
		}
		return workflow.Waiting("WorkloadCertificatesRefreshing", fmt.Sprintf(
			"%s; proxies refresh on their own within %s (%s); workloads still behind at %s are restarted",
			behind, RefreshInterval(s.Spec), MaxRefreshEnv, when)).RecheckBy(fallback)
	}
	return s.observeRestarts(renew, token, behind).RecheckBy(fallback)
}
