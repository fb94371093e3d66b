package steps

import (
	"context"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// --- an expired identity issuer between rotations -----------------------------------------------
//
// cert-manager renews the identity issuer long before it expires; when it did not (cert-manager
// down, its CA issuer broken), the issuer expires with the anchor still valid. Linkerd's identity
// then refuses every certificate request (pkg/identity/service.go, Certify verifies the issuer
// against its roots at the current time), and every certificate it signed with that issuer
// expired with it (pkg/tls/ca.go caps each at the issuer's expiry): mTLS is down for the pods
// holding one. The shortest way back breaks nothing that still works (docs/design/recovery.md,
// case 2): a valid issuer in the Secret — identity reloads it by itself, its roots being valid —
// and no restart at all, for each proxy whose certificate expired asks identity again every
// minimum refresh (10s; linkerd2-proxy identity-client certify.rs refresh_in).

// ReasonIdentityIssuerExpired: Synced, the issuer in the Secret has expired.
const ReasonIdentityIssuerExpired = "IdentityIssuerExpired"

// ReasonRenewingExpiredIssuer: the operator triggers the renewal of an expired issuer
// (spec.identityIssuerRenewal Automatic).
const ReasonRenewingExpiredIssuer = "RenewingExpiredIdentityIssuer"

// issuerExpired reports whether the issuer in the Secret has expired at s.Now; a decision that
// depends on it defers timedByIssuerExpiry.
func (s *State) issuerExpired() bool {
	return s.Issuer.Usable() && s.Now.After(s.Issuer.Cert.NotAfter)
}

// timedByIssuerExpiry has *d depend on the time the issuer in the Secret expires, seen the moment
// it does (issuerExpired).
func (s *State) timedByIssuerExpiry(d *workflow.Decision) {
	if s.Issuer.Usable() {
		*d = d.RecheckBy(s.after(s.Issuer.Cert.NotAfter.Add(time.Second)))
	}
}

// observeExpiredIssuer is detect-anchor-rotation's decision while the issuer in the Secret has
// expired: a wait that says what is down and the command that brings it back, or under
// spec.identityIssuerRenewal Automatic the renewal, triggered once (the Certificate's revision
// is in the token, as wait-for-identity-issuer keeps it).
func observeExpiredIssuer(s *State, token string) workflow.Decision {
	ic := s.IssuerCertificate
	ref := ic.Namespace + "/" + ic.Name
	msg := fmt.Sprintf("the identity issuer in Secret %s expired at %s: linkerd-identity refuses every certificate request, and the certificates it signed with it have expired, so mTLS is down for the pods holding one%s; "+
		"a valid issuer in the Secret brings them back without a restart (identity reloads it, and each proxy asks again every 10s)",
		s.Issuer.Ref(), s.Issuer.Cert.NotAfter.UTC().Format(time.RFC3339), expiredLeavesFact(s))
	if s.Spec.IdentityIssuerRenewal != v1alpha1.Automatic || s.SchemeSwitch() != "" {
		return workflow.Waiting(ReasonIdentityIssuerExpired, fmt.Sprintf("%s: renew it, %s, and see why cert-manager did not (the Certificate's conditions)", msg, renewIssuerCommand(s)))
	}
	switch {
	case ic.Err != "" || !ic.Found:
		return workflow.Waiting(ReasonIdentityIssuerExpired, fmt.Sprintf("%s; cannot read Certificate %s to renew it: %s", msg, ref, orNotFound(ic.Err)))
	case ic.Issuing:
		return workflow.Waiting(ReasonIdentityIssuerExpired, fmt.Sprintf("%s; waiting for cert-manager to re-issue Certificate %s (Issuing)", msg, ref))
	}
	if rev, ok := s.expiredIssuerRenewal(token); ok {
		if ic.Revision > rev {
			return workflow.Waiting(ReasonIdentityIssuerExpired, fmt.Sprintf("%s; Certificate %s was re-issued (revision %d): waiting for Secret %s", msg, ref, ic.Revision, s.Issuer.Ref()))
		}
		// Triggered already: triggering again changes nothing a failing cert-manager does.
		return workflow.Waiting(ReasonIdentityIssuerExpired, fmt.Sprintf("%s; the renewal of Certificate %s was triggered and cert-manager has not re-issued it yet: see the Certificate's conditions", msg, ref))
	}
	return workflow.ActNeeded(ReasonRenewingExpiredIssuer, fmt.Sprintf("%s; triggering the renewal of Certificate %s as cmctl renew does (spec.identityIssuerRenewal Automatic)", msg, ref))
}

// expiredIssuerRenewal is the Certificate's revision when the operator triggered the renewal of
// the issuer expired now, read from the checkpoint's token; ok is false when it has not: the
// token is no revision token, or one made before this issuer expired (an earlier act).
func (s *State) expiredIssuerRenewal(token string) (revision int, ok bool) {
	rev, ok := tokenRevision(token)
	if !ok {
		return 0, false
	}
	if at, err := stampTime(token); err != nil || !at.After(s.Issuer.Cert.NotAfter) {
		return 0, false
	}
	return rev, true
}

// expiredIssuerToken is the token of the renewal of an expired issuer: the checkpoint's when it
// is that renewal's already, a fresh one with the Certificate's revision otherwise.
func expiredIssuerToken(s *State, token string) string {
	if _, ok := s.expiredIssuerRenewal(token); ok {
		return token
	}
	return revisionToken(NewActStamp(s.Now), s.IssuerCertificate.Revision).String()
}

func orNotFound(err string) string {
	if err == "" {
		return "not found"
	}
	return err
}

// actRenewExpiredIssuer triggers the renewal of the issuer's Certificate.
func actRenewExpiredIssuer(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		return w.RenewCertificate(ctx, s.IssuerCertificate.Namespace, s.IssuerCertificate.Name)
	}
}

// expiredLeavesFact says, from the chains the probes read, how many meshed pods present a
// certificate whose issuer chain has expired — identity caps each certificate at the first
// expiry of that chain (pkg/tls/ca.go findFirstExpiration), so none of them holds a valid one —
// and how many still present one of a chain valid now; "" before any probe.
func expiredLeavesFact(s *State) string {
	down, up := 0, 0
	example := ""
	for _, lc := range s.liveChains() {
		if len(lc.Certs) == 0 {
			continue
		}
		first := lc.Certs[0].NotAfter
		for _, c := range lc.Certs[1:] {
			if c.NotAfter.Before(first) {
				first = c.NotAfter
			}
		}
		if s.Now.After(first) {
			down += lc.Pods
			if example == "" {
				example = lc.Example
			}
		} else {
			up += lc.Pods
		}
	}
	if down+up == 0 {
		return ""
	}
	fact := fmt.Sprintf(" (the probes read %d meshed pod(s) on an expired issuer, without a valid certificate now", down)
	if example != "" {
		fact += ", e.g. " + example
	}
	return fact + fmt.Sprintf(", and %d on an issuer still valid)", up)
}
