package steps

import (
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The cross-signed strategy (spec.strategy CrossSigned, docs/design/fewer-restarts.md) runs the
// same steps as the standard one, minus the four that expand the data plane's roots before the
// issuer switch. Its precondition is that the renewed trust anchor B is signed by the previous
// anchor A's key: cert-manager issues it so when the anchor's Certificate names the CA issuer
// over the anchor's own Secret (manifests/cert-manager/linkerd-pki-cross-signed.yaml). The CA
// issuer then puts B into every chain it issues under it, so the identity issuer renewed onto B
// is the chain [issuer, B], and every leaf identity signs comes with B as an intermediate:
//
//   - a pod that loaded only A at start verifies leaf -> issuer -> B -> A: webpki tries A for the
//     issuer, fails the signature, then tries the presented B, which A signed;
//   - linkerd-identity, started on A, accepts the issuer through B alike (Go's x509.Verify);
//   - a pod that loads B verifies leaf -> issuer -> B directly.
//
// So the bundle stays [A] while proxies move onto the new issuer by their own certificate
// refresh, becomes [B] once every live chain is a B chain, and the data plane restarts once,
// onto [B] (remove-old-trust-roots), by the operator's restart budget or by the user.

// StrategyOf is the spec's strategy, Standard when unset.
func StrategyOf(spec v1alpha1.TrustAnchorRotationSpec) v1alpha1.RotationStrategy {
	if spec.Strategy == "" {
		return v1alpha1.StrategyStandard
	}
	return spec.Strategy
}

// CrossSigned reports whether the rotation runs the cross-signed strategy: the strategy its
// checkpoint recorded when it started (a rotation finishes the way it started: switching a
// half-done standard rotation, whose anchor need not be cross-signed, to the bridge would hand
// pods that trust only the old anchor chains they cannot verify), or spec.strategy when no
// rotation is in progress.
func (s *State) CrossSigned() bool {
	if s.Rotation != "" {
		return s.Strategy == v1alpha1.StrategyCrossSigned
	}
	return s.StartStrategy(s.Spec) == v1alpha1.StrategyCrossSigned
}

// StartStrategy is the strategy a rotation starting now records in its checkpoint: spec's, but
// Standard for a rotation away from an anchor that has expired unless spec.strategy is
// CrossSigned and the renewed anchor is signed by the expired one. The cross-signed order keeps
// linkerd-identity on the previous anchor until its bridge is no longer needed, and identity
// refuses an issuer whose chain ends at an expired root (Go's x509 checks the root's validity);
// with the bridge, the rotation recovers in the cross-signed order with the two moves of the
// recovery (BridgedRecovery); without it, only the standard order gets out
// (docs/design/recovery.md, case 3).
func (s *State) StartStrategy(spec v1alpha1.TrustAnchorRotationSpec) v1alpha1.RotationStrategy {
	strategy := StrategyOf(spec)
	if s.Rotating() && s.Previous.Usable() && s.Now.After(s.Previous.Cert.NotAfter) &&
		(strategy != v1alpha1.StrategyCrossSigned || !s.anchorSignedByPrevious()) {
		return v1alpha1.StrategyStandard
	}
	return strategy
}

// anchorSignedByPrevious reports whether the renewed trust anchor is signed by the previous
// anchor's key, as cert-manager signs it under the cross-signed setup (a plan's stand-in is taken
// to be, StandInCrossSigned).
func (s *State) anchorSignedByPrevious() bool {
	return s.StandInCrossSigned || s.Anchor.Usable() && s.Previous.Usable() && SignedBy(s.Anchor.Cert, s.Previous.Cert)
}

// crossSignedProblem is detect-anchor-rotation's Wait when spec.strategy is CrossSigned and the
// renewed anchor is not signed by the previous one: identity would hand out chains that pods
// trusting only the previous anchor reject, so no rotation starts. nil otherwise.
func crossSignedProblem(s *State) *workflow.Decision {
	if !s.CrossSigned() || !s.Rotating() || s.StandInCrossSigned || SignedBy(s.Anchor.Cert, s.Previous.Cert) {
		return nil
	}
	d := workflow.Waiting(ReasonTrustAnchorNotCrossSigned, fmt.Sprintf(
		"spec.strategy is CrossSigned but the renewed trust anchor %s in Secret %s is not signed by the previous anchor %s (Secret %s): "+
			"its cert-manager Certificate must be issued by the CA issuer over its own Secret (manifests/cert-manager/linkerd-pki-cross-signed.yaml); "+
			"no rotation starts until the anchor is re-issued so, or spec.strategy is Standard",
		ShortFingerprint(s.Anchor.Fingerprint()), s.Anchor.Ref(), ShortFingerprint(s.Previous.Fingerprint()), s.Previous.Ref()))
	return &d
}

// ReasonTrustAnchorNotCrossSigned: see crossSignedProblem.
const ReasonTrustAnchorNotCrossSigned = "TrustAnchorNotCrossSigned"

// ReasonNotNeededCrossSigned is the reason of a step the cross-signed strategy passes over.
const ReasonNotNeededCrossSigned = "NotNeededWhenCrossSigned"

// skipCrossSigned wraps the Observe of a step the cross-signed strategy does not need
// (Step.CrossSignedSkips): done at once, with why, in a cross-signed rotation.
//
// Except propagate-trust-roots (the step that waits on the trust bundle, WaitsOnTrustBundle)
// while some meshed pod is behind the bundle: it then observes, and restarts, as in a standard
// rotation. In an ordinary cross-signed rotation no pod is: the bundle has not changed since the
// last rotation's final restart. One case leaves pods behind: a cross-signed round superseded
// from retire-previous-anchor on (the anchor renewed again, A -> B -> C) finishes on B's
// reduced bundle [B] and jumps from remove-old-trust-roots to the next round without its
// restart (see superseded), so the pods still injected with [A] are behind the next round's
// bundle, which stays [B]. The steps from wait-for-remote-trust-roots on need every pod on it
// (Step.NeedsExpandedPods), and none of them restarts pods: passed over, propagate-trust-roots
// would leave the rotation waiting there for good under automatic restarts. Restarting those
// pods onto [B] keeps the safety rule: every live certificate chains to B (the round's
// reduction was refused until they all did), which [B] verifies directly and [A] through the
// bridge B signed by A, and the new issuer's chain [issuer, C, B] verifies under [B] as under
// [A]. It also keeps what the strategy's argument assumes of the next rounds: every pod trusts
// the current anchor or the previous one (docs/design/fewer-restarts.md, "As implemented"),
// not an anchor two renewals back, which would leave the mesh bound to A's validity and to the
// oldest bridge staying in the issuer's chain. Those pods restart once more, at the round's own
// final restart, as the standard strategy restarts them.
func skipCrossSigned(st Step, observe func(*State, string) workflow.Decision) func(*State, string) workflow.Decision {
	return func(s *State, token string) workflow.Decision {
		if !s.CrossSigned() || st.RunsInBridgedRecovery && s.BridgedRecovery() {
			return observe(s, token)
		}
		if st.WaitsOnTrustBundle && !s.TrustBundle.Done() {
			d := observe(s, token)
			if d.Outcome == workflow.Wait {
				d.Message += "; spec.strategy CrossSigned: the bundle is unchanged, but these pods were not injected with it " +
					"(the final restart of a rotation superseded by a renewal of the anchor did not happen): they restart onto it here, " +
					"as every pod must run with it from wait-for-remote-trust-roots on"
			}
			return d
		}
		if s.BridgedRecovery() {
			return workflow.Completed(ReasonNotNeededCrossSigned, "spec.strategy CrossSigned, recovering from the expired trust anchor through the bridge: "+bridgedRecoverySkips)
		}
		return workflow.Completed(ReasonNotNeededCrossSigned, "spec.strategy CrossSigned: "+st.CrossSignedSkips)
	}
}

// crossSignedRenewal is renew-workload-certificates in a cross-signed rotation: proxies move
// onto the new issuer by their own refresh (at 70 % of their certificate's lifetime, identity's
// issuanceLifetime, 24h by default); nothing is restarted, since every pod accepts both chains.
func crossSignedRenewal(s *State, token string) workflow.Decision {
	d := observeCertificatesRenewed(s, token)
	if d.Outcome == workflow.Wait && s.IssuerOnCurrentAnchor() { // not waiting for the issuer (ReasonIssuerNotOnCurrentAnchor)
		d.Message += "; spec.strategy CrossSigned: proxies refresh onto the new issuer by themselves, nothing is restarted"
	}
	return d
}
