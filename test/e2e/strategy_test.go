package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// crossSignedValues are automationValues with spec.strategy CrossSigned.
var crossSignedValues = append(append([]string{}, automationValues...), "rotation.spec.strategy=CrossSigned")

// TestCrossSignedRotation rotates hands-off with spec.strategy CrossSigned, as the shipped
// manifests/cert-manager/linkerd-pki-cross-signed.yaml sets cert-manager up: the trust anchor's
// Certificate re-issued by the CA ClusterIssuer over its own Secret, so that the real
// cert-manager signs the new anchor with the old anchor's key and puts it into the identity
// issuer's chain. Proxies refresh by themselves (identity's issuanceLifetime is a minute here), so
// every workload restarts once; the default strategy, back onto the self-signed issuer, restarts
// each twice in the same test. The oracle, verifying as rustls-webpki does, watches throughout.
func TestCrossSignedRotation(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ChartSet: crossSignedValues, IssuanceLifetime: time.Minute},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	t.Cleanup(func() { e.restoreDefaults(c) })

	t.Run("OneRestartPerWorkload", func(t *testing.T) {
		e := *e
		e.T = t
		e.Mesh.ResetRolloutStats()
		since := time.Now()
		bridged := e.watchBridge()
		oldAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
		e.ApplyAnchorCertificate(AnchorManifest(v1alpha1.StrategyCrossSigned))
		newAnchor := e.WaitAnchorRenewed(oldAnchor)
		if !steps.SignedBy(newAnchor, oldAnchor) {
			t.Fatalf("cert-manager did not sign the new anchor %s with the old one %s", steps.Fingerprint(newAnchor)[:12], steps.Fingerprint(oldAnchor)[:12])
		}
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 3*time.Minute, "the cross-signed rotation renewing workload certificates",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				return tar.Status.Phase == v1alpha1.PhaseRenewingWorkloadCerts && tar.Status.Checkpoint != nil &&
					tar.Status.Checkpoint.Strategy == v1alpha1.StrategyCrossSigned && tar.Status.WorkloadCertificateRefreshInterval == nil
			}); err != nil {
			t.Fatal(err)
		}
		if stats := e.Mesh.RolloutStats(); len(stats.Restarts) != 0 {
			t.Errorf("workloads restarted before the trust bundle was reduced: %v", stats.Restarts)
		}
		e.waitSyncedOn(newAnchor, 8*time.Minute)
		if !bridged() {
			t.Error("the oracle never saw two issuer chains live among pods with one set of roots: the bridge was not exercised")
		}
		e.checkRestarts(1, "the reduced bundle only")
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
		t.Logf("oracle: %+v", e.Mesh.Oracle().Status())
	})
	if t.Failed() {
		return
	}

	// A cross-signed round superseded after its reduction, with automatic restarts: B -> B2 is
	// held at its one restart by a maintenance window that is closed, and the anchor renewed
	// again there (B3, signed by B2). The round ends on [B2] without its restart, so every pod,
	// injected with [B], is behind the next round's bundle, which stays [B2]; that round restarts
	// them at propagate-trust-roots once the window is lifted — the operator, not the user — and
	// its own final restart follows: twice each, no violation (steps
	// TestCrossSignedSupersededAfterReduction drives the same case through the engine).
	t.Run("SupersededAfterReductionRestartsAutomatically", func(t *testing.T) {
		e := *e
		e.T = t
		closed := time.Now().UTC().Add(6 * time.Hour)
		window := fmt.Sprintf(`{"spec":{"dataPlaneRestart":{"maintenanceWindows":[{"start":%q,"end":%q}]}}}`, closed.Format("15:04"), closed.Add(time.Hour).Format("15:04"))
		if err := e.patchSpec(ctx, window); err != nil {
			t.Fatal(err)
		}
		e.Mesh.ResetRolloutStats()
		since := time.Now()
		b2 := e.Renew("cert-manager", "linkerd-trust-anchor")
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 6*time.Minute, "the cross-signed round reduced, its restart held by the window",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				cp := tar.Status.Checkpoint
				return cp != nil && cp.Rotation == steps.Fingerprint(b2) && cp.Strategy == v1alpha1.StrategyCrossSigned &&
					cp.Step == steps.StepRemoveOldTrustRoots && strings.Contains(tar.Status.BlockingMessage, "the next maintenance window opens at")
			}); err != nil {
			t.Fatal(err)
		}
		if stats := e.Mesh.RolloutStats(); len(stats.Restarts) != 0 {
			t.Fatalf("workloads restarted before the maintenance window opened: %v", stats.Restarts)
		}
		b3 := e.Renew("cert-manager", "linkerd-trust-anchor")
		if !steps.SignedBy(b3, b2) {
			t.Fatalf("cert-manager did not sign the newer anchor %s with %s", steps.Fingerprint(b3)[:12], steps.Fingerprint(b2)[:12])
		}
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the next round restarting the pods left behind",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				cp := tar.Status.Checkpoint
				return cp != nil && cp.Rotation == steps.Fingerprint(b3) && cp.Strategy == v1alpha1.StrategyCrossSigned &&
					cp.Step == steps.StepPropagateTrustRoots && strings.Contains(tar.Status.BlockingMessage, "the next maintenance window opens at")
			}); err != nil {
			t.Fatal(err)
		}
		if err := e.patchSpec(ctx, `{"spec":{"dataPlaneRestart":{"maintenanceWindows":null}}}`); err != nil {
			t.Fatal(err)
		}
		e.waitSyncedOn(b3, 8*time.Minute)
		e.checkRestarts(2, "the pods the superseded round left behind, then the reduced bundle")
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
		e.checkBridgeDeadline(b3)
	})
	if t.Failed() {
		return
	}

	// Back to the default strategy and a self-signed anchor, as the tests after this one expect:
	// a standard rotation, whose restarts are counted against the cross-signed one's. It starts
	// as a cross-signed rotation (B -> B2, B2 signed by B), held before its issuer switch by an
	// issuer renewal left to the user, and superseded there by the self-signed renewal C: no
	// issuer under C can present a chain that pods trusting only B accept, so the operator goes on
	// with the standard strategy (the bundle expanded to [C, B] and the data plane restarted
	// before the issuer switch) instead of passing over the expansion, and the superseded round
	// restarted nothing, so each workload restarts twice all told.
	t.Run("StandardRestartsTwice", func(t *testing.T) {
		e := *e
		e.T = t
		if err := e.patchSpec(ctx, `{"spec":{"identityIssuerRenewal":"Manual"}}`); err != nil {
			t.Fatal(err)
		}
		e.Mesh.ResetRolloutStats()
		since := time.Now()
		crossAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the cross-signed rotation waiting for the issuer's renewal",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				cp := tar.Status.Checkpoint
				return cp != nil && cp.Rotation == steps.Fingerprint(crossAnchor) && cp.Strategy == v1alpha1.StrategyCrossSigned &&
					cp.Step == steps.StepWaitForIdentityIssuer
			}); err != nil {
			t.Fatal(err)
		}
		e.ApplyAnchorCertificate(AnchorManifest(v1alpha1.StrategyStandard))
		newAnchor := e.WaitAnchorRenewed(crossAnchor)
		if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the superseded rotation going on as a standard one",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				cp := tar.Status.Checkpoint
				return cp != nil && cp.Rotation == steps.Fingerprint(newAnchor) && cp.Strategy == v1alpha1.StrategyStandard
			}); err != nil {
			t.Fatal(err)
		}
		if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: automationValues}); err != nil {
			t.Fatal(err)
		}
		// Helm's three-way merge leaves the fields patched since its last release alone: set both.
		if err := e.patchSpec(ctx, `{"spec":{"strategy":"Standard","identityIssuerRenewal":"Automatic"}}`); err != nil {
			t.Fatal(err)
		}
		e.waitSyncedOn(newAnchor, 8*time.Minute)
		e.checkRestarts(2, "expanded bundle, reduced bundle")
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	// Between rotations, one pod's proxy is cut off identity (as a NetworkPolicy denying its
	// egress to identity would): it keeps its certificate and retries, as linkerd2-proxy does.
	// The operator's probes read it again once its proxy should have renewed and after its retry,
	// and report the pod before its certificate expires (identity's issuanceLifetime is a
	// minute here); once the proxy reaches identity again, the report clears.
	t.Run("ProxyCutOffFromIdentity", func(t *testing.T) {
		e := *e
		e.T = t
		checkProxiesRenew(&e)
	})
}

// checkProxiesRenew cuts one application pod's proxy off identity and checks that the operator
// reports it (condition WorkloadCertificatesExpiring naming the pod, its Event, the metrics,
// `linkerd trust check`) and clears the report once the proxy renews; the oracle's violations
// meanwhile, if the certificate expired before the proxy reached identity again, are that pod's
// alone.
func checkProxiesRenew(e *Env) {
	t := e.T
	since := time.Now()
	var cut meshsim.PodState
	for _, p := range e.Mesh.Pods() {
		if p.Component == "" && p.HasCertificate {
			cut = p
			break
		}
	}
	if cut.UID == "" {
		t.Fatal("no application pod with a certificate to cut off identity")
	}
	e.Mesh.CutIdentity(cut.UID, true)
	cutOff := true
	defer func() {
		if cutOff {
			e.Mesh.CutIdentity(cut.UID, false)
		}
	}()
	tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, 3*time.Minute, "WorkloadCertificatesExpiring=True naming "+cut.Name, func(tar *v1alpha1.TrustAnchorRotation) bool {
		c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionWorkloadCertificatesExpiring)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, cut.Namespace+"/"+cut.Name)
	})
	if err != nil {
		t.Fatalf("%v; the pod: %+v", err, e.Mesh.PodState(cut.UID))
	}
	seen := time.Now()
	c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionWorkloadCertificatesExpiring)
	st := e.Mesh.PodState(cut.UID)
	if st.Refreshes == 0 || st.Failures == 0 || !strings.Contains(c.Message, st.LeafNotAfter.UTC().Format(time.RFC3339)) {
		t.Errorf("condition %q: want the cut-off pod's certificate's expiry %s (its proxy: %d renewals, %d failures)", c.Message, st.LeafNotAfter.UTC().Format(time.RFC3339), st.Refreshes, st.Failures)
	}
	t.Logf("reported %s before the certificate expires (%s); the proxy failed %d renewal(s)", st.LeafNotAfter.Sub(seen).Round(100*time.Millisecond), st.LeafNotAfter.UTC().Format(time.RFC3339), st.Failures)
	e.checkEvents(since, app.ReasonWorkloadCertificatesExpiring)
	e.checkMetric("trust_rotation_workload_certificates_expiring_pods 1")
	if v, ok := e.metricValue("trust_rotation_workload_certificate_expiration_timestamp_seconds"); !ok || int64(v) > st.LeafNotAfter.Unix() {
		t.Errorf("trust_rotation_workload_certificate_expiration_timestamp_seconds = %v (%v), want at most the cut-off pod's %d", v, ok, st.LeafNotAfter.Unix())
	}
	if out, code := e.cliExit("check"); code == 0 || !strings.Contains(out, "× meshed pods' proxies renew their certificates") || !strings.Contains(out, cut.Name) {
		t.Errorf("linkerd-trust check with a proxy cut off identity: exit %d\n%s", code, out)
	}

	e.Mesh.CutIdentity(cut.UID, false)
	cutOff, reconnected := false, time.Now()
	if _, err := WaitRotation(e.Ctx, e.TARs, rotationName, 2*time.Minute, "WorkloadCertificatesExpiring=False", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return meta.IsStatusConditionFalse(tar.Status.Conditions, v1alpha1.ConditionWorkloadCertificatesExpiring)
	}); err != nil {
		t.Fatalf("%v; the pod: %+v", err, e.Mesh.PodState(cut.UID))
	}
	renewed := time.Now()
	t.Logf("report cleared %s after the proxy reached identity again; meanwhile, the cut-off pod: %s", renewed.Sub(reconnected).Round(100*time.Millisecond), e.Mesh.Oracle().Outage(since, renewed))
	e.checkMetric("trust_rotation_workload_certificates_expiring_pods 0")
	if out, code := e.cliExit("check"); code != 0 {
		t.Errorf("linkerd-trust check once the proxy renewed: exit %d\n%s", code, out)
	}
	for _, v := range e.Mesh.Oracle().ViolationsSince(since) {
		if v.Server.UID != cut.UID {
			t.Errorf("a violation not of the cut-off pod's certificate: %s", v)
		}
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(renewed); err != nil {
		t.Errorf("mTLS violations once the proxy renewed: %v", err)
	}
}

// watchBridge samples the oracle until the test ends and reports whether it ever judged a mesh
// whose every certified pod has the same roots (the old anchor's: the bundle is not expanded)
// while two issuer chains are live (the old issuer's, and the new issuer's with the bridge): new
// chains checked against pods that trust only the old anchor.
func (e *Env) watchBridge() func() bool {
	ctx, cancel := context.WithCancel(e.Ctx)
	e.T.Cleanup(cancel)
	seen := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if st := e.Mesh.Oracle().Status(); st.RootClasses == 1 && st.ChainClasses >= 2 && st.PodsWithoutCertificate == 0 {
				seen <- true
				return
			}
		}
	}()
	return func() bool {
		select {
		case <-seen:
			return true
		default:
			return false
		}
	}
}

// checkRestarts fails unless every application workload restarted want times since the mesh's
// rollout statistics were reset.
func (e *Env) checkRestarts(want int, why string) {
	e.T.Helper()
	stats := e.Mesh.RolloutStats()
	for _, w := range e.Apps {
		if n := stats.Restarts[w.String()]; n != want {
			e.T.Errorf("%s restarted %d times, want %d (%s)", w, n, want, why)
		}
	}
	e.T.Logf("data-plane restarts per workload: %v", stats.Restarts)
}
