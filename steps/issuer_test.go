package steps

import (
	"strings"
	"testing"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func TestWaitForIdentityIssuerAutomatic(t *testing.T) {
	p := newPKI(t)
	auto := func(s *State) {
		s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
		s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 3}
	}
	cases := map[string]struct {
		opts    []stateOpt
		token   string
		outcome workflow.Outcome
		reason  string
	}{
		"manual renewal waits for the user":      {opts: []stateOpt{bundlePods(2, 2)}, outcome: workflow.Wait, reason: "WaitingForIssuerRenewal"},
		"automatic renewal triggers it":          {opts: []stateOpt{bundlePods(2, 2), auto}, outcome: workflow.Act, reason: "RenewingIdentityIssuer"},
		"never while a pod distrusts the anchor": {opts: []stateOpt{bundlePods(1, 2), auto}, outcome: workflow.Wait, reason: "TrustBundleConverging"},
		"a renewal under way is waited for": {opts: []stateOpt{bundlePods(2, 2), auto, func(s *State) { s.IssuerCertificate.Issuing = true }},
			outcome: workflow.Wait, reason: "IssuerRenewing"},
		"a renewal that happened is not triggered again": {opts: []stateOpt{bundlePods(2, 2), auto, func(s *State) { s.IssuerCertificate.Revision = 4 }},
			token: "T revision 3", outcome: workflow.Wait, reason: "IssuerRenewed"},
		"an act that never reached cert-manager is repeated": {opts: []stateOpt{bundlePods(2, 2), auto},
			token: "T revision 3", outcome: workflow.Act, reason: "RenewingIdentityIssuer"},
		"a missing Certificate is reported": {opts: []stateOpt{bundlePods(2, 2), auto, func(s *State) { s.IssuerCertificate.Found = false }},
			outcome: workflow.Wait, reason: "IssuerCertificateMissing"},
		"an issuer on the new anchor is done": {opts: []stateOpt{bundlePods(2, 2), auto, issuer(p.newIssuer)}, outcome: workflow.Done, reason: "IssuerRenewed"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := rotatingState(p, tc.opts...)
			d := observeIssuerRenewal(s, tc.token)
			if d.Outcome != tc.outcome || d.Reason != tc.reason {
				t.Fatalf("got %v %s (%s), want %v %s", d.Outcome, d.Reason, d.Message, tc.outcome, tc.reason)
			}
		})
	}
	s := rotatingState(p, bundlePods(2, 2), auto)
	if tok := issuerRenewalToken(s, "T"); tok != "T revision 3" {
		t.Fatalf("token %q", tok)
	}
}

// TestIssuerRenewalNamesTheCertificate: the blocking message renews the issuer's cert-manager
// Certificate in the Linkerd namespace, the command a plan gives, not the Secret it writes.
func TestIssuerRenewalNamesTheCertificate(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, bundlePods(2, 2))
	s.Config.LinkerdNamespace, s.Config.IssuerCertificate = "mesh", "issuer-cert"
	s.Issuer.Namespace, s.Issuer.Name = "mesh", "issuer-secret"
	d := observeIssuerRenewal(s, "")
	const want = "cmctl renew -n mesh issuer-cert"
	if d.Reason != ReasonWaitingForIssuerRenewal || !strings.HasSuffix(d.Message, ": "+want) {
		t.Fatalf("got %s: %q, want it to end with %q", d.Reason, d.Message, want)
	}
	if got := rotationSteps.named(StepWaitForIdentityIssuer).Manual(s); got != want {
		t.Fatalf("Manual = %q, want %q", got, want)
	}
}
