package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestIssuerRenewedAgainDuringRotation rotates as a user following README's Rotate section does while cert-manager
// renews the identity issuer again and again on its own schedule (Linkerd's 48h/25h makes that
// about daily; here several times per phase): two, then three times while the data plane
// propagates the expanded bundle, and three, then two times once the issuer is on the new anchor
// and the control plane has restarted onto it. Every such issuer is signed by the new anchor, so
// a pod presenting a certificate from any of them has converged: the rotation must complete with
// one restart of the workloads per phase, the control plane restarted by the rotation's own
// steps only, and no mTLS violation. The mesh has a StatefulSet, whose restart replaces each pod
// under the same name.
func TestIssuerRenewedAgainDuringRotation(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The workloads TestRotation uses on the shared cluster, plus a StatefulSet removed at the end.
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1, StatefulSets: 1},
		func(rel *charts.Release) *Operator {
			return StartChartOperator(t, rel)
		})
	t.Cleanup(func() { e.removeStatefulSets() })
	start := time.Now()
	for _, tc := range []struct{ propagating, renewing int }{{2, 3}, {3, 2}} {
		t.Run(fmt.Sprintf("%dWhilePropagating%dWhileRenewing", tc.propagating, tc.renewing), func(t *testing.T) {
			e := *e
			e.T = t
			rotateWithIssuerRenewals(&e, tc.propagating, tc.renewing)
		})
		if t.Failed() {
			return
		}
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Fatalf("mTLS violations during the rotations: %v", err)
	}
	t.Logf("oracle: %+v", e.Mesh.Oracle().Status())
}

// rotateWithIssuerRenewals renews the anchor, renews the issuer `propagating` times while the
// rotation waits for the data plane to be restarted onto the expanded bundle, restarts it, renews
// the issuer `renewing` times during RenewingWorkloadCerts, restarts the data plane once more for
// new certificates and a last time for the reduced bundle.
func rotateWithIssuerRenewals(e *Env, propagating, renewing int) {
	t, ctx := e.T, e.Ctx
	oracleStart := time.Now()
	defer func() {
		if err := e.Mesh.Oracle().CheckNoViolationsSince(oracleStart); err != nil {
			t.Errorf("mTLS violations: %v", err)
		}
	}()
	e.Mesh.ResetRolloutStats()
	pods := e.MeshedPods()

	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhasePropagatingTrustRoots, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// renewIssuer renews the issuer and returns the first status written from a snapshot that
	// holds it.
	renewIssuer := func(i int) *v1alpha1.TrustAnchorRotation {
		t.Helper()
		issuer := e.Renew("linkerd", "linkerd-identity-issuer")
		if !steps.SignedBy(issuer, newAnchor) {
			t.Fatalf("renewal %d: the issuer %s is not signed by the new anchor", i, steps.Fingerprint(issuer)[:12])
		}
		tar, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the operator to see issuer "+steps.Fingerprint(issuer)[:12],
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				return tar.Status.ActiveIssuerFingerprint == steps.Fingerprint(issuer)
			})
		if err != nil {
			t.Fatal(err)
		}
		return tar
	}

	// While the data plane does not trust the new anchor, identity (started before the bundle
	// expanded) skips every one of these issuers, and the rotation waits for the restarts.
	var tar *v1alpha1.TrustAnchorRotation
	for i := range propagating {
		tar = renewIssuer(i + 1)
		if step := stepOf(tar); step != steps.StepPropagateTrustRoots {
			t.Fatalf("after issuer renewal %d the rotation is at step %s (%q), want %s", i+1, step, tar.Status.BlockingMessage, steps.StepPropagateTrustRoots)
		}
	}
	cond := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("OutOfOrderIssuerRotation = %+v, want True", cond)
	}

	// Restart the data plane: the operator replaces identity at once, restarts it onto the latest
	// issuer, then the rest of the control plane. The rotation then waits in RenewingWorkloadCerts
	// for the next restart. The replaced pods count among its targets until the operator has seen
	// them go, which the rollouts' end does not wait for (a terminating pod's proxy still serves,
	// and the operator reads pod events up to --pod-watch-read-interval late): wait for the count
	// to settle on the pods that remain.
	e.RestartApps()
	tar, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the control plane on the new anchor",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			wc := tar.Status.WorkloadCertificates
			return stepOf(tar) == steps.StepRenewWorkloadCertificates && wc != nil && wc.ConvergedPods >= 3 && wc.TargetPods == int32(pods)
		})
	if err != nil {
		t.Fatal(err)
	}
	if wc := tar.Status.WorkloadCertificates; wc.TargetPods != int32(pods) || wc.Status != v1alpha1.Converging {
		t.Errorf("workloadCertificates = %+v, want %d target pods converging", wc, pods)
	}

	// cert-manager renews the issuer again, still on the new anchor: the control plane's
	// certificates, from the issuer before, still chain to it. The phase stays, and so do the
	// counts: nothing goes back to behind.
	for i := range renewing {
		tar = renewIssuer(propagating + i + 1)
		wc := tar.Status.WorkloadCertificates
		if step := stepOf(tar); step != steps.StepRenewWorkloadCertificates || wc == nil || wc.ConvergedPods < 3 {
			t.Errorf("after issuer renewal %d during RenewingWorkloadCerts: step %s, workloadCertificates %+v (%q); want step %s with the 3 control-plane pods still converged",
				propagating+i+1, stepOf(tar), wc, tar.Status.BlockingMessage, steps.StepRenewWorkloadCertificates)
		}
	}

	// One restart of the data plane for new certificates is enough.
	e.RestartApps()
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRemovingOldTrustRoots, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if b := e.bundle(); b != steps.RenderBundle(newAnchor) {
		t.Fatalf("reduced bundle holds more than the new anchor:\n%s", b)
	}
	e.RestartApps()
	tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseSynced, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(newAnchor) {
		t.Errorf("previousAnchorFingerprint = %s, want the new anchor", tar.Status.PreviousAnchorFingerprint)
	}

	// No extra restart: every workload restarted by the test alone, three times; the control
	// plane by the rotation's own steps alone. With the issuer renewed before the data plane
	// trusted the new anchor, restart-identity replaces identity's pods by deleting them, which
	// changes no restartedAt: identity is restarted by restart-identity-on-new-issuer and
	// refresh-control-plane-reduced; destination and proxy-injector by refresh-control-plane,
	// refresh-control-plane-certificates and refresh-control-plane-reduced.
	stats := e.Mesh.RolloutStats()
	for _, w := range e.Apps {
		if n := stats.Restarts[w.String()]; n != 3 {
			t.Errorf("%s restarted %d times, want 3 (the test's own restarts)", w, n)
		}
	}
	want := map[string]int{meshsim.IdentityDeployment: 2, meshsim.DestinationDeployment: 3, meshsim.ProxyInjectorDeployment: 3}
	for name, n := range want {
		if got := stats.ControlPlaneRestarts[name]; got != n {
			t.Errorf("Deployment linkerd/%s restarted %d times, want %d", name, got, n)
		}
	}
	t.Logf("restarts: %v; control plane: %v", stats.Restarts, stats.ControlPlaneRestarts)
}

// removeStatefulSets deletes the environment's StatefulSets and waits until the mesh runs none
// of their pods, leaving the shared cluster with the workloads the other tests expect.
func (e *Env) removeStatefulSets() {
	ctx := context.Background()
	kube := e.Cluster.Kube()
	gone := map[string]bool{}
	for _, w := range e.Apps {
		if w.Kind != meshsim.KindStatefulSet {
			continue
		}
		if err := kube.AppsV1().StatefulSets(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil {
			e.T.Errorf("deleting %s: %v", w, err)
			continue
		}
		// Deleting the StatefulSet orphans nothing: the garbage collector deletes its pods.
		gone[w.Namespace+"/"+w.Name+"-"] = true
	}
	if len(gone) == 0 {
		return
	}
	err := poll.Until(ctx, 2*time.Minute, "the StatefulSets' pods to be gone", func(context.Context) (bool, error) {
		for _, p := range e.Mesh.Pods() {
			for prefix := range gone {
				if strings.HasPrefix(p.Namespace+"/"+p.Name, prefix) {
					return false, poll.Pending("pod %s/%s still runs", p.Namespace, p.Name)
				}
			}
		}
		return true, nil
	})
	if err != nil {
		e.T.Error(err)
	}
}
