package e2e

import (
	"context"
	"crypto/x509"
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

// ReasonIdentityRestartedEarlyEvent is the Warning Event of condition IdentityRestartedEarly.
const ReasonIdentityRestartedEarlyEvent = "IdentityRestartedEarly"

// TestIdentityRestartedEarly restarts linkerd-identity by hand, as `kubectl rollout restart -n
// linkerd` (the blog's CronJob), a node drain or an eviction would, between the trust bundle's
// expansion and the data plane's convergence, on a control plane of three replicas each, the
// oracle watching.
func TestIdentityRestartedEarly(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1, ControlPlaneReplicas: 3},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	e.RestoreControlPlaneOnCleanup()
	t.Cleanup(func() { e.restoreDefaults(c) })
	identity := []meshsim.Workload{{Namespace: "linkerd", Name: "linkerd-identity"}}

	// With the issuer still on the old anchor, the restarted identity loads the expanded roots and
	// keeps signing with the old issuer, which every pod trusts: nothing to report, and
	// restart-identity has nothing left to restart.
	t.Run("IssuerStillOnTheOldAnchor", func(t *testing.T) {
		e := *e
		e.T = t
		since := time.Now()
		e.Mesh.ResetRolloutStats()
		newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
		e.waitPastExpansion()
		e.Restart(identity)
		tar, err := e.TARs.Get(ctx, rotationName)
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionIdentityRestartedEarly); c == nil || c.Status != metav1.ConditionFalse {
			t.Errorf("issuer on the old anchor: IdentityRestartedEarly = %+v, want False", c)
		}
		e.playUser(newAnchor)
		// Ours, restart-identity-on-new-issuer's and refresh-control-plane-reduced's: restart-identity
		// found every identity pod started after the expansion.
		if n := e.Mesh.RolloutStats().ControlPlaneRestarts["linkerd-identity"]; n != 3 {
			t.Errorf("linkerd-identity restarted %d times, want 3 (restart-identity restarts no identity that already loaded the expanded roots)", n)
		}
		e.checkNoEvent(since, ReasonIdentityRestartedEarlyEvent)
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Errorf("mTLS violations: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	// With the issuer already on the new anchor (renewed early), the restarted identity accepts it
	// and signs new-anchor certificates — its own proxy's first — which the pods not yet restarted
	// do not trust: mTLS between them fails, in the simulator as in Linkerd, and no operator can
	// prevent it. The operator reports it, then (automatic restarts turned on) restarts the data
	// plane and completes the rotation; the failures end once the data plane converged.
	t.Run("IssuerAlreadyOnTheNewAnchor", func(t *testing.T) {
		e := *e
		e.T = t
		since := time.Now()
		newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
		e.Renew("linkerd", "linkerd-identity-issuer")
		e.waitPastExpansion()
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations before identity was restarted: %v", err)
		}

		restartedAt := time.Now()
		e.Restart(identity)
		pods := e.identityPods()
		tar, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "IdentityRestartedEarly=True naming "+strings.Join(pods, ", "),
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionIdentityRestartedEarly)
				return c != nil && c.Status == metav1.ConditionTrue && containsAll(c.Message, pods) && containsAll(tar.Status.BlockingMessage, pods)
			})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tar.Status.BlockingMessage, "Waiting for ") || !strings.Contains(tar.Status.BlockingMessage, "do not trust") {
			t.Errorf("blockingMessage %q does not say what the rotation waits for and what the early identity means", tar.Status.BlockingMessage)
		}
		e.checkEvents(restartedAt, ReasonIdentityRestartedEarlyEvent)
		e.checkMetric(fmt.Sprintf("trust_rotation_identity_restarted_early_pods %d", len(pods)))
		// The hazard is real: a pod on the new issuer is rejected by one not restarted yet.
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		v, err := e.Mesh.Oracle().WaitForViolation(wctx, restartedAt)
		wcancel()
		if err != nil {
			t.Fatalf("no mTLS violation after identity restarted onto the new-anchor issuer: %v", err)
		}
		t.Logf("as expected, the oracle saw: %s", v)

		// Automatic restarts from here: the operator restarts the data plane, most pods behind
		// first, and completes the rotation by itself.
		if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: automationValues}); err != nil {
			t.Fatal(err)
		}
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 3*time.Minute, "the data plane converged, IdentityRestartedEarly=False",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionIdentityRestartedEarly)
				return stepOf(tar) != steps.StepPropagateTrustRoots && c != nil && c.Status == metav1.ConditionFalse
			}); err != nil {
			t.Fatal(err)
		}
		e.checkMetric("trust_rotation_identity_restarted_early_pods 0")
		// Every pod now trusts the new anchor: the oracle's episodes end (it checks on its tick).
		octx, ocancel := context.WithTimeout(ctx, time.Minute)
		err = e.Mesh.Oracle().WaitFor(octx, func(s meshsim.OracleStatus) bool { return s.ActiveViolations == 0 })
		ocancel()
		if err != nil {
			t.Fatalf("mTLS violations go on after the data plane converged: %v", err)
		}
		clean := time.Now()
		e.waitSyncedOn(newAnchor, 6*time.Minute)
		vs := e.Mesh.Oracle().ViolationsSince(since)
		for _, v := range vs {
			if v.Start.Before(restartedAt) || v.End.IsZero() || v.End.After(clean) {
				t.Errorf("violation outside the window from identity's restart to the data plane's convergence (%s to %s): %s",
					restartedAt.Format(time.RFC3339Nano), clean.Format(time.RFC3339Nano), v)
			}
		}
		t.Logf("%d violation episode(s), all between identity's restart and the data plane's convergence (%s)", len(vs), clean.Sub(restartedAt).Round(time.Second))
		if err := e.Mesh.Oracle().CheckNoViolationsSince(clean); err != nil {
			t.Errorf("mTLS violations after the data plane converged: %v", err)
		}
	})
}

// waitPastExpansion waits until the rotation waits for the data plane on the expanded bundle, and
// the clock is past the second in which it expanded the bundle: the API records when the rotation
// started (status.checkpoint.startTime) and when a pod started in whole seconds, and the operator
// counts a pod started within the expansion's second as started before it (it loaded the old
// roots, or may have).
func (e *Env) waitPastExpansion() {
	e.T.Helper()
	tar, err := WaitPhase(e.Ctx, e.TARs, rotationName, v1alpha1.PhasePropagatingTrustRoots, 2*time.Minute)
	if err != nil {
		e.T.Fatal(err)
	}
	cp := tar.Status.Checkpoint
	if cp == nil || cp.StartTime == nil {
		e.T.Fatalf("the rotation in phase %s records no start time: checkpoint %+v", tar.Status.Phase, cp)
	}
	expanded := cp.StartTime.Time
	if err := poll.Until(e.Ctx, 5*time.Second, "the clock past the second of the expansion", func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(expanded), nil
	}); err != nil {
		e.T.Fatal(err)
	}
}

// identityPods names the alive linkerd-identity pods, "linkerd/<name>".
func (e *Env) identityPods() []string {
	e.T.Helper()
	list, err := e.Cluster.Kube().CoreV1().Pods("linkerd").List(e.Ctx, metav1.ListOptions{LabelSelector: meshsim.LabelControlPlaneComponent + "=" + meshsim.ComponentIdentity})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, "linkerd/"+p.Name)
		}
	}
	return out
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return len(parts) > 0
}

// checkNoEvent fails if the operator recorded an Event of the reason since the time.
func (e *Env) checkNoEvent(since time.Time, reason string) {
	e.T.Helper()
	evs, err := e.Cluster.Kube().CoreV1().Events("default").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == reason && ev.InvolvedObject.Kind == "TrustAnchorRotation" && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
			e.T.Errorf("unexpected %s Event: %s", reason, ev.Message)
		}
	}
}

// playUser plays a user following README's Rotate section until the rotation to anchor is
// Synced (playUserUntil).
func (e *Env) playUser(anchor *x509.Certificate) {
	e.T.Helper()
	fp := steps.Fingerprint(anchor)
	if err := e.playUserUntil(6*time.Minute, "Synced on anchor "+fp[:12], func(tar *v1alpha1.TrustAnchorRotation) bool {
		return atRest(tar) && tar.Status.PreviousAnchorFingerprint == fp
	}); err != nil {
		e.T.Fatal(err)
	}
}
