package steps

import (
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// TestExpiredAnchor: the anchor the mesh trusts has expired. Not renewed, the operator says what
// is down and what still works; renewed, it does not start the standard rotation — which would
// restart the proxies while identity cannot sign — until linkerd-identity runs on an issuer of
// the new anchor, and then does.
func TestExpiredAnchor(t *testing.T) {
	p := newPKI(t)
	expired := newCert(t, "expired-anchor", nil, true, time.Now().Add(-time.Minute))
	underExpired := newCert(t, "issuer-under-expired", expired, true, time.Now().Add(time.Hour))

	t.Run("NotRenewed", func(t *testing.T) {
		s := rotatingState(p, anchor(expired), previous(expired), issuer(underExpired), bundleOf(expired), identityPods(1, "linkerd-identity-a"))
		d := observeDetect(s, "")
		if d.Outcome != workflow.Wait || d.Reason != ReasonTrustAnchorExpired {
			t.Fatalf("%+v, want a wait for %s", d, ReasonTrustAnchorExpired)
		}
		for _, want := range []string{"expired at", "linkerd-identity refuses every certificate request and cannot restart",
			"rustls-webpki ignores a trust anchor's validity", "cmctl renew -n cert-manager linkerd-trust-anchor"} {
			if !strings.Contains(d.Message, want) {
				t.Errorf("message does not say %q: %s", want, d.Message)
			}
		}
	})

	t.Run("RenewedIssuerNot", func(t *testing.T) {
		s := rotatingState(p, anchor(p.newAnchor), previous(expired), issuer(underExpired), bundleOf(expired), identityPods(1, "linkerd-identity-a"))
		w, _, advance := driveRotation(t, s)
		res := advance()
		for res.Acted {
			res = advance() // bootstrap's repairs, none here
		}
		if res.Checkpoint.Step != StepDetectAnchorRotation || res.Decision.Reason != ReasonPreviousAnchorExpired {
			t.Fatalf("stopped at %s: %+v, want detect-anchor-rotation waiting for %s", res.Checkpoint.Step, res.Decision, ReasonPreviousAnchorExpired)
		}
		if len(w.restarts) != 0 || s.Bundle.Data != RenderBundle(expired.cert) {
			t.Errorf("wrote before identity runs on the new anchor: restarts %v, bundle changed %v", w.restarts, s.Bundle.Data != RenderBundle(expired.cert))
		}
		for _, want := range []string{"does not start", "cmctl renew -n linkerd linkerd-identity-issuer", "restart linkerd-identity"} {
			if !strings.Contains(res.Decision.Message, want) {
				t.Errorf("message does not say %q: %s", want, res.Decision.Message)
			}
		}
		// The issuer renewed from the new anchor and the bundle [new, expired] written, but
		// identity still runs from before: still waiting.
		issuer(p.newIssuer)(s)
		bundleOf(p.newAnchor, expired)(s)
		if d := observeDetect(s, ""); d.Reason != ReasonPreviousAnchorExpired {
			t.Fatalf("identity not restarted yet: %+v", d)
		}
		// Identity restarted onto them: the rotation starts.
		s.ControlPlane["linkerd-identity"] = Deployment{Namespace: "linkerd", Name: "linkerd-identity", Found: true, RolledOut: true}
		identityPod("linkerd-identity-b", -time.Minute, "")(s)
		if d := observeDetect(s, ""); d.Outcome != workflow.Done || d.Reason != "TrustAnchorRenewed" {
			t.Fatalf("identity on the new anchor's issuer: %+v, want the rotation to start", d)
		}
	})

	t.Run("NotExpired", func(t *testing.T) {
		s := rotatingState(p, anchor(p.newAnchor), previous(p.oldAnchor), issuer(p.oldIssuer), bundleOf(p.oldAnchor), identityPods(1, "linkerd-identity-a"))
		if d := observeDetect(s, ""); d.Reason != "TrustAnchorRenewed" {
			t.Fatalf("%+v, want the standard rotation", d)
		}
		if got, want := s.Recheck(), p.oldAnchor.cert.NotAfter.Add(time.Second); !got.Equal(want) {
			t.Errorf("recheck at %s, want the anchor's expiry %s", got, want)
		}
	})
}
