package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// staleTolerance is the operator's --issuer-reload-tolerance in TestIdentityIssuerStale: the
// simulated kubelet refreshes identity's issuer volume within a second.
const staleTolerance = 10 * time.Second

// TestIdentityIssuerStale: between rotations, cert-manager renews the identity issuer and the
// identity pod misses the reload (the bed withholds the kubelet's refresh of its issuer volume,
// which is how a missed reload looks to Linkerd's identity: linkerd2 #15109). The workloads
// restarted since present certificates of the issuer before: the operator reports it (condition,
// Event, metric, blocking message, `check`), writes nothing under spec.staleIssuerRestart
// Manual, and under Automatic restarts identity once — killed right after that restart, the next
// operator does not restart it again — after which identity signs with the renewed issuer, the
// condition clears and no pair of pods ever failed to verify each other.
func TestIdentityIssuerStale(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 1, Deployments: 2, Replicas: 2, ChartSet: []string{"operator.issuerReloadTolerance=" + staleTolerance.String()}},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	t.Cleanup(func() { e.restoreDefaults(c) })
	since := time.Now()
	web := e.Apps[:1]

	ids := e.Mesh.Identities()
	if len(ids) != 1 || !e.Mesh.WithholdIssuerReload(ids[0].Pod.Name) {
		t.Fatalf("want one running identity pod to withhold the issuer reload from, got %+v", ids)
	}
	before := e.SecretCert("linkerd", "linkerd-identity-issuer")
	renewed := e.Renew("linkerd", "linkerd-identity-issuer")
	staleFP, renewedFP := steps.ShortFingerprint(steps.Fingerprint(before)), steps.ShortFingerprint(steps.Fingerprint(renewed))

	// The operator notes when it saw the renewed issuer; certificates issued past the tolerance
	// must be the renewed issuer's.
	tar, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the renewed issuer observed", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.ActiveIssuerFingerprint == steps.Fingerprint(renewed) && tar.Status.ActiveIssuerObservedTime != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	due := tar.Status.ActiveIssuerObservedTime.Add(staleTolerance + time.Second)
	if err := poll.Until(ctx, time.Minute, "past the reload tolerance", func(context.Context) (bool, error) { return time.Now().After(due), nil }); err != nil {
		t.Fatal(err)
	}
	if st := e.Mesh.Identities()[0]; st.IssuerFingerprint != steps.Fingerprint(before) {
		t.Fatalf("identity signs with %s, want the issuer before the renewal (its reload withheld)", steps.ShortFingerprint(st.IssuerFingerprint))
	}
	e.Restart(web)

	// Reported, Manual: nothing restarted.
	tar, err = WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "IdentityIssuerStale=True naming both issuers", func(tar *v1alpha1.TrustAnchorRotation) bool {
		c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionIdentityIssuerStale)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, staleFP) && strings.Contains(c.Message, renewedFP)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"linkerd-identity still signs workload certificates with issuer " + staleFP, "kubectl rollout restart -n linkerd deploy/linkerd-identity", "spec.staleIssuerRestart: Automatic"} {
		if !strings.Contains(tar.Status.BlockingMessage, want) {
			t.Errorf("blockingMessage does not say %q: %s", want, tar.Status.BlockingMessage)
		}
	}
	if r := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonIdentityIssuerStale {
		t.Errorf("Ready = %+v, want False for %s", r, v1alpha1.ReasonIdentityIssuerStale)
	}
	e.checkEvents(since, app.ReasonIdentityIssuerStale)
	e.checkMetric("trust_rotation_identity_issuer_stale_pods 2") // web's two replicas
	if out, code := e.cliExit("check"); code == 0 || !strings.Contains(out, "linkerd-identity signs with the identity issuer in its Secret") || !strings.Contains(out, staleFP) {
		t.Errorf("linkerd-trust check with identity on a stale issuer: exit %d\n%s", code, out)
	}
	if n := e.identityRestarts(); n != 0 {
		t.Fatalf("spec.staleIssuerRestart Manual: identity restarted %d time(s)", n)
	}

	// Automatic: the operator restarts identity, and is killed right after.
	e.Operator.Stop()
	e.Operator = e.startCrashing("acted:" + steps.StepDetectAnchorRotation)
	if err := e.PatchSpec(ctx, `{"spec":{"staleIssuerRestart":"Automatic"}}`); err != nil {
		t.Fatal(err)
	}
	e.waitKilled()
	mark := e.identityTemplate().Annotations["kubectl.kubernetes.io/restartedAt"]
	if tok, err := steps.ParseActToken(mark); err != nil || tok.Verb != steps.TokenStaleIssuer || tok.Args[0] != staleFP {
		t.Fatalf("identity's template was restarted under %q, want a stale-issuer token naming %s (%v)", mark, staleFP, err)
	}
	// The next operator keeps the condition until it has probed every pod again (the previous
	// one's probes died with it), then clears it once the identity pod that signed with the
	// stale issuer is gone. The restart's Event died with the killed operator.
	e.Operator = StartChartOperator(t, e.Release)
	if _, err := WaitRotation(ctx, e.TARs, rotationName, 3*time.Minute, "IdentityIssuerStale=False, Ready", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return meta.IsStatusConditionFalse(tar.Status.Conditions, v1alpha1.ConditionIdentityIssuerStale) &&
			meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionReady)
	}); err != nil {
		t.Fatal(err)
	}
	e.checkMetric("trust_rotation_identity_issuer_stale_pods 0")
	if got := e.identityTemplate().Annotations["kubectl.kubernetes.io/restartedAt"]; got != mark {
		t.Errorf("identity restarted again after the operator was killed: restartedAt %q, then %q", mark, got)
	}
	if n := e.identityRestarts(); n != 1 {
		t.Errorf("identity restarted %d time(s), want once", n)
	}
	if err := poll.Until(ctx, time.Minute, "identity alone on the renewed issuer", func(context.Context) (bool, error) {
		ids := e.Mesh.Identities()
		return len(ids) == 1 && ids[0].IssuerFingerprint == steps.Fingerprint(renewed), nil
	}); err != nil {
		t.Fatalf("%v: %+v", err, e.Mesh.Identities())
	}

	// New certificates come from the renewed issuer: nothing to report, check passes.
	e.Restart(web)
	if _, code := e.cliExit("check"); code != 0 {
		out, _ := e.cliExit("check")
		t.Errorf("linkerd-trust check after the repair: exit %d\n%s", code, out)
	}
	if tar, err := e.TARs.Get(ctx, rotationName); err != nil || !meta.IsStatusConditionFalse(tar.Status.Conditions, v1alpha1.ConditionIdentityIssuerStale) {
		t.Errorf("IdentityIssuerStale after new pods on the renewed issuer: %v", err)
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
		t.Errorf("mTLS violations: %v", err)
	}
}

// identityTemplate is linkerd-identity's Deployment's pod template.
func (e *Env) identityTemplate() metav1.ObjectMeta {
	e.T.Helper()
	d, err := e.Cluster.Kube().AppsV1().Deployments("linkerd").Get(e.Ctx, "linkerd-identity", metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return d.Spec.Template.ObjectMeta
}

// identityRestarts counts the restarts of linkerd-identity's template since the environment was
// made.
func (e *Env) identityRestarts() int {
	return e.Mesh.RolloutStats().ControlPlaneRestarts["linkerd-identity"]
}
