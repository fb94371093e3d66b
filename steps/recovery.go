package steps

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// --- the way out of an expired trust anchor ------------------------------------------------------
//
// The standard order restarts the data plane onto the expanded bundle before identity, and
// renews the issuer only once the data plane trusts the new anchor. Once the anchor the mesh
// trusts has expired that order cannot work: identity verifies its issuer against its roots at
// every certificate request (pkg/identity/service.go, ensureIssuerStillValid), so it signs
// nothing until it runs on an issuer of the new anchor, and a proxy the standard order restarts
// first comes up without a certificate (docs/design/recovery.md, case 3). The recovery's order
// differs by two moves ahead of it, each a step that passes at once unless the previous anchor
// has expired:
//
//  1. renew-issuer-first, before expand-trust-bundle: an issuer of the new anchor in the Secret.
//  2. expand-trust-bundle as it is: [new, expired]. Keeping the expired anchor costs nothing —
//     rustls-webpki ignores a trust anchor's validity, and Go builds the new issuer's chain to
//     the new anchor alone — and lets restarted pods verify the old certificates still valid.
//  3. restart-identity-first, before refresh-control-plane: identity restarted onto both, so that
//     it signs again, before any proxy restarts.
//
// From there the standard order is safe: every proxy it restarts gets a certificate of the new
// issuer at once, restart-identity and wait-for-identity-issuer find their work done, and the
// reduction waits for every certificate of the expired anchor to be gone. Until every pod has
// restarted, a pod not yet restarted refuses the new-anchor certificates of the restarted ones:
// that outage is the recovery's price, the one no ordering avoids, and restarting the whole data
// plane at once (spec.dataPlaneRestart) is what shortens it.

// Step names of the recovery's two moves (public API, see the other step names).
const (
	StepRenewIssuerFirst      = "renew-issuer-first"
	StepRestartIdentityFirst  = "restart-identity-first"
	ReasonPreviousAnchorValid = "PreviousAnchorValid"
	// ReasonRenewingIssuerFirst: the operator triggers the renewal of the issuer onto the new
	// anchor ahead of the trust bundle (spec.identityIssuerRenewal Automatic).
	ReasonRenewingIssuerFirst = "RenewingIssuerFirst"
	// ReasonIssuerFirstNeeded: the previous anchor expired and the issuer is not yet on the new
	// one; the user renews it.
	ReasonIssuerFirstNeeded = "IssuerRenewalFirstNeeded"
)

// previousAnchorExpired reports whether this rotation moves away from an anchor that has
// expired: the recovery's order applies.
func (s *State) previousAnchorExpired() bool {
	return s.Rotating() && s.Now.After(s.Previous.Cert.NotAfter)
}

// renewIssuerFirstStep renews the identity issuer onto the new anchor ahead of the trust bundle
// when the previous anchor has expired.
func renewIssuerFirstStep(w Writer) Step {
	return Step{
		Step: workflow.Step[*State]{
			Name: StepRenewIssuerFirst, Phase: string(v1alpha1.PhaseRefreshingControlPlane),
			Doc: "Only when the previous trust anchor has expired: renew the identity issuer onto the new anchor first, for linkerd-identity, which refuses to sign under an expired anchor, " +
				"to sign again before any proxy restarts (docs/design/recovery.md, case 3).",
			Observe: observeRenewIssuerFirst, Act: actRenewIssuer(w), Describe: describeRenewIssuer, Token: renewIssuerFirstToken,
		},
		Manual: renewIssuer, Automated: issuerRenewalAutomated, Assumes: AssumeIssuerRenewed, ActsOnlyWhen: recoveryOnly,
	}
}

// restartIdentityFirstStep restarts identity onto the new issuer and the bundle [new, expired]
// before anything else restarts, when the previous anchor has expired.
func restartIdentityFirstStep(w Writer) Step {
	restart := observeRestart(identityOnly)
	return Step{
		Step: workflow.Step[*State]{
			Name: StepRestartIdentityFirst, Phase: string(v1alpha1.PhaseRefreshingControlPlane),
			Doc: "Only when the previous trust anchor has expired: restart linkerd-identity onto the new issuer and the expanded bundle before any other pod, " +
				"so that every proxy restarted after it gets a certificate at once.",
			Observe: func(s *State, token string) workflow.Decision {
				if d, skip := recoverySkip(s); skip {
					return d
				}
				if token == "" && identityOnRenewedAnchor(s) && identityStartedAfterExpansion(s) {
					return workflow.Completed("IdentityOnNewAnchor", fmt.Sprintf("every pod of Deployment %s/%s started on the issuer in Secret %s, signed by the new trust anchor %s, and the expanded bundle",
						s.Config.LinkerdNamespace, s.Config.IdentityDeployment, s.Issuer.Ref(), ShortFingerprint(s.Anchor.Fingerprint())))
				}
				return restart(s, token)
			},
			Act: actRestart(w, identityOnly), Describe: describeRestart(identityOnly),
		},
		Assumes: AssumeControlPlaneRestarted, ReliesOnBundle: true, ReloadsBundle: true, ActsOnlyWhen: recoveryOnly,
	}
}

// BridgedRecovery reports whether the rotation in progress is a cross-signed one that started
// after the previous anchor had expired (StartStrategy records CrossSigned then only when the
// renewed anchor is signed by the expired one). Its order is the cross-signed order with the
// recovery's two moves and the bundle's expansion, which the cross-signed order otherwise passes
// over: the issuer renewed onto the new anchor first, the bundle [new, expired], linkerd-identity
// restarted onto both (Go builds the new issuer's chain to the new anchor, valid). From there no
// data-plane restart is needed for mTLS: the chain identity hands out carries the new anchor,
// signed by the expired one, which every pod still trusts — rustls-webpki ignores a trust
// anchor's validity and checks the bridge's, which is current — and a pod injected with [new,
// expired] verifies the old certificates still valid. So the pods keep the bundle they have
// (BundleHashes), move onto the new issuer at their certificate's refresh (at once where it
// had expired: the proxy retries every ten seconds), and restart once, onto the new anchor
// alone, after the reduction (docs/design/recovery.md, case 3).
//
// A cross-signed rotation that started before the anchor expired is not one: it keeps identity
// on the previous anchor, and waits at renew-issuer-first if it gets there after the expiry.
func (s *State) BridgedRecovery() bool {
	if !s.Rotating() || !s.CrossSigned() {
		return false
	}
	started := s.Now
	if s.Rotation != "" {
		started = s.RotationStart
	}
	return !started.IsZero() && started.After(s.Previous.Cert.NotAfter)
}

// bridgedRecoverySkips is why a step the cross-signed strategy passes over has nothing to do in a
// bridged recovery either.
const bridgedRecoverySkips = "linkerd-identity was restarted onto the expanded bundle first (" + StepRestartIdentityFirst + "), and every pod, on the bundle it has, " +
	"verifies the chains identity now hands out through the renewed anchor, signed by the expired one, as rustls-webpki accepts it"

// BundleHashes are the digests (linkerd.io/trust-root-sha256) of the trust bundles a meshed pod
// may be injected with at this point of the rotation: the desired bundle's, and in a bridged
// recovery (BridgedRecovery) the bundle of the expired anchor alone as well, as the operator
// renders it and as Linkerd's chart does (without the final newline, see renderKeeping): the
// pods on it trust the new issuer's chains through the bridge and restart only after the
// reduction. Empty when the anchor is unusable.
func (s *State) BundleHashes() []string {
	desired := s.DesiredBundle()
	if desired == "" {
		return nil
	}
	hashes := []string{BundleHash(desired)}
	if s.BridgedRecovery() && s.FinishingOn() == nil {
		previous := renderBundle([]*x509.Certificate{s.Previous.Cert})
		for _, h := range []string{BundleHash(previous), BundleHash(strings.TrimSuffix(previous, "\n"))} {
			if !slices.Contains(hashes, h) {
				hashes = append(hashes, h)
			}
		}
	}
	return hashes
}

// recoveryOnly is when the recovery's steps act.
const recoveryOnly = "the previous trust anchor has expired"

// recoverySkip is the recovery steps' decision while the previous anchor has not expired: done
// at once, the standard order applies.
func recoverySkip(s *State) (workflow.Decision, bool) {
	if s.previousAnchorExpired() {
		return workflow.Decision{}, false
	}
	d := workflow.Completed(ReasonPreviousAnchorValid, "the previous trust anchor has not expired: the standard order applies")
	if s.Rotating() {
		s.timedByPreviousExpiry(&d) // seen the moment it expires
	}
	return d, true
}

// identityStartedAfterExpansion reports whether every running identity pod read the expanded
// trust bundle: it started after this rotation wrote it.
func identityStartedAfterExpansion(s *State) bool {
	for _, p := range s.ControlPlane[s.Config.IdentityDeployment].Members {
		if !p.Terminating && !s.startedAfterExpansion(p) {
			return false
		}
	}
	return true
}

// observeRenewIssuerFirst passes when the issuer in the Secret is signed by the new anchor;
// otherwise it waits for the user's renewal or, under spec.identityIssuerRenewal Automatic,
// triggers it — once per issuance of the Certificate (the revision is in the token): when
// cert-manager re-issued it still from the expired anchor (it may renew the issuer before the
// anchor), the operator triggers it once more.
func observeRenewIssuerFirst(s *State, token string) workflow.Decision {
	if d, skip := recoverySkip(s); skip {
		return d
	}
	expired := s.Previous.Cert
	why := fmt.Sprintf("trust anchor %s expired at %s: linkerd-identity signs again only once it runs on an issuer of the new anchor %s, which must happen before any proxy restarts",
		ShortFingerprint(Fingerprint(expired)), expired.NotAfter.UTC().Format(time.RFC3339), ShortFingerprint(s.Anchor.Fingerprint()))
	if s.CrossSigned() && !s.BridgedRecovery() {
		// Only a rotation that started cross-signed before the anchor expired gets here: one that
		// starts after runs the standard order or, bridged, this one (State.StartStrategy).
		return workflow.Waiting(ReasonIssuerFirstNeeded, why+fmt.Sprintf("; this rotation started cross-signed before the anchor expired and cannot get there (linkerd-identity, which trusts the expired anchor alone, refuses an issuer whose chain ends at it: Go checks the root's validity): renew the trust anchor again (cmctl renew -n %s %s), and the rotation onto it starts with the standard order",
			s.Config.CertManagerNamespace, s.Config.AnchorCertificate))
	}
	d, renewable := issuerOnNewAnchor(s)
	if d.Outcome == workflow.Done || !renewable {
		return d
	}
	if s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		return workflow.Waiting(ReasonIssuerFirstNeeded, fmt.Sprintf("%s: renew it now, %s", why, renewIssuerCommand(s)))
	}
	ic := s.IssuerCertificate
	ref := ic.Namespace + "/" + ic.Name
	switch {
	case ic.Err != "" || !ic.Found:
		return workflow.Waiting("IssuerCertificateUnavailable", fmt.Sprintf("%s; cannot read Certificate %s to renew it: %s", why, ref, orNotFound(ic.Err)))
	case ic.Issuing:
		return workflow.Waiting("IssuerRenewing", fmt.Sprintf("%s; waiting for cert-manager to re-issue Certificate %s (Issuing)", why, ref))
	}
	if rev, ok := tokenRevision(token); ok {
		if ic.Revision <= rev {
			return workflow.Waiting("IssuerRenewing", fmt.Sprintf("%s; the renewal of Certificate %s was triggered and cert-manager has not re-issued it yet: see the Certificate's conditions", why, ref))
		}
		if !s.issuedSince(token) {
			return workflow.Waiting("IssuerRenewed", fmt.Sprintf("%s; Certificate %s was re-issued (revision %d): waiting for Secret %s", why, ref, ic.Revision, s.Issuer.Ref()))
		}
		// Re-issued, and still not from the new anchor: cert-manager signed it before the
		// anchor's Secret held the new one. Once more, under the new revision.
	}
	return workflow.ActNeeded(ReasonRenewingIssuerFirst, fmt.Sprintf("%s; triggering the renewal of Certificate %s as cmctl renew does (spec.identityIssuerRenewal Automatic)", why, ref))
}

// issuedSince reports whether the issuer in the Secret was issued at or after the act the token
// records: the Secret holds what the renewal it triggered produced.
func (s *State) issuedSince(token string) bool {
	at, err := stampTime(token)
	return err == nil && s.Issuer.Usable() && !s.Issuer.Cert.NotBefore.Before(at.Truncate(time.Second))
}

// renewIssuerFirstToken keeps the revision of the renewal the operator triggered; a renewal
// triggered again after a re-issuance from the expired anchor gets a token of its own.
func renewIssuerFirstToken(s *State, token string) string {
	rev, ok := tokenRevision(token)
	switch {
	case !ok:
		return revisionToken(token, s.IssuerCertificate.Revision).String()
	case s.IssuerCertificate.Revision > rev:
		return revisionToken(NewActStamp(s.Now), s.IssuerCertificate.Revision).String()
	}
	return token
}

// What `linkerd trust recover` recovers from (RecoveryCase).
const (
	RecoveryTrustAnchorExpired    = "TrustAnchorExpired"
	RecoveryIdentityIssuerExpired = "IdentityIssuerExpired"
)

// RecoveryCase names the failure between rotations that the mesh is in, and says it in a
// sentence: the anchor the mesh trusts has expired (renewed since or not), or, the anchor valid,
// the identity issuer in the Secret has. "" when neither: nothing to recover from.
func (s *State) RecoveryCase() (name, what string) {
	switch {
	case s.Previous.Usable() && s.Now.After(s.Previous.Cert.NotAfter):
		what = fmt.Sprintf("trust anchor %s expired at %s: linkerd-identity refuses every certificate request and cannot restart; the proxies still accept each other's certificates until each expires",
			ShortFingerprint(s.Previous.Fingerprint()), s.Previous.Cert.NotAfter.UTC().Format(time.RFC3339))
		if s.Rotating() {
			what += fmt.Sprintf("; cert-manager renewed it to %s", ShortFingerprint(s.Anchor.Fingerprint()))
		}
		return RecoveryTrustAnchorExpired, what
	case s.Issuer.Usable() && s.Now.After(s.Issuer.Cert.NotAfter):
		return RecoveryIdentityIssuerExpired, fmt.Sprintf("the identity issuer in Secret %s expired at %s: linkerd-identity refuses every certificate request, and the certificates it signed with it have expired",
			s.Issuer.Ref(), s.Issuer.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return "", ""
}
