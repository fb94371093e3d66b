package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestBundleRevertedDuringRotation rotates as a user following README's Rotate section does while other writers
// put linkerd-identity-trust-roots back: a hand edit (kubectl edit) of the old bundle while the
// data plane propagates the expanded one, a second writer (an Argo CD self-heal) that keeps
// writing the old bundle back while the rotation waits for the issuer renewal, a Helm upgrade
// while the workloads renew their certificates, and the self-heal again, with the expanded
// bundle of its Git state, while the data plane takes the reduced one. Each time the rotation
// parks with a message naming the field manager, the operator rewrites the bundle, identity is
// never restarted onto the old roots, and the rotation completes once the writers stop, with no
// mTLS violation.
func TestBundleRevertedDuringRotation(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	start := time.Now()
	defer func() {
		if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
			t.Errorf("mTLS violations: %v", err)
		}
		t.Logf("oracle: %+v", e.Mesh.Oracle().Status())
	}()

	oldAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	old, expanded, reduced := steps.RenderBundle(oldAnchor), steps.RenderBundle(newAnchor, oldAnchor), steps.RenderBundle(newAnchor)
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhasePropagatingTrustRoots, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// PropagatingTrustRoots: kubectl edit puts the old bundle back.
	e.handEdit("kubectl-edit", old, expanded, steps.StepPropagateTrustRoots)
	e.RestartApps()
	tar, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseWaitingForIdentityRotation, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tar.Status.BlockingMessage, "cmctl renew") {
		t.Errorf("blockingMessage %q", tar.Status.BlockingMessage)
	}
	e.checkIdentityTrusts(newAnchor, "waiting for the issuer renewal")

	// WaitingForIdentityRotation: a self-heal keeps writing the old bundle.
	e.fight("argocd-controller", old, expanded, steps.StepWaitForIdentityIssuer)
	e.checkIdentityTrusts(newAnchor, "after the self-heal stopped")
	e.Renew("linkerd", "linkerd-identity-issuer")
	if _, err := WaitRotation(ctx, e.TARs, rotationName, 3*time.Minute, "the control plane on the new issuer",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return stepOf(tar) == steps.StepRenewWorkloadCertificates && tar.Status.WorkloadCertificates != nil &&
				tar.Status.WorkloadCertificates.ConvergedPods >= 3
		}); err != nil {
		t.Fatal(err)
	}
	e.checkIdentityTrusts(newAnchor, "on the new issuer")

	// RenewingWorkloadCerts: a Helm upgrade renders the old bundle again.
	e.handEdit("helm", old, expanded, steps.StepRenewWorkloadCertificates)
	e.RestartApps()
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRemovingOldTrustRoots, 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	// RemovingOldTrustRoots: the self-heal writes the expanded bundle of its Git state.
	e.fight("argocd-controller", expanded, reduced, steps.StepRemoveOldTrustRoots)
	e.RestartApps()
	e.waitSyncedOn(newAnchor, 3*time.Minute)
	e.checkIdentityTrusts(newAnchor, "Synced")
	if b := e.bundle(); b != reduced {
		t.Errorf("Synced with another bundle than the new anchor alone:\n%s", b)
	}
	// The operator alone owns the bundle again: nothing else writes it on the shared cluster.
	cm, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range cm.ManagedFields {
		if mf.Manager != steps.FieldManager && strings.Contains(string(mf.FieldsV1.Raw), "ca-bundle.crt") {
			t.Errorf("field manager %s still owns ca-bundle.crt", mf.Manager)
		}
	}
}

// handEdit writes bundle into the ConfigMap once, as field manager (an Update, as kubectl edit
// and Helm 3 make), and waits for the operator to write want back, with a Warning Event naming
// the manager, while the rotation stays at step.
func (e *Env) handEdit(manager, bundle, want, step string) {
	e.T.Helper()
	since := time.Now()
	e.writeBundle(e.Ctx, manager, bundle)
	e.waitBundle(want)
	e.waitDriftEvent(since, manager)
	if tar, err := e.TARs.Get(e.Ctx, rotationName); err != nil || stepOf(tar) != step {
		e.T.Fatalf("after the edit by %s: %v, at step %s, want %s", manager, err, stepOf(tar), step)
	}
}

// fight runs a second writer that writes bundle back every time the ConfigMap changes (a watch,
// as Argo CD's self-heal reacts), until it has done so several times while the rotation stays
// parked at step naming it; then stops it and waits for the operator to write want back.
func (e *Env) fight(manager, bundle, want, step string) {
	e.T.Helper()
	t := e.T
	ctx, cancel := context.WithCancel(e.Ctx)
	var reverts atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			w, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=linkerd-identity-trust-roots"})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || cm.Data["ca-bundle.crt"] == bundle {
					continue
				}
				cm.Data["ca-bundle.crt"] = bundle
				if _, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Update(ctx, cm, metav1.UpdateOptions{FieldManager: manager}); err == nil {
					reverts.Add(1)
				}
			}
			w.Stop()
		}
	}()
	stop := func() { cancel(); wg.Wait() }
	defer stop()

	parked := `field manager "` + manager + `"`
	tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "the rotation parked naming "+manager,
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return strings.Contains(tar.Status.BlockingMessage, parked)
		})
	if err != nil {
		t.Fatal(err)
	}
	if stepOf(tar) != step {
		t.Fatalf("parked at step %s, want %s", stepOf(tar), step)
	}
	// Parked while the writer keeps reverting the operator's rewrites.
	err = poll.Until(e.Ctx, 2*time.Minute, "5 reverts by "+manager, func(ctx context.Context) (bool, error) {
		tar, err := e.TARs.Get(ctx, rotationName)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		if stepOf(tar) != step {
			t.Fatalf("the rotation left step %s for %s while %s kept reverting the bundle: %q", step, stepOf(tar), manager, tar.Status.BlockingMessage)
		}
		if n := reverts.Load(); n < 5 {
			return false, poll.Pending("%d reverts", n)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	t.Logf("%s reverted the bundle %d times", manager, reverts.Load())
	e.waitBundle(want)
	if tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "the rotation unparked",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return !strings.Contains(tar.Status.BlockingMessage, parked)
		}); err != nil || stepOf(tar) != step {
		t.Fatalf("after %s stopped: %v, at step %s, want %s", manager, err, stepOf(tar), step)
	}
}

func (e *Env) writeBundle(ctx context.Context, manager, bundle string) {
	e.T.Helper()
	kube := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd")
	cm, err := kube.Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	cm.Data["ca-bundle.crt"] = bundle
	if _, err := kube.Update(ctx, cm, metav1.UpdateOptions{FieldManager: manager}); err != nil {
		e.T.Fatal(err)
	}
}

func (e *Env) waitBundle(want string) {
	e.T.Helper()
	err := poll.Until(e.Ctx, time.Minute, "the operator's bundle back in the ConfigMap", func(ctx context.Context) (bool, error) {
		cm, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		if cm.Data["ca-bundle.crt"] != want {
			return false, poll.Pending("the ConfigMap holds another bundle")
		}
		return true, nil
	})
	if err != nil {
		e.T.Fatal(err)
	}
}

// waitDriftEvent waits for the operator's TrustBundleDrifted Warning naming the field manager.
func (e *Env) waitDriftEvent(since time.Time, manager string) {
	e.T.Helper()
	err := poll.Until(e.Ctx, time.Minute, "a TrustBundleDrifted Event naming "+manager, func(ctx context.Context) (bool, error) {
		evs, err := e.Cluster.Kube().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == "TrustBundleDrifted" && ev.Type == corev1.EventTypeWarning && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) &&
				strings.Contains(ev.Message, `field manager "`+manager+`"`) {
				return true, nil
			}
		}
		return false, poll.Pending("none yet")
	})
	if err != nil {
		e.T.Fatal(err)
	}
}

// checkIdentityTrusts fails the test unless every identity controller runs, started on roots
// that hold the anchor: identity restarted onto a reverted bundle would not. A controller just
// restarted may take a moment to serve (Linkerd's own does, in real-Linkerd mode: kwok marks
// its pod Ready before it serves, where a readiness probe would hold the rollout), so readiness
// is waited for; the roots it started on cannot change while it runs.
func (e *Env) checkIdentityTrusts(anchor *x509.Certificate, when string) {
	e.T.Helper()
	fp := steps.Fingerprint(anchor)
	var bad []string
	err := poll.Until(e.Ctx, 30*time.Second, "identity to serve", func(context.Context) (bool, error) {
		bad = nil
		for _, id := range e.Mesh.Identities() {
			if !slices.Contains(id.RootFingerprints, fp) {
				return false, fmt.Errorf("identity %s started with roots %v (%s), want roots with the new anchor %s", id.Pod.Name, id.RootFingerprints, id.LastError, fp[:12])
			}
			if !id.Ready {
				bad = append(bad, fmt.Sprintf("identity %s not ready (%s)", id.Pod.Name, id.LastError))
			}
		}
		return len(bad) == 0, nil
	})
	if err != nil {
		e.T.Errorf("%s: %v %v", when, err, bad)
	}
}
