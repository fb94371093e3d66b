package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestTakeoverFromHandMadeCertificates takes over a mesh installed as Linkerd's documentation
// installs it — an anchor and an issuer made by hand as step makes them, rendered by Linkerd's
// chart into the trust-roots ConfigMap and the issuer Secret (crt.pem, key.pem), identity on the
// chart's scheme linkerd.io/tls — by following docs/adopting.md "From Linkerd's own
// certificates": apply cert-manager's PKI (cert-manager writes its issuer into the Secret Helm
// rendered), install the operator, `linkerd trust takeover`, the keep annotations, the data-plane
// restarts the operator asks for, and the helm upgrade that switches identity's scheme. The anchor's
// key is not kept (the standard takeover). It ends Synced on cert-manager's anchor with no mTLS
// violation from the moment the mesh ran on the hand-made certificates, and counts the
// data-plane restarts it made.
func TestTakeoverFromHandMadeCertificates(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e, hand := newHandMadeEnv(t, ctx, c)
	start := time.Now()
	defer func() {
		if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
			t.Errorf("mTLS violations: %v", err)
		}
		t.Logf("oracle: %+v", e.Mesh.Oracle().Status())
	}()
	cmAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	handBundle := e.bundle()
	e.Mesh.ResetRolloutStats()

	// Installed without spec.takeover, the operator writes nothing and says what it found.
	e.Operator = StartChartOperator(t, e.Release)
	e.waitBlocked("the takeover not requested", "made by hand", "linkerd trust takeover")
	if b := e.bundle(); b != handBundle {
		t.Fatalf("the operator changed the trust bundle before the takeover was requested:\n%s", b)
	}
	if _, err := c.Kube().CoreV1().Secrets("linkerd").Get(ctx, "linkerd-previous-anchor", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("linkerd-previous-anchor written before the takeover was requested: %v", err)
	}

	// The plan first, then the request.
	plan := e.cli("takeover", "--dry-run")
	for _, want := range []string{steps.ShortFingerprint(steps.Fingerprint(hand.Anchor)), "made by hand",
		"kubectl annotate -n linkerd configmap linkerd-identity-trust-roots helm.sh/resource-policy=keep",
		"--set identity.externalCA=true --set identity.issuer.scheme=kubernetes.io/tls"} {
		if !strings.Contains(plan, want) {
			t.Errorf("takeover --dry-run does not say %q:\n%s", want, plan)
		}
	}
	if tar, err := e.TARs.Get(ctx, rotationName); err != nil || tar.Spec.Takeover {
		t.Fatalf("takeover --dry-run set spec.takeover (%v)", err)
	}
	e.cli("takeover", "--yes")
	e.waitBlocked("Helm's keep annotations", "kubectl annotate -n linkerd configmap linkerd-identity-trust-roots helm.sh/resource-policy=keep",
		"kubectl annotate -n linkerd secret linkerd-identity-issuer helm.sh/resource-policy=keep", "--set identity.externalCA=true")
	if b := e.bundle(); b != handBundle {
		t.Fatalf("the operator changed the trust bundle before Helm's objects were kept:\n%s", b)
	}

	// The operator is killed (SIGKILL) as soon as it has written the expanded bundle, before it
	// records the act, and again after the scheme switch, right after saving the checkpoint of
	// identity's restart onto cert-manager's issuer: each next one resumes from the checkpoint.
	e.Operator.Stop()
	e.Operator = e.startCrashing("acted:" + steps.StepExpandTrustBundle)

	// The user's moves: keep both objects, stop the chart rendering the ConfigMap (no render here:
	// Helm, seeing keep, leaves the live object as it is).
	for _, kind := range []string{"configmaps", "secrets"} {
		e.annotateKeep(kind)
	}
	e.waitKilled()
	if want := steps.RenderBundle(cmAnchor, hand.Anchor); e.bundle() != want {
		t.Fatalf("the killed operator left the bundle:\n%s\nwant cert-manager's anchor and the hand-made one", e.bundle())
	}
	e.Operator = e.startCrashing("save:" + steps.StepRestartIdentityOnNewIssuer)

	tar, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhasePropagatingTrustRoots, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := steps.RenderBundle(cmAnchor, hand.Anchor); e.bundle() != want {
		t.Fatalf("expanded bundle:\n%s\nwant cert-manager's anchor and the hand-made one", e.bundle())
	}
	if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(hand.Anchor) {
		t.Errorf("previousAnchorFingerprint %s, want the hand-made anchor", tar.Status.PreviousAnchorFingerprint)
	}
	e.Restart(e.Apps)

	// WaitingForIdentityRotation: identity still signs with the chart's issuer; the message is
	// the helm upgrade that switches its scheme.
	upgrade := "helm upgrade linkerd-control-plane linkerd/linkerd-control-plane -n linkerd --reuse-values --set identity.externalCA=true --set identity.issuer.scheme=kubernetes.io/tls"
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseWaitingForIdentityRotation, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.waitBlocked("the scheme switch", upgrade)
	e.checkIdentitySigns(hand.Issuer, "before the scheme switch")
	// check reads the issuer identity reads, the hand-made one, and the ConfigMap the operator
	// took from Helm: nothing it checks is wrong.
	if check, code := e.cliExit("check"); code != 0 || !strings.Contains(check, "ConfigMap linkerd-identity-trust-roots is written by the operator alone") {
		t.Errorf("linkerd-trust check while the takeover waits for the scheme switch: exit %d\n%s", code, check)
	}
	e.switchScheme()
	e.waitKilled()
	e.Operator = StartChartOperator(t, e.Release)

	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRemovingOldTrustRoots, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.checkIdentitySigns(e.SecretCert("linkerd", "linkerd-identity-issuer"), "after the scheme switch")
	e.Restart(e.Apps)
	tar, err = WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseSynced, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b := e.bundle(); b != steps.RenderBundle(cmAnchor) {
		t.Errorf("Synced with a bundle other than cert-manager's anchor alone:\n%s", b)
	}
	if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(cmAnchor) {
		t.Errorf("previousAnchorFingerprint %s, want cert-manager's anchor", tar.Status.PreviousAnchorFingerprint)
	}
	// The workloads' certificates renewed by themselves (handMadeIssuance).
	e.checkRestarts(2, "onto the expanded bundle, then onto cert-manager's anchor alone")
	e.checkTakeoverControlPlaneRestarts()

	// Step 10 of the design: the operator says the chart's issuer and its key are left in the
	// Secret, and how to remove them; the user does.
	e.waitChartIssuerEvent(start)
	e.removeChartIssuer()
}

// TestCrossSignedTakeoverFromHandMadeCertificates is the takeover of a user who kept the
// hand-made anchor's key (docs/design/takeover.md, case a): cert-manager issues its anchor from
// a CA Issuer over the hand-made anchor and its key, so that the new anchor is signed by the one
// every pod trusts, and the operator runs the takeover as a spec.strategy CrossSigned rotation:
// the bundle stays the hand-made anchor while identity switches to cert-manager's issuer, whose
// chain carries the bridge, and the data plane restarts once, onto cert-manager's anchor alone.
// Then the design's last move: the anchor re-issued by its own self-signed issuer with the same
// key (rotationPolicy Never), which the operator takes as a renewal in place, and the hand-made
// anchor's key leaves the cluster.
func TestCrossSignedTakeoverFromHandMadeCertificates(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e, hand := newHandMadeEnv(t, ctx, c, "rotation.spec.strategy=CrossSigned")
	t.Cleanup(func() { e.restoreDefaults(c) })
	start := time.Now()
	defer func() {
		if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
			t.Errorf("mTLS violations: %v", err)
		}
		t.Logf("oracle: %+v", e.Mesh.Oracle().Status())
	}()
	handBundle := e.bundle()
	e.Mesh.ResetRolloutStats()

	// Two issuer chains live among pods that all trust the hand-made anchor alone: the bridge.
	bridged := e.watchBridge()
	// The user's ca.key, in a CA Issuer of cert-manager's namespace; the anchor re-issued by it.
	bridge := e.issueAnchorFromHandMade(hand)
	e.Operator = StartChartOperator(t, e.Release)
	e.cli("takeover", "--yes")
	for _, kind := range []string{"configmaps", "secrets"} {
		e.annotateKeep(kind)
	}
	// No expansion: cert-manager's issuer must first be renewed onto the bridged anchor.
	e.waitBlocked("cert-manager's issuer renewed onto the new anchor", "cmctl renew -n linkerd linkerd-identity-issuer")
	if b := e.bundle(); b != handBundle {
		t.Fatalf("a cross-signed takeover changed the trust bundle before the issuer switch:\n%s", b)
	}
	e.Renew("linkerd", "linkerd-identity-issuer")
	if chain := e.SecretChain("linkerd", "linkerd-identity-issuer"); len(chain) != 2 || !chain[1].Equal(bridge) {
		t.Fatalf("cert-manager's issuer chain holds %d certificates, want the issuer and the bridge", len(chain))
	}
	e.waitBlocked("the scheme switch", "--set identity.issuer.scheme=kubernetes.io/tls")
	e.switchScheme()
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseRemovingOldTrustRoots, 6*time.Minute); err != nil {
		t.Fatal(err)
	}
	if b := e.bundle(); b != steps.RenderBundle(bridge) {
		t.Fatalf("reduced bundle:\n%s\nwant cert-manager's bridged anchor alone", b)
	}
	if !bridged() {
		t.Error("the oracle never saw two issuer chains live among pods with one set of roots: the bridge was not exercised")
	}
	e.Restart(e.Apps)
	if _, err := WaitPhase(ctx, e.TARs, rotationName, v1alpha1.PhaseSynced, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.checkRestarts(1, "onto cert-manager's anchor alone")

	// The anchor back on its own self-signed issuer, with the same key: the same anchor to every
	// pod, which the operator writes in place, restarting nothing.
	self := e.reissueSelfSignedSameKey(bridge)
	if _, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the self-signed anchor written in place",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.PreviousAnchorFingerprint == steps.Fingerprint(self)
		}); err != nil {
		t.Fatal(err)
	}
	if b := e.bundle(); b != steps.RenderBundle(self) {
		t.Errorf("bundle after the in-place renewal:\n%s\nwant the self-signed anchor", b)
	}
	e.checkRestarts(1, "the in-place renewal restarts nothing")
	e.removeHandMadeIssuer()
	e.removeChartIssuer()
}
