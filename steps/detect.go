package steps

import (
	"context"
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// detectAnchorRotationStep is where the rotation idles: it passes once the trust anchor was
// renewed, and meanwhile restores the rendered trust bundle when it drifted.
func detectAnchorRotationStep(w Writer) Step {
	return Step{Step: workflow.Step[*State]{
		Name: StepDetectAnchorRotation, Phase: string(v1alpha1.PhaseSynced),
		Doc:     "Wait for cert-manager to renew the trust anchor; keep the trust bundle as rendered meanwhile.",
		Observe: observeDetect, Act: actDetect(w), Describe: describeDetect, Token: detectToken,
	}}
}

// Watching reports whether step is where the workflow rests between rotations, watching for
// the trust anchor's renewal: detect-anchor-rotation, the step of a Synced rotation's checkpoint
// once bootstrapped. What holds only at rest (the Synced conditions, the stale-issuer watchdog)
// asks this, not the step's name.
func Watching(step string) bool { return step == StepDetectAnchorRotation }

func observeDetect(s *State, token string) (d workflow.Decision) {
	defer s.timedByAnchor(&d)
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if d := previousProblem(s); d != nil {
		return *d
	}
	if d := crossSignedProblem(s); d != nil {
		return *d
	}
	if d := anchorExpiredProblem(s); d != nil {
		return *d
	}
	if !s.Rotating() {
		defer s.timedByPreviousExpiry(&d) // anchorExpiredProblem's verdict changes then
	}
	if s.Rotating() {
		return workflow.Completed("TrustAnchorRenewed", fmt.Sprintf("trust anchor %s differs from the previous anchor %s", ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint())))
	}
	if s.RenewedInPlace() {
		return workflow.ActNeeded("TrustAnchorRenewedSameKey", fmt.Sprintf(
			"trust anchor %s was renewed with the key and subject of %s (rotationPolicy Never): no rotation needed; updating Secret %s and ConfigMap %s/%s in place",
			ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint()), s.Previous.Ref(), s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	if s.Bundle.Data != s.DesiredBundle() {
		if lost := droppedSigner(s); lost != nil {
			return workflow.Waiting("TrustBundleDriftKept", fmt.Sprintf(
				"ConfigMap %s/%s was edited by hand and trusts anchor %s, which signs the identity issuer in Secret %s; restoring the rendered bundle would drop it: renew the issuer from %s, or restore the ConfigMap",
				s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, ShortFingerprint(Fingerprint(lost)), s.Issuer.Ref(), s.Anchor.Ref()))
		}
		if d := KeptAnchorProblem(s, s.DesiredBundle()); d != nil {
			return *d
		}
		return workflow.ActNeeded("TrustBundleDrifted", fmt.Sprintf("ConfigMap %s/%s does not hold the rendered trust bundle (changed by %s)",
			s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, describeWriters(s.Bundle)))
	}
	defer s.timedByIssuerExpiry(&d)
	if s.issuerExpired() {
		return observeExpiredIssuer(s, token)
	}
	if l := s.StaleIssuer(StepDetectAnchorRotation); l != nil {
		return observeStaleIssuer(s, l, token)
	}
	if s.StaleIssuerCarried(StepDetectAnchorRotation) {
		return workflow.Waiting(v1alpha1.ReasonIdentityIssuerStale, s.StaleReported+"; reading every meshed pod's certificate again since the operator started")
	}
	// Synced: nothing to wait for, so no blocking message.
	return workflow.Waiting("TrustAnchorUnchanged", "")
}

// detectToken gives a restart of identity off a stale issuer a token of its own (see
// staleIssuerToken); the bundle writes keep theirs.
func detectToken(s *State, token string) string {
	switch observeDetect(s, token).Reason {
	case ReasonRenewingExpiredIssuer:
		return expiredIssuerToken(s, token)
	case v1alpha1.ReasonIdentityIssuerStale:
		if l := s.StaleIssuer(StepDetectAnchorRotation); l != nil {
			return staleIssuerToken(s, l, token)
		}
	}
	return token
}

func describeDetect(s *State) []string {
	if observeDetect(s, "").Reason == ReasonRenewingExpiredIssuer {
		return []string{fmt.Sprintf("renew Certificate %s/%s (Issuing=True, ManuallyTriggered): the identity issuer has expired", s.IssuerCertificate.Namespace, s.IssuerCertificate.Name)}
	}
	if l := s.StaleIssuer(StepDetectAnchorRotation); l != nil && observeDetect(s, "").Reason == v1alpha1.ReasonIdentityIssuerStale {
		return describeStaleIssuer(s)
	}
	return describeBundleWrite(s)
}

func actDetect(w Writer) func(context.Context, *State, string) error {
	write := actWriteDesiredBundle(w)
	restart, renew := actStaleIssuer(w), actRenewExpiredIssuer(w)
	return func(ctx context.Context, s *State, token string) error {
		// What the act is for, as the step decided it: without the token, which the engine has
		// just extended for this very act (detectToken) and which would read as done.
		switch observeDetect(s, "").Reason {
		case ReasonRenewingExpiredIssuer:
			return renew(ctx, s, token)
		case v1alpha1.ReasonIdentityIssuerStale:
			if l := s.StaleIssuer(StepDetectAnchorRotation); l != nil {
				return restart(ctx, s, token)
			}
		}
		if s.RenewedInPlace() {
			// The previous anchor first: the bundle then renders from the renewed anchor alone.
			if err := w.WritePreviousAnchor(ctx, s.Anchor.Cert); err != nil {
				return err
			}
		}
		return write(ctx, s, token)
	}
}
