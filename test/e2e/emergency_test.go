package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestEmergencyRotationOnTheBed runs `linkerd trust rotate --emergency` as a user would after a
// key compromise. On the chart's defaults the operator may not restart workloads, so the command
// refuses, changing nothing, with the helm upgrade that grants it — the apiserver's own
// authorization answers its SubjectAccessReviews for the chart's ServiceAccount. Once the user
// ran it, the command prints what the rotation costs, lifts every wait and renews the anchor;
// the rotation completes with what the plan said: no pair of pods losing mTLS (the oracle), two
// restarts per workload; and inspect --history prints the post-incident summary.
func TestEmergencyRotationOnTheBed(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The shape of the tests around it on the shared cluster (see TestRotationHistory).
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	t.Cleanup(func() {
		e.restoreDefaults(c)
		if err := e.PatchSpec(context.Background(), `{"metadata":{"annotations":{"trust.linkerd.io/emergency-rotation":null}}}`); err != nil {
			t.Errorf("removing the emergency annotation: %v", err)
		}
	})
	compromised := e.SecretCert("cert-manager", "linkerd-trust-anchor")

	// The chart's defaults: no restart RBAC. Refused, nothing changed.
	out, code := e.cliExit("rotate", "--emergency", "--yes")
	for _, want := range []string{"pods that lose mTLS: none", "may not act on the spec this would set",
		"dataPlaneRestart.policy: Automatic needs it to patch deployments.apps in namespace", "--reuse-values --set rotation.spec.identityIssuerRenewal=Automatic --set rotation.spec.dataPlaneRestart.policy=Automatic",
		"nothing was changed"} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("rotate --emergency on the chart's defaults: exit %d, want it to say %q\n%s", code, want, out)
		}
	}
	if tar, err := e.TARs.Get(ctx, rotationName); err != nil {
		t.Fatal(err)
	} else if _, ok := tar.Annotations["trust.linkerd.io/emergency-rotation"]; ok || tar.Spec.DataPlaneRestart.Policy == v1alpha1.Automatic {
		t.Fatalf("the refused emergency rotation changed the TrustAnchorRotation: %v, %+v", tar.Annotations, tar.Spec.DataPlaneRestart)
	}
	if now := e.SecretCert("cert-manager", "linkerd-trust-anchor"); !now.Equal(compromised) {
		t.Fatal("the refused emergency rotation renewed the anchor")
	}

	// The user grants it, as the message says.
	if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: []string{"rotation.spec.dataPlaneRestart.policy=Automatic", "rotation.spec.identityIssuerRenewal=Automatic"}}); err != nil {
		t.Fatal(err)
	}
	// rotate starts nothing before the operator has acted on the spec the upgrade changed.
	if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the upgraded spec observed", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.ObservedGeneration == tar.Generation && tar.Spec.DataPlaneRestart.Policy == v1alpha1.Automatic
	}); err != nil {
		t.Fatal(err)
	}
	e.Mesh.ResetRolloutStats()
	start := time.Now()
	out = e.cli("rotate", "--emergency", "--yes")
	for _, want := range []string{"pods that lose mTLS: none", "dataPlaneRestart: policy Automatic, maxConcurrent", "workloadCertificateRefreshInterval: 10s",
		"every meshed workload (", "Triggered the renewal", "inspect --history prints the post-incident summary"} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate --emergency does not say %q\n%s", want, out)
		}
	}
	renewed := e.WaitAnchorRenewed(compromised)
	e.waitSyncedOn(renewed, 5*time.Minute)
	took := time.Since(start)

	// What the plan said: no pair lost mTLS, two restarts per workload.
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Errorf("mTLS violations during the emergency rotation: %v", err)
	}
	stats := e.Mesh.RolloutStats()
	for _, w := range e.Apps {
		if n := stats.Restarts[w.String()]; n != 2 {
			t.Errorf("%s restarted %d times, want 2 as the plan said (the expanded bundle, the reduced one)", w, n)
		}
	}
	for _, s := range e.Mesh.Pods() {
		for _, fp := range s.RootFingerprints {
			if fp == steps.Fingerprint(compromised) {
				t.Errorf("%s still trusts the compromised anchor", s.PodRef)
			}
		}
	}
	hist := e.cli("inspect", "--history")
	for _, want := range []string{"Emergency rotation away from the compromised trust anchor " + steps.ShortFingerprint(steps.Fingerprint(compromised)),
		"no pod trusts the compromised anchor: ", "outcome: Completed"} {
		if !strings.Contains(hist, want) {
			t.Errorf("inspect --history does not say %q\n%s", want, hist)
		}
	}
	t.Logf("emergency rotation: %s from the request to Synced; %d workloads restarted at most %d at once", took.Round(time.Second), len(stats.Restarts), stats.MaxConcurrent)

	// During a rotation held by a maintenance window that is closed: --emergency renews nothing,
	// lifts the window, and the rotation in progress goes on to Synced.
	closed := time.Now().UTC().Add(6 * time.Hour)
	if err := e.patchSpec(ctx, fmt.Sprintf(`{"spec":{"dataPlaneRestart":{"maintenanceWindows":[{"start":%q,"end":%q}]}}}`,
		closed.Format("15:04"), closed.Add(time.Hour).Format("15:04"))); err != nil {
		t.Fatal(err)
	}
	next := e.Renew("cert-manager", "linkerd-trust-anchor")
	if _, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the rotation held by the closed window", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Checkpoint != nil && tar.Status.Checkpoint.Rotation == steps.Fingerprint(next) &&
			strings.Contains(tar.Status.BlockingMessage, "the next maintenance window opens at")
	}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	out = e.cli("rotate", "--emergency", "--yes")
	for _, want := range []string{"Emergency: the rotation in progress away from the trust anchor " + steps.ShortFingerprint(steps.Fingerprint(renewed)),
		"its 1 maintenance window(s) removed", "goes on with every wait lifted; the trust anchor was not renewed again"} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate --emergency during a rotation does not say %q\n%s", want, out)
		}
	}
	e.waitSyncedOn(next, 5*time.Minute)
	if now := e.SecretCert("cert-manager", "linkerd-trust-anchor"); !now.Equal(next) {
		t.Errorf("rotate --emergency during a rotation renewed the anchor again")
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Errorf("mTLS violations during the rotation sped up: %v", err)
	}
	hist = e.cli("inspect", "--history")
	for _, want := range []string{"Emergency rotation away from the compromised trust anchor " + steps.ShortFingerprint(steps.Fingerprint(renewed)),
		"in progress at the request (its waits lifted then)", "no pod trusts the compromised anchor: ", "outcome: Completed"} {
		if !strings.Contains(hist, want) {
			t.Errorf("inspect --history after the emergency during a rotation does not say %q\n%s", want, hist)
		}
	}
	t.Logf("emergency during a rotation: %s from the request to Synced", time.Since(start).Round(time.Second))
}
