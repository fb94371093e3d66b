package e2e

// The moves of a takeover from Linkerd's own certificates, as the tests in takeover_test.go make
// them: the mesh installed as Linkerd's guide installs it, and each user move of docs/adopting.md.

import (
	"context"
	"crypto/x509"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

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
func newHandMadeEnv(t *testing.T, ctx context.Context, c *cluster.Cluster, chartSet ...string) (*Env, *pki.HandMade) {
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
	// anchor: the mesh as it runs before anyone thinks of cert-manager. Pods an earlier test
	// left trust another anchor, and get no certificate until restarted: the certificates are
	// awaited once all are.
	if err := e.Mesh.RolloutRestartAll(ctx, e.Mesh.ControlPlane()); err != nil {
		t.Fatal(err)
	}
	if err := meshsim.WaitForRollouts(ctx, kube, e.Mesh.ControlPlane()); err != nil {
		t.Fatal(err)
	}
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
	if e.Release, err = charts.Install(ctx, c, charts.InstallOptions{Set: chartSet}); err != nil {
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

// handMadeRoot is the Secret and the CA Issuer of cert-manager's namespace that hold the
// hand-made anchor and its key for a cross-signed takeover.
const handMadeRoot = "linkerd-previous-root"

// issueAnchorFromHandMade is the user's first move of a cross-signed takeover: `kubectl create
// secret tls linkerd-previous-root -n cert-manager --cert ca.crt --key ca.key`, a CA Issuer over
// it, and the anchor's Certificate re-pointed at that Issuer, which re-issues the anchor signed
// by the hand-made one. It returns that anchor.
func (e *Env) issueAnchorFromHandMade(hand *pki.HandMade) *x509.Certificate {
	e.T.Helper()
	ctx, cm := e.Ctx, e.Cluster.CertManager().CertmanagerV1()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: handMadeRoot, Namespace: "cert-manager"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: hand.AnchorPEM(), corev1.TLSPrivateKeyKey: hand.AnchorKeyPEM}}
	if _, err := e.Cluster.Kube().CoreV1().Secrets("cert-manager").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	issuer := &cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Name: handMadeRoot, Namespace: "cert-manager"},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: handMadeRoot}}}}
	if _, err := cm.Issuers("cert-manager").Create(ctx, issuer, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	old := e.SecretCert("cert-manager", pki.DefaultTrustAnchor)
	e.updateAnchorCertificate(func(spec *cmapi.CertificateSpec) {
		spec.IssuerRef = cmmeta.IssuerReference{Name: handMadeRoot, Kind: cmapi.IssuerKind}
	})
	bridge := e.WaitAnchorRenewed(old)
	if !steps.SignedBy(bridge, hand.Anchor) {
		e.T.Fatalf("cert-manager's anchor %.12s is not signed by the hand-made one", steps.Fingerprint(bridge))
	}
	return bridge
}

// reissueSelfSignedSameKey re-points the anchor's Certificate at its self-signed Issuer with
// rotationPolicy Never for that one issuance, then back to Always (which re-issues nothing), and
// returns the anchor: self-signed, with the key and subject of bridge.
func (e *Env) reissueSelfSignedSameKey(bridge *x509.Certificate) *x509.Certificate {
	e.T.Helper()
	e.updateAnchorCertificate(func(spec *cmapi.CertificateSpec) {
		spec.IssuerRef = cmmeta.IssuerReference{Name: pki.DefaultRootIssuer, Kind: cmapi.IssuerKind}
		spec.PrivateKey.RotationPolicy = cmapi.RotationPolicyNever
	})
	self := e.WaitAnchorRenewed(bridge)
	e.updateAnchorCertificate(func(spec *cmapi.CertificateSpec) { spec.PrivateKey.RotationPolicy = cmapi.RotationPolicyAlways })
	if !steps.SignedBy(self, self) || !steps.SameKey(self, bridge) {
		e.T.Fatalf("the re-issued anchor %.12s is not self-signed with the bridged anchor's key", steps.Fingerprint(self))
	}
	return self
}

// updateAnchorCertificate changes the trust anchor's Certificate's spec.
func (e *Env) updateAnchorCertificate(change func(*cmapi.CertificateSpec)) {
	e.T.Helper()
	certs := e.Cluster.CertManager().CertmanagerV1().Certificates("cert-manager")
	crt, err := certs.Get(e.Ctx, pki.DefaultTrustAnchor, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	if crt.Spec.PrivateKey == nil {
		crt.Spec.PrivateKey = &cmapi.CertificatePrivateKey{}
	}
	change(&crt.Spec)
	if _, err := certs.Update(e.Ctx, crt, metav1.UpdateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// removeHandMadeIssuer deletes the hand-made anchor's Issuer and its Secret, with the key.
func (e *Env) removeHandMadeIssuer() {
	e.T.Helper()
	if err := e.Cluster.CertManager().CertmanagerV1().Issuers("cert-manager").Delete(e.Ctx, handMadeRoot, metav1.DeleteOptions{}); err != nil {
		e.T.Error(err)
	}
	if err := e.Cluster.Kube().CoreV1().Secrets("cert-manager").Delete(e.Ctx, handMadeRoot, metav1.DeleteOptions{}); err != nil {
		e.T.Error(err)
	}
}

// waitChartIssuerEvent waits for the operator's Warning Event ChartIssuerLeft, which gives the
// command that removes the chart's issuer and its key from the Secret.
func (e *Env) waitChartIssuerEvent(since time.Time) {
	e.T.Helper()
	err := poll.Until(e.Ctx, time.Minute, "a ChartIssuerLeft Event", func(ctx context.Context) (bool, error) {
		evs, err := e.Cluster.Kube().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == app.ReasonChartIssuerLeft && ev.Type == corev1.EventTypeWarning && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) &&
				strings.Contains(ev.Message, `kubectl patch secret -n linkerd linkerd-identity-issuer --type=json`) {
				return true, nil
			}
		}
		return false, poll.Pending("none yet")
	})
	if err != nil {
		e.T.Fatal(err)
	}
}

// checkTakeoverControlPlaneRestarts fails unless each control-plane Deployment was restarted as
// many times as a standard takeover restarts it, killed or not: a restart repeated by an
// operator that resumed from its checkpoint shows as one more.
func (e *Env) checkTakeoverControlPlaneRestarts() {
	e.T.Helper()
	got := e.Mesh.RolloutStats().ControlPlaneRestarts
	for _, w := range e.Mesh.ControlPlane() {
		if n, want := got[w.Name], 3; n != want {
			e.T.Errorf("Deployment %s restarted %d times, want %d as a standard rotation does", w, n, want)
		}
	}
	e.T.Logf("control-plane restarts: %v", got)
}
