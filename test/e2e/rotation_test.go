package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

const rotationName = steps.DefaultRotationName

// TestRotation performs full rotations as a user following README's Rotate section would, with both charts
// installed by helm, the operator running out of cluster under the chart's ServiceAccount, and
// the oracle watching the whole mesh throughout: first in order, then with the issuer renewed
// right after the anchor. The mesh has both proxy layouts, as a cluster part-way through an
// upgrade to edge-26.5.2 has: the control plane and four Deployments run the proxy as a native
// sidecar, one Deployment's namespace opted out and runs it as a container. (The Deployments
// are those TestHandsOffRotation left on the shared cluster, plus one.) The control plane runs
// three replicas of each Deployment, as a production install does (controllerReplicas=3):
// identity is rolled, or scaled to 0 and back to three when the issuer was renewed early.
func TestRotation(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	// The operator runs under the chart's ServiceAccount: the rotation completing is the proof
	// that the chart's RBAC is sufficient.
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1, ControlPlaneReplicas: 3},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	e.RestoreControlPlaneOnCleanup()
	if n := e.ControlPlanePods(); n != 9 {
		t.Fatalf("the control plane runs %d meshed pods, want 3 replicas of each of its 3 Deployments", n)
	}
	start := time.Now()

	t.Run("InOrder", func(t *testing.T) {
		e := *e
		e.T = t
		replicas := e.watchIdentityReplicas()
		rotateInOrder(&e, issuerWhenAsked)
		e.checkIdentityReplicas(replicas(), []int32{3}) // rolled, never scaled
	})
	if t.Failed() {
		return
	}
	t.Run("IssuerRenewedRightAfterAnchor", func(t *testing.T) {
		e := *e
		e.T = t
		// restart-identity scales identity to 0 and, once none of its pods is left, back to 3:
		// the oracle sees no old identity pod beside a new one.
		replicas := e.watchIdentityReplicas()
		rotateInOrder(&e, issuerRightAfterAnchor)
		e.checkIdentityReplicas(replicas(), []int32{3, 0, 3})
	})
	t.Run("IssuerRenewedWhileNativeSidecarsLag", func(t *testing.T) {
		e := *e
		e.T = t
		rotateInOrder(&e, issuerAfterProxyContainersRestarted)
	})
	t.Run("ASecondTrustAnchorRotationIsIgnored", func(t *testing.T) {
		second := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: "second"}}
		if _, err := e.TARs.Create(ctx, second, "e2e"); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.TARs.Delete(context.Background(), "second") }()
		got, err := WaitRotation(ctx, e.TARs, "second", time.Minute, "TrustAnchorRotation second marked Ignored",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				return meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionIgnored)
			})
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionIgnored); !strings.Contains(c.Message, `"cluster"`) {
			t.Errorf("Ignored message %q does not name the driven rotation", c.Message)
		}
		// (status.phase reads Synced: the CRD's default.)
		if got.Status.Checkpoint != nil || got.Status.ActiveIssuerFingerprint != "" || got.Status.TrustBundle != nil {
			t.Errorf("the ignored object got a rotation status: %+v", got.Status)
		}
		cluster, err := e.TARs.Get(ctx, rotationName)
		if err != nil || cluster.Status.Phase != v1alpha1.PhaseSynced {
			t.Errorf("TrustAnchorRotation cluster: %v, phase %v", err, cluster.Status.Phase)
		}
	})
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Fatalf("mTLS violations during the rotations: %v", err)
	}
	t.Logf("oracle: %+v", e.Mesh.Oracle().Status())
}

// issuerRenewal is when a rotation's identity issuer is renewed.
type issuerRenewal int

const (
	// issuerWhenAsked: in WaitingForIdentityRotation, as the guide says.
	issuerWhenAsked issuerRenewal = iota
	// issuerRightAfterAnchor: before the data plane trusts the new anchor.
	issuerRightAfterAnchor
	// issuerAfterProxyContainersRestarted: once only the pods whose proxy is a container were
	// restarted, then a native-sidecar Deployment restarts. An operator blind to native sidecars
	// counts the first alone, restarts identity onto the expanded roots once they converge, and
	// identity then signs new-anchor certificates for pods that trust only the old anchor.
	issuerAfterProxyContainersRestarted
)

// rotateInOrder renews the anchor and walks the guide's steps, checking the status at each
// phase, with the identity issuer renewed when the guide says or earlier (issuerRenewal).
func rotateInOrder(e *Env, when issuerRenewal) { rotate(e, when, func(v1alpha1.Phase) {}) }

// rotate is rotateInOrder calling atPhase in each phase the rotation waits in for the user, and
// at its end (Synced), before the user acts.
func rotate(e *Env, when issuerRenewal, atPhase func(v1alpha1.Phase)) {
	t, ctx := e.T, e.Ctx
	oracleStart := time.Now()
	// The oracle judges the rotation however it ends: a step that fails may already have cost
	// the mesh its mTLS.
	defer func() {
		if err := e.Mesh.Oracle().CheckNoViolationsSince(oracleStart); err != nil {
			t.Errorf("mTLS violations: %v", err)
		}
	}()
	pods := e.MeshedPods()
	controlPlane := e.ControlPlanePods()
	apps := pods - controlPlane

	oldAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	if steps.Fingerprint(oldAnchor) == steps.Fingerprint(newAnchor) {
		t.Fatal("renewing the anchor did not change it")
	}
	earlyIssuer := when != issuerWhenAsked
	if when == issuerRightAfterAnchor {
		e.Renew("linkerd", "linkerd-identity-issuer")
	}

	// Step 1 of the guide: the operator expands the bundle, refreshes the control plane and
	// waits for the data plane.
	tar, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhasePropagatingTrustRoots, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	bundle := e.bundle()
	if want := steps.RenderBundle(newAnchor, oldAnchor); bundle != want {
		t.Fatalf("expanded bundle:\n%s\nwant new + old anchor:\n%s", bundle, want)
	}
	// Counts that are off fail the test but let the rotation go on, so that the oracle judges
	// what an operator that miscounts does to the mesh.
	if tb := tar.Status.TrustBundle; tb == nil || tb.TargetPods != int32(apps) || tb.Status != v1alpha1.Converging {
		t.Errorf("trustBundle = %+v, want %d target pods converging", tb, apps)
	}
	if !strings.Contains(tar.Status.BlockingMessage, "restart: app-") {
		t.Errorf("blockingMessage %q does not name the workloads to restart", tar.Status.BlockingMessage)
	}
	if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(oldAnchor) {
		t.Errorf("previousAnchorFingerprint = %s, want the old anchor %s", tar.Status.PreviousAnchorFingerprint, steps.Fingerprint(oldAnchor))
	}
	e.checkMetric("trust_rotation_phase{phase=\"PropagatingTrustRoots\"} 1")
	e.checkMetric(fmt.Sprintf("trust_rotation_trust_bundle_target_pods %d", apps))
	atPhase(v1alpha1.PhasePropagatingTrustRoots)
	checkConditions(t, tar, kstatus{ready: metav1.ConditionFalse, reconciling: metav1.ConditionTrue, stalled: metav1.ConditionFalse,
		reason: "PropagatingTrustRoots", message: "restart: app-"})

	if when == issuerAfterProxyContainersRestarted {
		e.restartProxyContainersThenRenewIssuer()
	}

	// Step 2: restart the data plane.
	e.RestartApps()
	if earlyIssuer {
		// The issuer is already on the new anchor: the operator restarts identity once the data
		// plane converged, and goes straight on to the certificates.
		tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRenewingWorkloadCerts, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation)
		if cond == nil || cond.Status != metav1.ConditionTrue {
			t.Fatalf("OutOfOrderIssuerRotation = %+v, want True", cond)
		}
	} else {
		tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseWaitingForIdentityRotation, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if tb := tar.Status.TrustBundle; tb.ConvergedPods != int32(apps) || tb.Status != v1alpha1.Converged {
			t.Errorf("trustBundle = %+v, want %d converged", tb, apps)
		}
		if !strings.Contains(tar.Status.BlockingMessage, "cmctl renew -n linkerd linkerd-identity-issuer") {
			t.Errorf("blockingMessage %q does not say how to renew the issuer", tar.Status.BlockingMessage)
		}
		atPhase(v1alpha1.PhaseWaitingForIdentityRotation)
		checkConditions(t, tar, kstatus{ready: metav1.ConditionFalse, reconciling: metav1.ConditionTrue, stalled: metav1.ConditionFalse,
			reason: "WaitingForIdentityRotation", message: "cmctl renew"})
		// Nobody renews the issuer within spec.stalledAfter.identityIssuerRenewal: the rotation
		// is Stalled on the renewal, for the spec's new generation; and no longer once the
		// threshold is back to its default.
		e.checkStalledAfter(`{"spec":{"stalledAfter":{"identityIssuerRenewal":"1s"}}}`, kstatus{ready: metav1.ConditionFalse,
			reconciling: metav1.ConditionTrue, stalled: metav1.ConditionTrue, reason: "WaitingForIdentityRotation",
			stalledReason: "WaitingForIssuerRenewal", message: "cmctl renew"})
		e.checkStalledAfter(`{"spec":{"stalledAfter":{"identityIssuerRenewal":"24h"}}}`, kstatus{ready: metav1.ConditionFalse,
			reconciling: metav1.ConditionTrue, stalled: metav1.ConditionFalse, reason: "WaitingForIdentityRotation", message: "cmctl renew"})
		// Step 3: renew the issuer.
		e.Renew("linkerd", "linkerd-identity-issuer")
		tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRenewingWorkloadCerts, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			t.Fatalf("OutOfOrderIssuerRotation = %+v, want False", cond)
		}
	}
	checkConditions(t, tar, kstatus{ready: metav1.ConditionFalse, reconciling: metav1.ConditionTrue, stalled: metav1.ConditionFalse,
		reason: "RenewingWorkloadCerts"})
	issuer := e.SecretCert("linkerd", "linkerd-identity-issuer")
	if tar.Status.ActiveIssuerFingerprint != steps.Fingerprint(issuer) {
		t.Errorf("activeIssuerFingerprint = %s, want %s", tar.Status.ActiveIssuerFingerprint, steps.Fingerprint(issuer))
	}
	if tar.Status.WorkloadCertificateRefreshInterval == nil || tar.Status.WorkloadCertificateRefreshInterval.Duration != 5*time.Minute {
		t.Errorf("workloadCertificateRefreshInterval = %v, want 5m", tar.Status.WorkloadCertificateRefreshInterval)
	}
	// The control plane moves onto the new issuer by itself; the workloads need a restart, so
	// the rotation waits in RenewingWorkloadCerts. The control-plane pods just replaced count
	// among its targets until the operator has seen them go: wait for the count to settle.
	tar, err = WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the control plane on the new issuer",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			wc := tar.Status.WorkloadCertificates
			return stepOf(tar) == steps.StepRenewWorkloadCertificates && wc != nil &&
				wc.ConvergedPods == int32(controlPlane) && wc.TargetPods == int32(pods)
		})
	if err != nil {
		t.Fatal(err)
	}
	if wc := tar.Status.WorkloadCertificates; wc.TargetPods != int32(pods) || wc.Status != v1alpha1.Converging {
		t.Errorf("workloadCertificates = %+v, want %d of %d converging", wc, controlPlane, pods)
	}
	e.checkMetric("trust_rotation_workload_certificate_refresh_interval_seconds 300")
	atPhase(v1alpha1.PhaseRenewingWorkloadCerts)

	// Step 3b: restart the data plane for new certificates.
	e.RestartApps()
	tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRemovingOldTrustRoots, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b := e.bundle(); b != steps.RenderBundle(newAnchor) {
		t.Fatalf("reduced bundle holds more than the new anchor:\n%s", b)
	}
	prev, err := e.Cluster.Kube().CoreV1().Secrets("linkerd").Get(ctx, "linkerd-previous-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(prev.Data) != 1 || string(prev.Data["tls.crt"]) != string(steps.EncodePEM(newAnchor)) {
		t.Fatalf("linkerd-previous-anchor holds keys %v; want only tls.crt with the new anchor", keys(prev.Data))
	}
	atPhase(v1alpha1.PhaseRemovingOldTrustRoots)

	// Step 4: the final data-plane restart.
	e.RestartApps()
	tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseSynced, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if tar.Status.BlockingMessage != "" || tar.Status.WorkloadCertificateRefreshInterval != nil {
		t.Errorf("Synced with blockingMessage %q, refresh interval %v", tar.Status.BlockingMessage, tar.Status.WorkloadCertificateRefreshInterval)
	}
	if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(newAnchor) {
		t.Errorf("previousAnchorFingerprint = %s, want the new anchor", tar.Status.PreviousAnchorFingerprint)
	}
	e.checkMetric("trust_rotation_phase{phase=\"Synced\"} 1")
	e.checkMetric("trust_rotation_workload_certificate_refresh_interval_seconds 0")
	// The counts published in Synced follow the pods the final restart started as the operator
	// reads them: they come to equal the mesh, every pod converged, without another change.
	tar, err = WaitRotation(ctx, e.TARs, rotationName, time.Minute, fmt.Sprintf("status counts of %d meshed pods, %d injected, all converged", pods, apps),
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			wc, tb := tar.Status.WorkloadCertificates, tar.Status.TrustBundle
			return wc != nil && tb != nil && wc.Status == v1alpha1.Converged && tb.Status == v1alpha1.Converged &&
				wc.ConvergedPods == int32(pods) && wc.TargetPods == int32(pods) && wc.NotProbedPods == 0 &&
				tb.ConvergedPods == int32(apps) && tb.TargetPods == int32(apps)
		})
	if err != nil {
		if tar != nil {
			t.Logf("trustBundle %+v, workloadCertificates %+v", tar.Status.TrustBundle, tar.Status.WorkloadCertificates)
		}
		t.Fatal(err)
	}
	atPhase(v1alpha1.PhaseSynced)
	// What kubectl wait --for=condition=Ready tar/cluster waits for: Ready=True for the current
	// generation.
	checkConditions(t, tar, kstatus{ready: metav1.ConditionTrue, reconciling: metav1.ConditionFalse, stalled: metav1.ConditionFalse,
		reason: "Synced"})
}

// kstatus is the expected state of the conditions Ready, Reconciling and Stalled: reason is
// Ready's and Reconciling's, stalledReason Stalled's when True; message is in the messages of
// those that are not Ready=True or Stalled=False.
type kstatus struct {
	ready, reconciling, stalled metav1.ConditionStatus
	reason, stalledReason       string
	message                     string
}

// checkConditions checks the kstatus conditions of tar, each computed for its current
// generation, and status.observedGeneration.
func checkConditions(t testing.TB, tar *v1alpha1.TrustAnchorRotation, want kstatus) {
	t.Helper()
	if tar.Status.ObservedGeneration != tar.Generation {
		t.Errorf("status.observedGeneration = %d, want the generation %d", tar.Status.ObservedGeneration, tar.Generation)
	}
	stalledReason := v1alpha1.ReasonNotStalled
	if want.stalled == metav1.ConditionTrue {
		stalledReason = want.stalledReason
	}
	for _, c := range []struct {
		typ            string
		status         metav1.ConditionStatus
		reason         string
		checkedMessage bool
	}{
		{v1alpha1.ConditionReady, want.ready, want.reason, want.ready == metav1.ConditionFalse},
		{v1alpha1.ConditionReconciling, want.reconciling, want.reason, true},
		{v1alpha1.ConditionStalled, want.stalled, stalledReason, want.stalled == metav1.ConditionTrue},
	} {
		got := meta.FindStatusCondition(tar.Status.Conditions, c.typ)
		if got == nil {
			t.Errorf("no condition %s in phase %s: %+v", c.typ, tar.Status.Phase, tar.Status.Conditions)
			continue
		}
		if got.Status != c.status || got.Reason != c.reason || c.checkedMessage && !strings.Contains(got.Message, want.message) {
			t.Errorf("in phase %s, %s = %s (%s: %q), want %s (%s: with %q)", tar.Status.Phase, c.typ, got.Status, got.Reason, got.Message,
				c.status, c.reason, want.message)
		}
		if got.ObservedGeneration != tar.Generation {
			t.Errorf("%s observedGeneration = %d, want the generation %d", c.typ, got.ObservedGeneration, tar.Generation)
		}
	}
}

// checkStalledAfter patches spec.stalledAfter and waits until the operator has acted on the new
// generation, then checks the conditions.
func (e *Env) checkStalledAfter(patch string, want kstatus) {
	t := e.T
	t.Helper()
	if err := e.patchSpec(e.Ctx, patch); err != nil {
		t.Fatal(err)
	}
	tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, fmt.Sprintf("Stalled=%s after %s", want.stalled, patch),
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return tar.Status.ObservedGeneration == tar.Generation &&
				meta.IsStatusConditionPresentAndEqual(tar.Status.Conditions, v1alpha1.ConditionStalled, want.stalled)
		})
	if err != nil {
		t.Fatal(err)
	}
	checkConditions(t, tar, want)
}

func (e *Env) bundle() string {
	e.T.Helper()
	cm, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Get(e.Ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return cm.Data["ca-bundle.crt"]
}

// checkMetric fails the test unless the operator's /metrics has the line.
//
// The operator sets its metrics right after the status write the test has just observed
// (app's report follows the write), so the line may take a moment to appear: it is awaited,
// briefly, not read once.
func (e *Env) checkMetric(line string) {
	e.T.Helper()
	var last string
	err := poll.Until(e.Ctx, 10*time.Second, "metric line "+line, func(ctx context.Context) (bool, error) {
		text, err := e.Operator.Metrics(ctx)
		if err != nil {
			return false, err
		}
		last = text
		for _, l := range strings.Split(text, "\n") {
			if l == line {
				return true, nil
			}
		}
		return false, poll.Pending("not yet")
	})
	if err != nil {
		e.T.Errorf("metrics lack %q (%v); the last read:\n%s", line, err, grepLines(last, strings.SplitN(line, "{", 2)[0]))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// restartProxyContainersThenRenewIssuer restarts only the workloads whose proxy is a container,
// renews the issuer (as cert-manager's own schedule may), then restarts one native-sidecar
// workload, whose new pods certify at once. The operator must still wait for the other
// native-sidecar pods, identity not restarted: the oracle, watching throughout, sees whether a
// certificate on the new anchor reached a mesh that does not trust it yet.
func (e *Env) restartProxyContainersThenRenewIssuer() {
	t := e.T
	var containers, native []meshsim.Workload
	for _, w := range e.Apps {
		if strings.HasPrefix(w.Namespace, proxyContainerPrefix) {
			containers = append(containers, w)
		} else {
			native = append(native, w)
		}
	}
	if len(containers) == 0 || len(native) < 2 {
		t.Fatalf("the mesh needs both layouts: %d proxy-container and %d native-sidecar workloads", len(containers), len(native))
	}
	e.Restart(containers)
	e.Renew("linkerd", "linkerd-identity-issuer")
	e.Restart(native[:1])
	tar, err := e.TARs.Get(e.Ctx, rotationName)
	if err != nil {
		t.Fatal(err)
	}
	if step := stepOf(tar); step != steps.StepPropagateTrustRoots {
		t.Errorf("with native-sidecar pods not restarted, the rotation is at step %s (%q), want %s",
			step, tar.Status.BlockingMessage, steps.StepPropagateTrustRoots)
	}
}

// watchIdentityReplicas records linkerd-identity's spec.replicas, from now (its current value
// first) and each time it changes, until the returned function is called; that returns them.
func (e *Env) watchIdentityReplicas() func() []int32 {
	e.T.Helper()
	ctx, cancel := context.WithCancel(e.Ctx)
	w, err := e.Cluster.Kube().AppsV1().Deployments("linkerd").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=linkerd-identity"})
	if err != nil {
		cancel()
		e.T.Fatal(err)
	}
	var mu sync.Mutex
	var seen []int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || d.Spec.Replicas == nil {
				continue
			}
			mu.Lock()
			if n := len(seen); n == 0 || seen[n-1] != *d.Spec.Replicas {
				seen = append(seen, *d.Spec.Replicas)
			}
			mu.Unlock()
		}
	}()
	return func() []int32 {
		w.Stop()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// checkIdentityReplicas fails unless linkerd-identity's replicas went through want (from the
// watch of watchIdentityReplicas) and it runs the last of them, ready.
func (e *Env) checkIdentityReplicas(got, want []int32) {
	e.T.Helper()
	if !slices.Equal(got, want) {
		e.T.Errorf("linkerd-identity's replicas went %v, want %v", got, want)
	}
	d, err := e.Cluster.Kube().AppsV1().Deployments("linkerd").Get(e.Ctx, "linkerd-identity", metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	if last := want[len(want)-1]; d.Spec.Replicas == nil || *d.Spec.Replicas != last || d.Status.ReadyReplicas != last {
		e.T.Errorf("Deployment linkerd/linkerd-identity: %d replicas wanted, %d ready; want %d", ptr.Deref(d.Spec.Replicas, 1), d.Status.ReadyReplicas, last)
	}
}
