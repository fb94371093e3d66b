package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// shortAnchorLifetime is the trust anchor's lifetime in TestRecoveryFromExpiredAnchor: long
// enough for a rotation onto it to complete, short enough to expire within the test.
const shortAnchorLifetime = 2 * time.Minute

// recoveryValues are the chart's values of a mesh whose operator restarts workloads and renews
// the issuer itself (the RBAC linkerd trust recover checks for), with proxies that refresh their
// certificates within seconds, as in the other hands-off tests, so that a rotation fits in the
// short anchor's lifetime. The restart budget is the chart's: recover raises it.
var recoveryValues = []string{
	"rotation.spec.workloadCertificateRefreshInterval=10s",
	"rotation.spec.dataPlaneRestart.policy=Automatic",
	"rotation.spec.identityIssuerRenewal=Automatic",
}

// TestRecoveryFromExpiredAnchor is case 3 of docs/design/recovery.md, end to end. The mesh is
// rotated onto a short-lived anchor, and cert-manager is stopped (its controller process) before
// it renews it. Once the anchor expires, linkerd-identity refuses every certificate request, but
// the proxies go on verifying each other — rustls-webpki ignores a trust anchor's validity, and
// cert-manager's CA issuer gave the identity issuer a lifetime of its own — and the operator says
// so (status, `check`). cert-manager back, the anchor is renewed and the operator recovers in the
// recovery's order: the issuer renewed onto the new anchor first, identity restarted onto it and
// the bundle [new, expired] before any other pod, then the whole data plane at once, and the
// reduction. Every pair verifies at the end; the oracle's outage figures before and during the
// recovery are printed (a pod not yet restarted refuses the new-anchor certificates of the
// restarted ones: the price no ordering avoids).
func TestRecoveryFromExpiredAnchor(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The shape of the tests around it on the shared cluster (see TestRotationHistory).
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1, ChartSet: recoveryValues},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	t.Cleanup(func() { e.restoreDefaults(c) })
	const cmNS, name = "cert-manager", pki.DefaultTrustAnchor
	certs := c.CertManager().CertmanagerV1().Certificates(cmNS)
	crt, err := certs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setLifetime := func(duration, renewBefore time.Duration) {
		t.Helper()
		p := fmt.Sprintf(`{"spec":{"duration":%q,"renewBefore":%q}}`, duration.String(), renewBefore.String())
		if _, err := certs.Patch(context.Background(), name, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var resume func() error
	t.Cleanup(func() {
		if resume != nil {
			if err := resume(); err != nil {
				t.Errorf("starting cert-manager again: %v", err)
			}
		}
		setLifetime(crt.Spec.Duration.Duration, crt.Spec.RenewBefore.Duration)
	})

	// A short-lived anchor, renewed by cert-manager only five seconds before it expires; the
	// operator rotates onto it, renewing the issuer from it, after which cert-manager is stopped.
	setLifetime(shortAnchorLifetime, 5*time.Second)
	start := time.Now()
	short := e.Renew(cmNS, name)
	if got := short.NotAfter.Sub(short.NotBefore); got > 2*shortAnchorLifetime {
		t.Fatalf("cert-manager issued an anchor valid for %s, want %s", got, shortAnchorLifetime)
	}
	e.waitIssuerSignedBy(short)
	if resume, err = c.Suspend(cluster.CertManagerController); err != nil {
		t.Fatal(err)
	}
	issuer := e.SecretCert("linkerd", "linkerd-identity-issuer")
	e.waitSyncedOn(short, time.Until(short.NotAfter))
	t.Logf("rotated onto the short-lived anchor %s in %s; it expires at %s, the identity issuer %s at %s",
		steps.ShortFingerprint(steps.Fingerprint(short)), time.Since(start).Round(time.Second), short.NotAfter.Format(time.RFC3339),
		steps.ShortFingerprint(steps.Fingerprint(issuer)), issuer.NotAfter.Format(time.RFC3339))
	oracle := e.Mesh.Oracle()
	if err := oracle.CheckNoViolationsSince(start); err != nil {
		t.Fatalf("mTLS violations during the rotation onto the short-lived anchor: %v", err)
	}

	// Expired: identity refuses to sign, the proxies still verify each other, and the operator
	// says what is down and what still works.
	expired := short.NotAfter
	tar, err := WaitRotation(ctx, e.TARs, rotationName, time.Until(expired)+time.Minute, "the expired anchor reported", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && strings.Contains(tar.Status.BlockingMessage, "trust anchor "+steps.ShortFingerprint(steps.Fingerprint(short))+" expired at")
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"linkerd-identity refuses every certificate request", "rustls-webpki ignores a trust anchor's validity", "cmctl renew -n cert-manager " + name} {
		if !strings.Contains(tar.Status.BlockingMessage, want) {
			t.Errorf("blockingMessage does not say %q: %s", want, tar.Status.BlockingMessage)
		}
	}
	if out, code := e.cliExit("check"); code == 0 || !strings.Contains(out, "expired") {
		t.Errorf("linkerd-trust check with an expired anchor: exit %d\n%s", code, out)
	}
	if err := oracle.CheckNoViolationsSince(start); err != nil {
		t.Errorf("a pair failed once the anchor expired, though no leaf did: %v", err)
	}

	// The user's recover: the facts, then the spec and the anchor's renewal (which cert-manager,
	// stopped, does not perform yet).
	meshed := len(e.Mesh.Pods())
	out := e.cli("recover", "--dry-run")
	for _, want := range []string{"Recovery (TrustAnchorExpired): trust anchor " + steps.ShortFingerprint(steps.Fingerprint(short)) + " expired at",
		"without a valid certificate now (expired at): 0 pod(s)", fmt.Sprintf("with one until (soonest first): %d pod(s)", meshed),
		"recover renews the trust anchor", "(restart-identity-first)", "step renew-issuer-first"} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --dry-run does not say %q\n%s", want, out)
		}
	}
	// How long, by the rotation onto the short-lived anchor above: its restart of the data plane.
	howLong := ""
	for _, l := range strings.Split(out, "\n") {
		if h, ok := strings.CutPrefix(strings.TrimSpace(l), "How long: "); ok {
			howLong = h
		}
	}
	if !strings.Contains(howLong, "This cluster's last completed rotation (to anchor "+steps.ShortFingerprint(steps.Fingerprint(short))) {
		t.Errorf("recover --dry-run does not measure how long by the rotation onto %s: %q", steps.ShortFingerprint(steps.Fingerprint(short)), howLong)
	}
	out = e.cli("recover", "--yes")
	for _, want := range []string{"Set on TrustAnchorRotation cluster: dataPlaneRestart: policy Automatic, maxConcurrent", "Triggered the renewal of Certificate cert-manager/" + name} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --yes does not say %q\n%s", want, out)
		}
	}

	// cert-manager back: the anchor renewed, and the recovery. Whether identity signs on the new
	// anchor is checked the moment the first application pod trusts it.
	setLifetime(crt.Spec.Duration.Duration, crt.Spec.RenewBefore.Duration)
	restartsBefore := e.Mesh.RolloutStats()
	back := time.Now()
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	resume = nil
	renewed := e.WaitAnchorRenewed(short)
	first := e.watchFirstRestartedPod(steps.Fingerprint(renewed))
	e.waitSyncedOn(renewed, 8*time.Minute)
	if err := oracle.WaitFor(ctx, func(s meshsim.OracleStatus) bool { return s.ActiveViolations == 0 && s.PodsWithoutCertificate == 0 }); err != nil {
		t.Fatal(err)
	}
	restoredAt := time.Now()

	seen := first()
	switch {
	case seen.pod == "":
		t.Error("no application pod was seen trusting the renewed anchor")
	case len(seen.identities) == 0:
		t.Errorf("when %s first trusted the renewed anchor, no identity pod was running", seen.pod)
	}
	for _, id := range seen.identities {
		if id.IssuerAnchorFingerprint != steps.Fingerprint(renewed) {
			t.Errorf("when %s first trusted the renewed anchor, identity pod %s signed with an issuer of %s, want the renewed anchor %s: identity must be restarted onto it first",
				seen.pod, id.Pod, steps.ShortFingerprint(id.IssuerAnchorFingerprint), steps.ShortFingerprint(steps.Fingerprint(renewed)))
		}
	}
	// The standard rotation's restarts: the expanded bundle, then the reduced one.
	after := e.Mesh.RolloutStats()
	for _, w := range e.Apps {
		if n := after.Restarts[w.String()] - restartsBefore.Restarts[w.String()]; n != 2 {
			t.Errorf("%s restarted %d times during the recovery, want 2", w, n)
		}
	}
	issuerNow := e.SecretCert("linkerd", "linkerd-identity-issuer")
	if !steps.SignedBy(issuerNow, renewed) {
		t.Errorf("the identity issuer %s is not signed by the renewed anchor", steps.ShortFingerprint(steps.Fingerprint(issuerNow)))
	}
	for _, s := range e.Mesh.Pods() {
		if !s.HasCertificate || !slices.Equal(s.RootFingerprints, []string{steps.Fingerprint(renewed)}) {
			t.Errorf("%s after the recovery: certificate %v, roots %v; want a certificate and the renewed anchor alone", s.PodRef, s.HasCertificate, s.RootFingerprints)
		}
	}
	down, recovering := oracle.Outage(expired, back), oracle.Outage(back, restoredAt)
	if down.Down != 0 {
		t.Errorf("pairs failing between the anchor's expiry and cert-manager's return: %s", down)
	}
	if rest := oracle.Outage(restoredAt, time.Time{}); rest.Down != 0 {
		t.Errorf("pairs failing after every pair verified again: %s", rest)
	}
	t.Logf("recover said beforehand: %s", howLong)
	t.Logf("anchor expired at %s; until cert-manager came back %s later: %s", expired.Format(time.RFC3339), back.Sub(expired).Round(time.Second), down)
	t.Logf("from cert-manager back to every pair verifying (%s): %s; the first pod on the renewed anchor %s after cert-manager came back, every pair verifying %s after that",
		restoredAt.Sub(back).Round(time.Second), recovering, seen.at.Sub(back).Round(time.Second), restoredAt.Sub(seen.at).Round(time.Second))
}

// waitIssuerSignedBy waits until the identity issuer in its Secret is signed by anchor.
func (e *Env) waitIssuerSignedBy(anchor *x509.Certificate) {
	e.T.Helper()
	if err := poll.Until(e.Ctx, 2*time.Minute, "the identity issuer signed by "+steps.ShortFingerprint(steps.Fingerprint(anchor)), func(context.Context) (bool, error) {
		return steps.SignedBy(e.SecretCert("linkerd", "linkerd-identity-issuer"), anchor), nil
	}); err != nil {
		e.T.Fatal(err)
	}
}

// firstOnAnchor is what watchFirstRestartedPod saw: the first application pod whose proxy
// trusts the anchor, when, and identity's pods at that moment.
type firstOnAnchor struct {
	pod        string
	at         time.Time
	identities []meshsim.IdentityState
}

// watchFirstRestartedPod watches the mesh for the first application pod whose proxy trusts the
// anchor of the given fingerprint and records identity's pods at that moment; the returned
// function stops the watch and returns what it saw.
func (e *Env) watchFirstRestartedPod(anchorFP string) func() firstOnAnchor {
	var (
		mu   sync.Mutex
		seen firstOnAnchor
	)
	ctx, cancel := context.WithCancel(e.Ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, s := range e.Mesh.Pods() {
				if s.Component == "" && slices.Contains(s.RootFingerprints, anchorFP) {
					mu.Lock()
					seen = firstOnAnchor{pod: s.PodRef.String(), at: time.Now(), identities: e.Mesh.Identities()}
					mu.Unlock()
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() firstOnAnchor {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}
