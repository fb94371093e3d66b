package e2e

import (
	"context"
	"crypto/x509"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
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

	restarts := 0
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
	restarts++

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
	restarts++
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
	t.Logf("takeover done with %d data-plane restarts (the workloads' certificates renewed by themselves, issuance lifetime %s)", restarts, handMadeIssuance)

	// Step 10 of the design: the chart's issuer and its key leave the Secret.
	e.removeChartIssuer()
}

// startCrashing starts the operator as the chart runs it, with the test-only hook that makes it
// SIGKILL itself at point (app.CrashEnv; the e2e binaries carry it).
func (e *Env) startCrashing(point string) *Operator {
	e.T.Helper()
	return StartOperatorWithEnv(e.T, []string{"POD_NAMESPACE=" + e.Release.Namespace, app.CrashEnv + "=" + point}, e.Release.Kubeconfig, e.Release.OperatorArgs...)
}

// waitKilled waits for the operator to have killed itself at its crash point.
func (e *Env) waitKilled() {
	e.T.Helper()
	select {
	case <-e.Operator.Done():
	case <-time.After(3 * time.Minute):
		e.T.Fatal("the operator did not reach its crash point within 3 minutes")
	}
	if code := e.Operator.ExitCode(); code != -1 {
		e.T.Fatalf("the operator exited with %d, not killed at its crash point", code)
	}
}

// handMadeIssuance is identity's workload-certificate lifetime in the takeover's mesh: short, so
// that proxies renew their certificates onto cert-manager's issuer by themselves (at 70 % of it)
// and the takeover needs no data-plane restart for them.
const handMadeIssuance = 90 * time.Second

// newHandMadeEnv makes the shared cluster a mesh on hand-made certificates: it removes what the
// operator and cert-manager wrote in the Linkerd namespace, writes the ConfigMap and the issuer
// Secret as Linkerd's chart renders them, runs the control plane on the chart's scheme and
// restarts every meshed workload onto the hand-made anchor; then applies cert-manager's PKI, as
// the user's first move, and installs the operator's chart, without starting the operator.
func newHandMadeEnv(t *testing.T, ctx context.Context, c *cluster.Cluster) (*Env, *pki.HandMade) {
	t.Helper()
	kube := c.Kube()
	hand, err := pki.MakeHandMade("cluster.local", 8760*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, Ctx: ctx, Cluster: c}
	for _, ns := range []string{"linkerd", "cert-manager"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if e.TARs, err = client.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	// A fresh install of the operator: no TrustAnchorRotation status, no previous anchor.
	if err := e.TARs.Delete(ctx, rotationName); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := c.CertManager().CertmanagerV1().Certificates("linkerd").Delete(ctx, "linkerd-identity-issuer", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	for _, name := range []string{"linkerd-identity-issuer", "linkerd-previous-anchor"} {
		if err := kube.CoreV1().Secrets("linkerd").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if err := kube.CoreV1().ConfigMaps("linkerd").Delete(ctx, "linkerd-identity-trust-roots", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	cm, sec := hand.ChartObjects("linkerd")
	if _, err := kube.CoreV1().ConfigMaps("linkerd").Create(ctx, cm, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets("linkerd").Create(ctx, sec, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}

	e.Mesh, err = meshsim.Start(ctx, meshsim.Config{RESTConfig: c.RESTConfig(), VolumeRefreshDelay: meshsim.Never, OracleTick: 200 * time.Millisecond,
		CertificateBound: CertificateBound, Registerer: prometheus.NewRegistry(), IssuanceLifetime: handMadeIssuance, Linkerd: reallinkerd.FromEnv()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Mesh.Stop)
	if err := meshsim.InstallControlPlane(ctx, kube, meshsim.ControlPlaneOptions{IssuerScheme: meshsim.SchemeLinkerd}); err != nil {
		t.Fatal(err)
	}
	// The control plane and every meshed workload the shared cluster runs, onto the hand-made
	// anchor: the mesh as it runs before anyone thinks of cert-manager.
	e.Restart(e.Mesh.ControlPlane())
	if e.Apps, err = meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{Prefix: "app", Namespaces: 2, Deployments: 4, Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	e.Apps = e.meshedWorkloads(e.Apps)
	e.Restart(e.Apps)
	e.checkMeshTrusts(hand.Anchor)

	// docs/adopting.md, first move: cert-manager's PKI. Its identity-issuer Certificate writes
	// into the Secret Helm rendered: the Secret keeps its type and the chart's keys.
	if e.PKI, err = pki.Install(ctx, kube, c.CertManager(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := kube.CoreV1().Secrets("linkerd").Get(ctx, "linkerd-identity-issuer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != corev1.SecretTypeOpaque || string(got.Data["crt.pem"]) != string(sec.Data["crt.pem"]) || len(got.Data["tls.crt"]) == 0 {
		t.Fatalf("cert-manager's issuance into the Secret Helm rendered: type %s, keys %v; want Opaque with crt.pem unchanged and tls.crt", got.Type, keys(got.Data))
	}
	if e.Release, err = charts.Install(ctx, c, charts.InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	return e, hand
}

// meshedWorkloads adds to ws every other workload of the meshed application pods the mesh runs
// (left on the shared cluster by earlier tests): a takeover moves them all.
func (e *Env) meshedWorkloads(ws []meshsim.Workload) []meshsim.Workload {
	seen := map[string]bool{}
	for _, w := range ws {
		seen[w.String()] = true
	}
	for _, p := range e.Mesh.Pods() {
		if p.Component != "" {
			continue
		}
		w := meshsim.Workload{Namespace: p.Namespace, Name: p.Workload}
		if p.Workload == "" {
			pod, err := e.Cluster.Kube().CoreV1().Pods(p.Namespace).Get(e.Ctx, p.Name, metav1.GetOptions{})
			if err != nil || len(pod.OwnerReferences) == 0 || pod.OwnerReferences[0].Kind != meshsim.KindStatefulSet {
				e.T.Fatalf("meshed pod %s/%s: no Deployment or StatefulSet owns it (%v)", p.Namespace, p.Name, err)
			}
			w = meshsim.Workload{Namespace: p.Namespace, Name: pod.OwnerReferences[0].Name, Kind: meshsim.KindStatefulSet}
		}
		if !seen[w.String()] {
			seen[w.String()] = true
			ws = append(ws, w)
		}
	}
	return ws
}

// checkMeshTrusts fails the test unless every meshed pod trusts the anchor alone.
func (e *Env) checkMeshTrusts(anchor *x509.Certificate) {
	e.T.Helper()
	for _, p := range e.Mesh.Pods() {
		if !slices.Equal(p.RootFingerprints, []string{steps.Fingerprint(anchor)}) {
			e.T.Fatalf("meshed pod %s/%s trusts %v, want the hand-made anchor alone", p.Namespace, p.Name, p.RootFingerprints)
		}
	}
}

// checkIdentitySigns fails the test unless every identity controller signs with issuer.
func (e *Env) checkIdentitySigns(issuer *x509.Certificate, when string) {
	e.T.Helper()
	for _, id := range e.Mesh.Identities() {
		if id.IssuerFingerprint != steps.Fingerprint(issuer) {
			e.T.Fatalf("%s: identity %s signs with %.12s, want %.12s (%s)", when, id.Pod.Name, id.IssuerFingerprint, steps.Fingerprint(issuer), issuer.Subject.CommonName)
		}
	}
}

// waitBlocked waits until the TrustAnchorRotation's blocking message says every one of says.
func (e *Env) waitBlocked(what string, says ...string) {
	e.T.Helper()
	_, err := WaitRotation(e.Ctx, e.TARs, rotationName, 2*time.Minute, what, func(tar *v1alpha1.TrustAnchorRotation) bool {
		for _, s := range says {
			if !strings.Contains(tar.Status.BlockingMessage, s) {
				return false
			}
		}
		return true
	})
	if err != nil {
		tar, _ := e.TARs.Get(e.Ctx, rotationName)
		if tar != nil {
			e.T.Logf("blockingMessage: %s", tar.Status.BlockingMessage)
		}
		e.T.Fatal(err)
	}
}

// cli runs linkerd-trust against the cluster as its admin and returns what it printed; a
// failure fails the test.
func (e *Env) cli(args ...string) string {
	e.T.Helper()
	cmd := exec.CommandContext(e.Ctx, Binary(e.T, "linkerd-trust"), append([]string{"--kubeconfig", e.Cluster.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.T.Fatalf("linkerd-trust %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cliExit runs linkerd-trust as cli does and returns its output and exit code.
func (e *Env) cliExit(args ...string) (string, int) {
	e.T.Helper()
	cmd := exec.CommandContext(e.Ctx, Binary(e.T, "linkerd-trust"), append([]string{"--kubeconfig", e.Cluster.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		e.T.Fatalf("linkerd-trust %s: %v", strings.Join(args, " "), err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// annotateKeep is `kubectl annotate -n linkerd <kind> <name> helm.sh/resource-policy=keep` of the
// trust-roots ConfigMap or the issuer Secret.
func (e *Env) annotateKeep(kind string) {
	e.T.Helper()
	patch := []byte(`{"metadata":{"annotations":{"helm.sh/resource-policy":"keep"}}}`)
	opts := metav1.PatchOptions{FieldManager: "kubectl-annotate"}
	var err error
	if kind == "configmaps" {
		_, err = e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Patch(e.Ctx, "linkerd-identity-trust-roots", types.MergePatchType, patch, opts)
	} else {
		_, err = e.Cluster.Kube().CoreV1().Secrets("linkerd").Patch(e.Ctx, "linkerd-identity-issuer", types.MergePatchType, patch, opts)
	}
	if err != nil {
		e.T.Fatalf("annotating %s: %v", kind, err)
	}
}

// switchScheme is what `helm upgrade ... --set identity.issuer.scheme=kubernetes.io/tls` changes
// of the control plane: identity's -identity-scheme argument, which rolls identity.
func (e *Env) switchScheme() {
	e.T.Helper()
	d, err := e.Cluster.Kube().AppsV1().Deployments("linkerd").Get(e.Ctx, "linkerd-identity", metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	for i, ctr := range d.Spec.Template.Spec.Containers {
		for j, a := range ctr.Args {
			if strings.HasPrefix(a, steps.IdentitySchemeArg) {
				d.Spec.Template.Spec.Containers[i].Args[j] = steps.IdentitySchemeArg + steps.SchemeKubernetes
			}
		}
	}
	if _, err := e.Cluster.Kube().AppsV1().Deployments("linkerd").Update(e.Ctx, d, metav1.UpdateOptions{FieldManager: "helm"}); err != nil {
		e.T.Fatal(err)
	}
}

// removeChartIssuer is the design's closing move: the chart's issuer and its key leave the
// Secret, with the keep annotation; identity reads cert-manager's keys alone.
func (e *Env) removeChartIssuer() {
	e.T.Helper()
	patch := []byte(`[{"op":"remove","path":"/data/crt.pem"},{"op":"remove","path":"/data/key.pem"},` +
		`{"op":"remove","path":"/metadata/annotations/helm.sh~1resource-policy"}]`)
	if _, err := e.Cluster.Kube().CoreV1().Secrets("linkerd").Patch(e.Ctx, "linkerd-identity-issuer", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		e.T.Fatalf("removing the chart's issuer: %v", err)
	}
	e.cli("takeover", "--cancel")
}
