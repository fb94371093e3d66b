package steps

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestExpiredAnchor: the anchor the mesh trusts has expired. Not renewed, the operator says what
// is down and what still works; renewed, the rotation starts (in the recovery's order, see
// TestRecoveryOrder).
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

	t.Run("Renewed", func(t *testing.T) {
		s := rotatingState(p, anchor(p.newAnchor), previous(expired), issuer(underExpired), bundleOf(expired), identityPods(1, "linkerd-identity-a"))
		if d := observeDetect(s, ""); d.Outcome != workflow.Done || d.Reason != "TrustAnchorRenewed" {
			t.Fatalf("%+v, want the rotation to start", d)
		}
	})

	t.Run("NotExpired", func(t *testing.T) {
		s := rotatingState(p, anchor(p.newAnchor), previous(p.oldAnchor), issuer(p.oldIssuer), bundleOf(p.oldAnchor), identityPods(1, "linkerd-identity-a"))
		if d := observeDetect(s, ""); d.Reason != "TrustAnchorRenewed" {
			t.Fatalf("%+v, want the standard rotation", d)
		}
		d := observeRenewIssuerFirst(s, "")
		if d.Outcome != workflow.Done || d.Reason != ReasonPreviousAnchorValid {
			t.Fatalf("renew-issuer-first: %+v, want done at once", d)
		}
		if got, want := d.RecheckAt, p.oldAnchor.cert.NotAfter.Add(time.Second); !got.Equal(want) {
			t.Errorf("recheck at %s, want the anchor's expiry %s", got, want)
		}
	})
}

// TestRecoveryOrder drives a rotation away from an expired anchor over the simulated cluster: the
// issuer is renewed onto the new anchor before anything is written, identity is restarted onto
// it and the bundle [new, expired] before any other pod, and from there the standard order runs
// to the end with the restarts of a standard rotation — no condition saying the issuer or
// identity moved out of order, for here that is the order.
func TestRecoveryOrder(t *testing.T) {
	p := newPKI(t)
	expired := newCert(t, "expired-anchor", nil, true, time.Now().Add(-time.Minute))
	underExpired := newCert(t, "issuer-under-expired", expired, true, time.Now().Add(-time.Minute))
	s := rotatingState(p, anchor(p.newAnchor), previous(expired), issuer(underExpired), bundleOf(expired), identityPods(1, "linkerd-identity-a"))
	s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
	s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 3}
	s.TrustBundle = Convergence{Converged: 0, Target: 4}
	s.Certificates = Convergence{Converged: 0, Target: 4}
	w, _, advance := driveRotation(t, s)
	ordered := NewOrdered(Rotation(w))
	until := func(step string) workflow.Result {
		t.Helper()
		for range 20 {
			if res := advance(); !res.Acted {
				if res.Checkpoint.Step != step {
					t.Fatalf("stopped at %s (%s: %s), want %s", res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message, step)
				}
				if pods := s.IdentityRestartedEarly(ordered, step); len(pods) > 0 {
					t.Errorf("at %s: identity reported restarted early (%v), though the recovery restarts it first", step, pods)
				}
				return res
			}
		}
		t.Fatalf("no progress towards %s", step)
		return workflow.Result{}
	}

	// The issuer first: renewed, nothing else written.
	res := until(StepRenewIssuerFirst)
	if res.Decision.Reason != "IssuerRenewing" || len(w.renewed) != 1 || len(w.log) != 0 {
		t.Fatalf("%+v; renewed %v, writes %v: want the issuer's renewal alone", res.Decision, w.renewed, w.log)
	}
	// cert-manager re-issues it from the renewed anchor.
	s.IssuerCertificate.Issuing, s.IssuerCertificate.Revision = false, 4
	issuer(p.newIssuer)(s)

	// The bundle [new, expired], identity onto it, then the rest of the control plane.
	until(StepPropagateTrustRoots)
	exp, nw := ShortFingerprint(Fingerprint(expired.cert)), ShortFingerprint(Fingerprint(p.newAnchor.cert))
	want := []string{
		"bundle [" + nw + ", " + exp + "]",
		"restart linkerd-identity on [" + nw + ", " + exp + "]",
		"restart linkerd-destination on [" + nw + ", " + exp + "]",
		"restart linkerd-proxy-injector on [" + nw + ", " + exp + "]",
	}
	if got := strings.Join(w.log, "; "); got != strings.Join(want, "; ") {
		t.Fatalf("writes\n %s\nwant\n %s", got, strings.Join(want, "; "))
	}
	st := Project(ordered, v1alpha1.TrustAnchorRotationStatus{}, s.Spec, 1, s, workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepPropagateTrustRoots}, Phase: string(v1alpha1.PhasePropagatingTrustRoots)}, s.Now)
	if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation) {
		t.Error("OutOfOrderIssuerRotation reported: in the recovery the issuer moves first by design")
	}

	// The data plane converges; the standard order finds identity and the issuer done.
	s.TrustBundle = Convergence{Converged: 4, Target: 4}
	until(StepRenewWorkloadCertificates)
	if w.restarts["linkerd-identity"] != 2 || len(w.renewed) != 1 {
		t.Fatalf("identity restarted %d time(s), issuer renewed %v: want the recovery's restart and restart-identity-on-new-issuer's, one renewal", w.restarts["linkerd-identity"], w.renewed)
	}
	s.Certificates = Convergence{Converged: 4, Target: 4}
	until(StepRemoveOldTrustRoots)
	s.TrustBundle = Convergence{Converged: 4, Target: 4}
	if res := until(StepDetectAnchorRotation); !res.Completed {
		t.Fatalf("the recovery did not complete: %+v", res)
	}
	for _, n := range []string{"linkerd-identity", "linkerd-destination", "linkerd-proxy-injector"} {
		if w.restarts[n] != 3 {
			t.Errorf("%s restarted %d times, want 3, as in a standard rotation", n, w.restarts[n])
		}
	}
	if s.Bundle.Data != RenderBundle(p.newAnchor.cert) {
		t.Error("the bundle was not reduced to the new anchor")
	}
}

// TestRenewIssuerFirst: by hand, the step waits with the command; automatic, it triggers the
// renewal once per issuance, and once more when cert-manager re-issued the issuer from the
// expired anchor (it may renew the issuer before the anchor's Secret holds the new one).
func TestRenewIssuerFirst(t *testing.T) {
	p := newPKI(t)
	expired := newCert(t, "expired-anchor", nil, true, time.Now().Add(-time.Minute))
	underExpired := newCert(t, "issuer-under-expired", expired, true, time.Now().Add(-time.Minute))
	s := rotatingState(p, anchor(p.newAnchor), previous(expired), issuer(underExpired), bundleOf(expired))
	s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 3}

	d := observeRenewIssuerFirst(s, "")
	if d.Outcome != workflow.Wait || d.Reason != ReasonIssuerFirstNeeded || !strings.Contains(d.Message, "cmctl renew -n linkerd linkerd-identity-issuer") {
		t.Fatalf("by hand: %+v, want a wait naming the command", d)
	}

	s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
	if d := observeRenewIssuerFirst(s, ""); d.Outcome != workflow.Act || d.Reason != ReasonRenewingIssuerFirst {
		t.Fatalf("automatic: %+v, want the renewal", d)
	}
	stamp := NewActStamp(s.Now.Add(-10 * time.Second))
	token := renewIssuerFirstToken(s, stamp)
	if d := observeRenewIssuerFirst(s, token); d.Outcome != workflow.Wait {
		t.Fatalf("triggered, not re-issued yet: %+v, want a wait", d)
	}
	// Re-issued, but the Secret still shows the issuer from before the act: wait for it.
	s.IssuerCertificate.Revision = 4
	if d := observeRenewIssuerFirst(s, token); d.Outcome != workflow.Wait || d.Reason != "IssuerRenewed" {
		t.Fatalf("re-issued, Secret not yet seen: %+v, want a wait for the Secret", d)
	}
	// The Secret holds the re-issued issuer, still from the expired anchor: once more.
	reissued := newCert(t, "issuer-reissued-under-expired", expired, true, time.Now().Add(time.Hour))
	reissued.cert.NotBefore = s.Now // issued after the act (cert-manager does not backdate)
	issuer(reissued)(s)
	if d := observeRenewIssuerFirst(s, token); d.Outcome != workflow.Act {
		t.Fatalf("re-issued from the expired anchor: %+v, want the renewal once more", d)
	}
	if again := renewIssuerFirstToken(s, token); again == token || !strings.HasSuffix(again, " 4") {
		t.Errorf("token for the second renewal %q (first %q): want a new one recording revision 4", again, token)
	}
	// From the new anchor: done.
	issuer(p.newIssuer)(s)
	if d := observeRenewIssuerFirst(s, token); d.Outcome != workflow.Done {
		t.Fatalf("issuer on the new anchor: %+v, want done", d)
	}
}

// TestRecoveryUnderCrossSignedSpec: a rotation away from an expired anchor starts with the
// standard order whatever spec.strategy says: the cross-signed order keeps identity on the
// expired anchor, which it refuses. The checkpoint records Standard, and the issuer is renewed
// first as in any recovery.
func TestRecoveryUnderCrossSignedSpec(t *testing.T) {
	p := newPKI(t)
	expired := newCert(t, "expired-anchor", nil, true, time.Now().Add(-time.Minute))
	underExpired := newCert(t, "issuer-under-expired", expired, true, time.Now().Add(-time.Minute))
	s := rotatingState(p, anchor(p.newAnchor), previous(expired), issuer(underExpired), bundleOf(expired), identityPods(1, "linkerd-identity-a"))
	s.Spec.Strategy = v1alpha1.StrategyCrossSigned
	s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
	s.Rotation, s.Strategy = "", ""
	s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 3}
	if got := s.StartStrategy(s.Spec); got != v1alpha1.StrategyStandard {
		t.Fatalf("a rotation away from an expired anchor starts %s, want Standard", got)
	}
	w, _, advance := driveRotation(t, s)
	var res workflow.Result
	for range 20 {
		if res = advance(); !res.Acted {
			break
		}
	}
	if res.Checkpoint.Step != StepRenewIssuerFirst || res.Decision.Reason != "IssuerRenewing" || len(w.renewed) != 1 {
		t.Fatalf("stopped at %s (%s: %s), renewed %v: want the issuer renewed first", res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message, w.renewed)
	}
	st := Project(NewOrdered(Rotation(w)), v1alpha1.TrustAnchorRotationStatus{}, s.Spec, 1, s, res, s.Now)
	if st.Checkpoint == nil || st.Checkpoint.Strategy != v1alpha1.StrategyStandard {
		t.Errorf("checkpoint %+v: want the strategy Standard recorded", st.Checkpoint)
	}
}

// TestBridgedRecoveryOrder: under spec.strategy CrossSigned, with the renewed anchor signed by
// the expired one (cert-manager's CA issuer over the anchor's own Secret), the rotation away from
// the expired anchor records CrossSigned and takes the cross-signed order with the recovery's
// moves: the issuer first, the bundle [new, expired], identity restarted onto it; then no
// data-plane restart until the reduction, the pods on the expired anchor's bundle counting as
// converged (BundleHashes), and the one restart onto the new anchor alone at the end.
func TestBridgedRecoveryOrder(t *testing.T) {
	p := newPKI(t)
	expired := newCert(t, "expired-anchor", nil, true, time.Now().Add(-time.Minute))
	bridged := newCert(t, "bridged-anchor", expired, true, time.Now().Add(time.Hour))
	underExpired := newCert(t, "issuer-under-expired", expired, true, time.Now().Add(time.Hour))
	underBridged := newCert(t, "issuer-under-bridged", bridged, true, time.Now().Add(time.Hour))
	s := rotatingState(p, anchor(bridged), previous(expired), issuer(underExpired), bundleOf(expired), identityPods(1, "linkerd-identity-a"))
	s.Spec.Strategy = v1alpha1.StrategyCrossSigned
	s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
	s.Rotation, s.Strategy, s.RotationStart = "", "", time.Time{}
	s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 3}
	s.TrustBundle = Convergence{Converged: 4, Target: 4} // every pod on [expired]
	s.Certificates = Convergence{Converged: 0, Target: 4}
	if got := s.StartStrategy(s.Spec); got != v1alpha1.StrategyCrossSigned {
		t.Fatalf("a cross-signed spec with the renewed anchor signed by the expired one starts %s, want CrossSigned", got)
	}
	if !s.BridgedRecovery() {
		t.Fatal("not a bridged recovery")
	}
	s.Rotation, s.Strategy, s.RotationStart = Fingerprint(bridged.cert), v1alpha1.StrategyCrossSigned, s.Now
	onExpired := BundleHash(RenderBundle(expired.cert))
	if hashes := s.BundleHashes(); len(hashes) != 3 || hashes[0] != BundleHash(RenderBundle(bridged.cert, expired.cert)) || !slices.Contains(hashes, onExpired) ||
		!slices.Contains(hashes, BundleHash(strings.TrimSuffix(RenderBundle(expired.cert), "\n"))) {
		t.Fatalf("BundleHashes = %v: want the expanded bundle's, then the expired anchor's as the operator and Linkerd's chart render it", hashes)
	}
	w, _, advance := driveRotation(t, s)
	until := func(step string) workflow.Result {
		t.Helper()
		for range 30 {
			if res := advance(); !res.Acted {
				if res.Checkpoint.Step != step {
					t.Fatalf("stopped at %s (%s: %s), want %s", res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message, step)
				}
				return res
			}
		}
		t.Fatalf("no progress towards %s", step)
		return workflow.Result{}
	}

	until(StepRenewIssuerFirst)
	if len(w.renewed) != 1 || len(w.log) != 0 {
		t.Fatalf("renewed %v, writes %v: want the issuer's renewal alone", w.renewed, w.log)
	}
	s.IssuerCertificate.Issuing, s.IssuerCertificate.Revision = false, 4
	issuer(underBridged)(s)
	s.Issuer.Chain = []*x509.Certificate{bridged.cert} // the CA issuer's chain carries the bridge

	// The bundle [new, expired] and identity onto it; nothing else restarts: the proxies move
	// onto the new issuer by their own refresh.
	res := until(StepRenewWorkloadCertificates)
	exp, nw := ShortFingerprint(Fingerprint(expired.cert)), ShortFingerprint(Fingerprint(bridged.cert))
	if got, want := w.log[:2], []string{"bundle [" + nw + ", " + exp + "]", "restart linkerd-identity on [" + nw + ", " + exp + "]"}; !slices.Equal(got, want) {
		t.Fatalf("first writes %v, want %v", got, want)
	}
	for _, l := range w.log {
		if strings.HasPrefix(l, "restart ") && !strings.HasPrefix(l, "restart linkerd-") || strings.HasPrefix(l, "evict") {
			t.Errorf("data plane touched before the reduction: %s", l)
		}
	}
	if !strings.Contains(res.Decision.Message, "proxies refresh onto the new issuer by themselves") {
		t.Errorf("renew-workload-certificates: %s; want the cross-signed wait for the proxies' own refresh", res.Decision.Message)
	}

	s.Certificates = Convergence{Converged: 4, Target: 4}
	until(StepRemoveOldTrustRoots)
	if s.Bundle.Data != RenderBundle(bridged.cert) {
		t.Errorf("bundle %s after the reduction, want the new anchor alone", fingerprints(s.Bundle.Certs))
	}
	if hashes := s.BundleHashes(); slices.Contains(hashes, onExpired) {
		t.Errorf("after the reduction the pods on the expired anchor still count as converged: %v", hashes)
	}
}
