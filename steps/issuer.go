package steps

import (
	"context"
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// waitForIdentityIssuerStep waits for the identity issuer to be renewed onto the new anchor, or
// renews it (spec.identityIssuerRenewal Automatic).
func waitForIdentityIssuerStep(w Writer) Step {
	return Step{
		Step: workflow.Step[*State]{
			Name: StepWaitForIdentityIssuer, Phase: string(v1alpha1.PhaseWaitingForIdentityRotation),
			Doc:     "Wait for the identity issuer to be renewed onto the new anchor (cmctl renew -n linkerd linkerd-identity-issuer).",
			Observe: observeIssuerRenewal, Act: actRenewIssuer(w), Describe: describeRenewIssuer, Token: issuerRenewalToken,
		},
		ReliesOnBundle: true,
		Manual:         renewIssuer, Automated: issuerRenewalAutomated, Assumes: AssumeIssuerRenewed,
	}
}

// renewIssuer is what moves identity onto an issuer signed by the new anchor: the renewal of its
// cert-manager Certificate, or, while identity reads the issuer Linkerd's chart rendered, the
// helm upgrade that switches it to cert-manager's (SchemeSwitch).
func renewIssuer(s *State) string {
	if cmd := s.SchemeSwitch(); cmd != "" {
		return cmd
	}
	return renewIssuerCommand(s)
}

// renewIssuerCommand renews the identity issuer's cert-manager Certificate.
func renewIssuerCommand(s *State) string {
	return fmt.Sprintf("cmctl renew -n %s %s", s.Config.LinkerdNamespace, s.Config.IssuerCertificate)
}

func issuerRenewalAutomated(s *State) string {
	if s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic || s.SchemeSwitch() != "" {
		// While identity reads the issuer Linkerd's chart rendered, the move is the user's
		// helm upgrade: a renewal changes nothing identity reads.
		return ""
	}
	return "the operator renews the identity issuer, as cmctl renew does (spec.identityIssuerRenewal: Automatic)"
}

func observeIssuerOnNewAnchor(s *State, _ string) workflow.Decision {
	d, _ := issuerOnNewAnchor(s)
	return d
}

// issuerOnNewAnchor is observeIssuerOnNewAnchor; renewable is true when the step waits for the
// issuer's renewal alone (ReasonWaitingForIssuerRenewal): nothing else is wrong with it.
func issuerOnNewAnchor(s *State) (d workflow.Decision, renewable bool) {
	defer s.timedByAnchor(&d)
	if d := anchorProblem(s); d != nil {
		return *d, false
	}
	if !s.Issuer.Usable() {
		return workflow.Waiting("IssuerUnavailable", s.Issuer.Problem("identity issuer Secret")), false
	}
	if s.IssuerOnCurrentAnchor() {
		if p := issuerBridgeProblem(s); p != "" {
			return workflow.Waiting(ReasonIssuerChainNotBridged, p), false
		}
		return workflow.Completed("IssuerRenewed", fmt.Sprintf("identity issuer %s is signed by the new trust anchor", ShortFingerprint(s.Issuer.Fingerprint()))), false
	}
	if s.Previous.Usable() && !s.signedByKept(s.Issuer.Cert) && !s.issuerBridgedToKept() {
		return workflow.Waiting("IssuerUnrelated", fmt.Sprintf(
			"identity issuer in Secret %s is signed by neither the new trust anchor %s nor the previous one %s; renew it from the ClusterIssuer backed by %s",
			s.Issuer.Ref(), ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint()), s.Anchor.Ref())), false
	}
	if d := s.schemeSwitchProblem(); d != nil {
		// A renewal of cert-manager's issuer would change nothing identity reads.
		return *d, false
	}
	return workflow.Waiting(ReasonWaitingForIssuerRenewal, "Waiting for the identity issuer to be renewed onto the new trust anchor: "+renewIssuer(s)), true
}

// IssuerCertificate is what automatic issuer renewal needs of the identity issuer's
// cert-manager Certificate.
type IssuerCertificate struct {
	Namespace, Name string
	// Found is false when the Certificate does not exist; Err says why it could not be read.
	Found bool
	Err   string
	// Issuing is true while the Certificate's Issuing condition is True (a renewal is under way).
	Issuing bool
	// Revision is status.revision: cert-manager increments it at every issuance.
	Revision int
}

// issuerRenewalToken remembers the issuer Certificate's revision when the renewal is first
// triggered: a higher revision means the renewal happened, so it is never triggered twice.
func issuerRenewalToken(s *State, token string) string {
	if _, ok := tokenRevision(token); ok {
		return token // a later act: the revision of the first one stands
	}
	return revisionToken(token, s.IssuerCertificate.Revision).String()
}

// tokenRevision is the revision a revision token records; ok is false for any other token.
func tokenRevision(token string) (int, bool) {
	t, _ := ParseActToken(token)
	return t.Revision()
}

// observeIssuerRenewal is the Observe of wait-for-identity-issuer: done once the issuer is signed
// by the new anchor. With spec.identityIssuerRenewal Automatic, the operator triggers the
// renewal itself — only once every meshed pod trusts the new anchor (the step comes after
// propagate-trust-roots and restart-identity, and checks the convergence again).
func observeIssuerRenewal(s *State, token string) workflow.Decision {
	d, renewable := issuerOnNewAnchor(s)
	if !renewable || s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		return d
	}
	ic := s.IssuerCertificate
	ref := ic.Namespace + "/" + ic.Name
	switch {
	case !s.TrustBundle.Done():
		return workflow.Waiting("TrustBundleConverging", fmt.Sprintf(
			"not renewing the identity issuer while %d pod(s) do not trust the new anchor", s.TrustBundle.Target-s.TrustBundle.Converged))
	case ic.Err != "":
		return workflow.Waiting("IssuerCertificateUnavailable", fmt.Sprintf("cannot read Certificate %s to renew the identity issuer: %s", ref, ic.Err))
	case !ic.Found:
		return workflow.Waiting("IssuerCertificateMissing", fmt.Sprintf("Certificate %s not found: cannot renew the identity issuer (set --identity-issuer-certificate)", ref))
	case ic.Issuing:
		return workflow.Waiting("IssuerRenewing", fmt.Sprintf("Waiting for cert-manager to re-issue Certificate %s (Issuing)", ref))
	}
	if rev, ok := tokenRevision(token); ok && ic.Revision > rev {
		return workflow.Waiting("IssuerRenewed", fmt.Sprintf("Certificate %s was re-issued (revision %d); waiting for Secret %s", ref, ic.Revision, s.Issuer.Ref()))
	}
	why := "the expanded trust bundle has converged"
	if s.CrossSigned() {
		why = "the new trust anchor is signed by the previous one, which every pod trusts"
	}
	return workflow.ActNeeded(ReasonRenewingIdentityIssuer, fmt.Sprintf("%s: triggering the renewal of Certificate %s as cmctl renew does", why, ref))
}

func actRenewIssuer(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		return w.RenewCertificate(ctx, s.IssuerCertificate.Namespace, s.IssuerCertificate.Name)
	}
}

func describeRenewIssuer(s *State) []string {
	if s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		return nil
	}
	return []string{fmt.Sprintf("renew Certificate %s/%s (Issuing=True, ManuallyTriggered)", s.IssuerCertificate.Namespace, s.IssuerCertificate.Name)}
}
