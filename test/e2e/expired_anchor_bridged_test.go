package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// bridgedAnchorLifetime is the self-signed trust anchor's lifetime in
// TestBridgedRecoveryFromExpiredAnchor: long enough for a standard rotation onto it, short
// enough to expire within the test.
const bridgedAnchorLifetime = 90 * time.Second

// bridgedIssuance is identity's workload certificate lifetime there: every leaf outlives the
// anchor's expiry by more than the recovery needs to get identity signing again (a leaf issued
// just before the expiry refreshes at 70 % of it and, refused, retries as linkerd2-proxy does),
// and the proxies move onto the new issuer by their own refresh within 70 % of it.
const bridgedIssuance = 3 * time.Minute

// TestBridgedRecoveryFromExpiredAnchor is case 3 of docs/design/recovery.md in the cross-signed
// order. The mesh runs on a self-signed anchor, as linkerd-pki.yaml sets it up, which expires
// while cert-manager is stopped; the proxies keep verifying each other (rustls-webpki ignores the
// anchor's validity, and the identity issuer outlives it). The user runs recover --cross-signed,
// which points the anchor's Certificate at the CA issuer over its own Secret (as
// linkerd-pki-cross-signed.yaml issues it) and sets spec.strategy CrossSigned: cert-manager,
// back, signs the new anchor with the expired one's key — neither recover nor the operator reads
// it — and the operator recovers with the
// renewed issuer's chain as the bridge: identity restarted first onto [new, expired], the proxies
// moved onto the new issuer by their own refresh, one data-plane restart after the reduction.
// The operator is killed before and after every act of the recovery in turn and resumes from
// its checkpoint each time. The oracle sees no pair fail at any moment: not at the expiry, not during
// the recovery; no act is repeated.
func TestBridgedRecoveryFromExpiredAnchor(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ChartSet: recoveryValues, IssuanceLifetime: bridgedIssuance},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	const cmNS, name = "cert-manager", pki.DefaultTrustAnchor
	certs := c.CertManager().CertmanagerV1().Certificates(cmNS)
	var (
		resume func() error
		err    error
	)
	t.Cleanup(func() {
		if resume != nil {
			if err := resume(); err != nil {
				t.Errorf("starting cert-manager again: %v", err)
			}
		}
		// Back to the self-signed anchor of linkerd-pki.yaml (its lifetime too) that the other
		// tests expect, by a standard rotation.
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		back := *e
		back.Ctx = ctx
		// The operators the recovery ran are stopped by now (their cleanups came later, so ran
		// first): one more runs the rotation back.
		rel := e.Release
		op := StartOperatorWithEnv(t, []string{"POD_NAMESPACE=" + rel.Namespace}, rel.Kubeconfig, append(append([]string{}, rel.OperatorArgs...), "--leader-elect=false")...)
		defer op.Stop()
		if err := back.patchSpec(ctx, `{"spec":{"strategy":"Standard"}}`); err != nil {
			t.Error(err)
		}
		old := back.SecretCert(cmNS, name)
		back.ApplyAnchorCertificate(AnchorManifest(v1alpha1.StrategyStandard))
		back.waitSyncedOn(back.WaitAnchorRenewed(old), 5*time.Minute)
		back.restoreDefaults(c)
	})

	// The standard setup, a short-lived self-signed anchor: the operator rotates onto it, then
	// cert-manager is stopped before it renews it.
	p := fmt.Sprintf(`{"spec":{"duration":%q,"renewBefore":"5s"}}`, bridgedAnchorLifetime.String())
	if _, err := certs.Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	short := e.Renew(cmNS, name)
	e.waitIssuerSignedBy(short)
	if resume, err = c.Suspend(cluster.CertManagerController); err != nil {
		t.Fatal(err)
	}
	e.waitSyncedOn(short, time.Until(short.NotAfter))
	t.Logf("rotated onto the short-lived self-signed anchor %s in %s; it expires at %s",
		steps.ShortFingerprint(steps.Fingerprint(short)), time.Since(start).Round(time.Second), short.NotAfter.Format(time.RFC3339))
	oracle := e.Mesh.Oracle()
	if err := oracle.CheckNoViolationsSince(start); err != nil {
		t.Fatalf("mTLS violations during the rotation onto the short-lived anchor: %v", err)
	}
	expired := short.NotAfter
	if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Until(expired)+time.Minute, "the expired anchor reported", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return strings.Contains(tar.Status.BlockingMessage, "trust anchor "+steps.ShortFingerprint(steps.Fingerprint(short))+" expired at")
	}); err != nil {
		t.Fatal(err)
	}

	// The user's way out: recover says the standard order breaks pairs for a rollout and offers
	// --cross-signed, which points the anchor's Certificate at the CA issuer over its own Secret
	// and sets spec.strategy CrossSigned.
	out := e.cli("recover", "--dry-run")
	if want := "Without an outage: linkerd-trust recover --cross-signed"; !strings.Contains(out, want) {
		t.Errorf("recover --dry-run does not say %q\n%s", want, out)
	}
	out = e.cli("recover", "--cross-signed", "--dry-run")
	for _, want := range []string{"Recovery (TrustAnchorExpired)", "without a valid certificate now (expired at): 0 pod(s)",
		"recover points Certificate cert-manager/" + name + " at ClusterIssuer linkerd-identity-issuer, the CA issuer over its own Secret", "no workload restarts for it",
		"once, after the reduction", "How long: no pair that verifies now breaks"} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --cross-signed --dry-run does not say %q\n%s", want, out)
		}
	}
	if got := e.AnchorIssuedFor(); got != v1alpha1.StrategyStandard {
		t.Fatalf("--dry-run changed the anchor's Certificate: issued for %s", got)
	}
	out = e.cli("recover", "--cross-signed", "--yes")
	if !strings.Contains(out, "Pointed Certificate cert-manager/"+name+" at ClusterIssuer linkerd-identity-issuer") || strings.Contains(out, "maxConcurrent") {
		t.Errorf("recover --cross-signed --yes: want the anchor's Certificate switched and no restart budget lifted:\n%s", out)
	}
	if got := e.AnchorIssuedFor(); got != v1alpha1.StrategyCrossSigned {
		t.Fatalf("after recover --cross-signed the anchor's Certificate is issued for %s", got)
	}

	// cert-manager back: the new anchor, signed by the expired one, and the recovery, with the
	// operator killed at every point of the steps it acts at (bridgedKillPoints: the recovery's
	// own included), each next operator resuming from the checkpoint.
	e.Operator.Stop()
	k := newKillChain(e, bridgedKillPoints())
	e.Mesh.ResetRolloutStats()
	back := time.Now()
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	resume = nil
	renewed := e.WaitAnchorRenewed(short)
	if !steps.SignedBy(renewed, short) {
		t.Fatalf("cert-manager did not sign the renewed anchor %s with the expired one %s", steps.ShortFingerprint(steps.Fingerprint(renewed)), steps.ShortFingerprint(steps.Fingerprint(short)))
	}
	var strategy v1alpha1.RotationStrategy
	k.wait("the recovery under way", func(tar *v1alpha1.TrustAnchorRotation) bool {
		cp := tar.Status.Checkpoint
		if cp != nil && cp.Rotation == steps.Fingerprint(renewed) && cp.Step != steps.StepDetectAnchorRotation {
			strategy = cp.Strategy
			return true
		}
		return false
	})
	if strategy != v1alpha1.StrategyCrossSigned {
		t.Errorf("the recovery records strategy %q, want CrossSigned", strategy)
	}
	k.wait("identity signing on the renewed anchor", func(*v1alpha1.TrustAnchorRotation) bool {
		ids := e.Mesh.Identities()
		for _, id := range ids {
			if id.IssuerAnchorFingerprint != steps.Fingerprint(renewed) {
				return false
			}
		}
		return len(ids) > 0
	})
	if stats := e.Mesh.RolloutStats(); len(stats.Restarts) != 0 {
		t.Errorf("workloads restarted before identity signed on the renewed anchor: %v", stats.Restarts)
	}
	identityBack := time.Now()
	k.wait("Synced on the renewed anchor", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.PreviousAnchorFingerprint == steps.Fingerprint(renewed) &&
			stepOf(tar) == steps.StepDetectAnchorRotation && tar.Status.BlockingMessage == ""
	})
	e.Operator = k.finish()
	t.Logf("%d kill point(s): %d fired (%s), %d passed over without an act there and re-armed (%s)",
		len(k.points), len(k.fired), strings.Join(k.fired, ", "), len(k.passed), strings.Join(k.passed, ", "))
	for _, p := range k.points[:4] { // the recovery's own moves: each kill point fires
		if !slices.Contains(k.fired, p) {
			t.Errorf("kill point %s did not fire", p)
		}
	}
	// The control plane's last restart may still be fetching its certificates.
	if err := oracle.WaitFor(ctx, func(s meshsim.OracleStatus) bool { return s.ActiveViolations == 0 && s.PodsWithoutCertificate == 0 }); err != nil {
		t.Fatal(err)
	}
	done := time.Now()

	// No act repeated across the kills: the bridged order's restarts, once each.
	cp := e.Mesh.RolloutStats().ControlPlaneRestarts
	for name, want := range map[string]int{"linkerd-identity": 3, "linkerd-destination": 2, "linkerd-proxy-injector": 2} {
		if cp[name] != want {
			t.Errorf("Deployment %s restarted %d times during the recovery, want %d", name, cp[name], want)
		}
	}
	e.checkRestarts(1, "the reduced bundle only")
	for _, s := range e.Mesh.Pods() {
		if !s.HasCertificate || len(s.RootFingerprints) != 1 || s.RootFingerprints[0] != steps.Fingerprint(renewed) {
			t.Errorf("%s after the recovery: certificate %v, roots %v; want a certificate and the renewed anchor alone", s.PodRef, s.HasCertificate, s.RootFingerprints)
		}
	}
	if err := oracle.CheckNoViolationsSince(start); err != nil {
		t.Errorf("a pair failed: %v", err)
	}
	// The key of the expired anchor signed the new one; no operator read or logged it.
	var keys KeyMaterial
	if err := keys.Collect(ctx, c.Kube()); err != nil {
		t.Fatal(err)
	}
	for _, op := range k.ops {
		data, err := os.ReadFile(op.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, found := range keys.Find("operator log "+op.LogPath, data) {
			t.Error(found)
		}
	}
	t.Logf("anchor expired at %s; until cert-manager came back %s later: %s", expired.Format(time.RFC3339), back.Sub(expired).Round(time.Second), oracle.Outage(expired, back))
	t.Logf("from cert-manager back to identity signing on the renewed anchor %s, to Synced and every pod certified %s: %s",
		identityBack.Sub(back).Round(time.Second), done.Sub(back).Round(time.Second), oracle.Outage(back, done))
}

// bridgedKillPoints are the points the recovery's operators die at, in order: before and after
// each act of the steps that act in every bridged recovery (and after the first write of those
// that write several times), and the test's kill on entering renew-workload-certificates, where
// the proxies refresh by themselves. The chain arms one point at a time: a point at a step that
// may have nothing to do (renew-issuer-first, when cert-manager re-issued the issuer first) would
// let the operator carry the steps after it unkilled, so those are left out.
func bridgedKillPoints() []string {
	var out []string
	for _, name := range []string{steps.StepExpandTrustBundle, steps.StepRestartIdentityFirst, steps.StepRenewWorkloadCertificates,
		steps.StepRetirePreviousAnchor, steps.StepReduceTrustBundle, steps.StepRefreshControlPlaneReduced, steps.StepRemoveOldTrustRoots} {
		st, _ := steps.Facts().Named(name)
		if name == steps.StepRenewWorkloadCertificates {
			out = append(out, "enter:"+name)
			continue
		}
		out = append(out, "save:"+name)
		if st.WritesMany {
			out = append(out, "write:"+name)
		}
		out = append(out, "acted:"+name)
	}
	return out
}
