package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
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

	// Back to the default strategy and a self-signed anchor, as the tests after this one expect:
	// a standard rotation, whose restarts are counted against the cross-signed one's.
	t.Run("StandardRestartsTwice", func(t *testing.T) {
		e := *e
		e.T = t
		if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: automationValues}); err != nil {
			t.Fatal(err)
		}
		if err := e.patchSpec(ctx, `{"spec":{"strategy":"Standard"}}`); err != nil {
			t.Fatal(err)
		}
		e.Mesh.ResetRolloutStats()
		since := time.Now()
		oldAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
		e.ApplyAnchorCertificate(AnchorManifest(v1alpha1.StrategyStandard))
		newAnchor := e.WaitAnchorRenewed(oldAnchor)
		e.waitSyncedOn(newAnchor, 8*time.Minute)
		e.checkRestarts(2, "expanded bundle, reduced bundle")
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
	})
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
