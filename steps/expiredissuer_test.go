package steps

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestExpiredIssuerBetweenRotations drives detect-anchor-rotation with the issuer in the Secret
// expired and the anchor valid: Manual says what is down and the command; Automatic triggers
// cert-manager's renewal once — not again when the operator resumes from the checkpoint, nor
// while cert-manager does not re-issue — and once more for an issuer that expires later.
func TestExpiredIssuerBetweenRotations(t *testing.T) {
	p := newPKI(t)
	expired := newCert(t, "expired-issuer", p.newAnchor, true, time.Now().Add(-time.Minute))
	cert := func(s *State) {
		s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 7}
	}
	advance := func(t *testing.T, s *State, w *convergingWriter, cp workflow.Checkpoint) workflow.Result {
		t.Helper()
		wf, err := NewWorkflow(Rotation(w))
		if err != nil {
			t.Fatal(err)
		}
		res, err := wf.Advance(context.Background(), cp, s, func(context.Context, workflow.Checkpoint) error { return nil },
			func() string { return NewActStamp(s.Now) })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	detect := workflow.Checkpoint{Step: StepDetectAnchorRotation}

	t.Run("Manual", func(t *testing.T) {
		s := syncedOn(p, expired, cert, func(s *State) {
			s.LiveChains = []LiveChain{{Certs: []*x509.Certificate{expired.cert}, Pods: 3, Example: "app/web-1"}, {Certs: []*x509.Certificate{p.newIssuer.cert}, Pods: 5, Example: "app/db-0"}}
		})
		w := newConvergingWriter(s)
		res := advance(t, s, w, detect)
		if res.Acted || res.Decision.Reason != ReasonIdentityIssuerExpired {
			t.Fatalf("%+v, want a wait for %s", res.Decision, ReasonIdentityIssuerExpired)
		}
		for _, want := range []string{"expired at", "refuses every certificate request", "cmctl renew -n linkerd linkerd-identity-issuer", "without a restart",
			"the probes read 3 meshed pod(s) on an expired issuer, without a valid certificate now, e.g. app/web-1, and 5 on an issuer still valid"} {
			if !strings.Contains(res.Decision.Message, want) {
				t.Errorf("message does not say %q: %s", want, res.Decision.Message)
			}
		}
	})

	t.Run("Automatic", func(t *testing.T) {
		s := syncedOn(p, expired, cert, func(s *State) { s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic })
		w := newConvergingWriter(s)
		res := advance(t, s, w, detect)
		if !res.Acted || res.Decision.Reason != ReasonRenewingExpiredIssuer || len(w.renewed) != 1 {
			t.Fatalf("%+v, renewals %v: want the renewal triggered", res.Decision, w.renewed)
		}
		if rev, ok := tokenRevision(res.Checkpoint.Token); !ok || rev != 7 {
			t.Fatalf("token %q does not record the Certificate's revision 7", res.Checkpoint.Token)
		}
		// Resumed from the checkpoint: cert-manager issuing, then failing to: no second trigger.
		s.Now = s.Now.Add(time.Minute)
		if res = advance(t, s, w, res.Checkpoint); res.Acted || !strings.Contains(res.Decision.Message, "(Issuing)") {
			t.Fatalf("while cert-manager issues: %+v", res.Decision)
		}
		s.IssuerCertificate.Issuing = false
		res = advance(t, s, w, res.Checkpoint)
		if res.Acted || len(w.renewed) != 1 || !strings.Contains(res.Decision.Message, "has not re-issued it yet") {
			t.Fatalf("resumed: %+v, renewals %v", res.Decision, w.renewed)
		}
		s.IssuerCertificate.Revision = 8
		if res = advance(t, s, w, res.Checkpoint); res.Acted || !strings.Contains(res.Decision.Message, "was re-issued (revision 8)") {
			t.Fatalf("re-issued: %+v", res.Decision)
		}
		// The renewed issuer in the Secret: Synced. It expires in turn, weeks later: a new renewal.
		issuer(p.newIssuer)(s)
		if d := observeDetect(s, res.Checkpoint.Token); d.Reason != "TrustAnchorUnchanged" {
			t.Fatalf("with a valid issuer: %+v, want Synced", d)
		}
		s.Now = p.newIssuer.cert.NotAfter.Add(time.Hour)
		anchor(newCert(t, "long-anchor", nil, true, s.Now.Add(time.Hour)))(s)
		issuer(newCert(t, "later-expired", p.newAnchor, true, s.Now.Add(-time.Minute)))(s)
		if d := observeExpiredIssuer(s, res.Checkpoint.Token); d.Outcome != workflow.Act {
			t.Fatalf("another expiry, the old token in the checkpoint: %+v, want the renewal", d)
		}
	})
}
