package faults

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestThirdAnchorMidRotation renews the anchor again while the rotation to the second anchor is
// renewing workload certificates — the control plane already holds certificates that chain to
// the second anchor. Expected: the operator keeps the second anchor in the bundle (between the
// third and the first) and restarts the rotation towards the third; it completes on the third
// anchor alone with 0 violations.
func TestThirdAnchorMidRotation(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	sup := NewSupervisor(t, e)
	sup.Start("")
	defer sup.Stop()
	first := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	// The watches see every bundle written and every in-flight list, however briefly the
	// restarted rotation shows them: with the data plane already restarting for the second
	// anchor, propagate-trust-roots may pass between two polls.
	l := NewLedger(t, e)
	defer l.Close()
	var second, third *x509.Certificate
	Drive(t, e, sup, DriveOpts{onPoll: func(tar *v1alpha1.TrustAnchorRotation) {
		if second == nil && stepOf(tar) == steps.StepRenewWorkloadCertificates {
			second = e.SecretCert("cert-manager", "linkerd-trust-anchor")
			third = e.Renew("cert-manager", "linkerd-trust-anchor")
			t.Logf("renewed the anchor again at %s: %s -> %s", steps.StepRenewWorkloadCertificates, steps.Fingerprint(second)[:12], steps.Fingerprint(third)[:12])
		}
	}})
	if third == nil {
		t.Fatalf("the rotation was never seen at %s", steps.StepRenewWorkloadCertificates)
	}
	l.mu.Lock()
	bundles, inFlight := l.bundleSeq, l.inFlight[steps.Fingerprint(third)]
	l.mu.Unlock()
	if kept := steps.RenderBundle(third, second, first); !slices.Contains(bundles, kept) {
		t.Errorf("the restarted rotation never wrote the bundle [third, second (in flight), first]; bundles written %s (first %.12s, second %.12s, third %.12s)",
			describeBundles(bundles), steps.Fingerprint(first), steps.Fingerprint(second), steps.Fingerprint(third))
	}
	if inFlight != 1 {
		t.Errorf("the restarted rotation's status.inFlightAnchors held at most %d entries, want the second anchor", inFlight)
	}
	tar, err := e.TARs.Get(e.Ctx, rotationName)
	if err != nil {
		t.Fatal(err)
	}
	if len(tar.Status.InFlightAnchors) != 0 {
		t.Errorf("status.inFlightAnchors still has %d entries once Synced", len(tar.Status.InFlightAnchors))
	}
	checkEvent(t, e, "RotationSuperseded", "renewed again")
	CheckOracle(t, e, start)
}

// TestPreviousAnchorDeletedMidRotation deletes linkerd-previous-anchor while the rotation waits
// for the data plane. Expected: the operator recreates it at once from the trust bundle with the
// old anchor (certificate only), the bundle never loses the old anchor, and the rotation
// completes with 0 violations.
func TestPreviousAnchorDeletedMidRotation(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	sup := NewSupervisor(t, e)
	sup.Start("")
	defer sup.Stop()
	old := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	deleted := false
	Drive(t, e, sup, DriveOpts{onPoll: func(tar *v1alpha1.TrustAnchorRotation) {
		if deleted || stepOf(tar) != steps.StepPropagateTrustRoots {
			return
		}
		deleted = true
		secrets := e.Cluster.Kube().CoreV1().Secrets("linkerd")
		if err := secrets.Delete(e.Ctx, "linkerd-previous-anchor", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := poll.Until(e.Ctx, time.Minute, "linkerd-previous-anchor to be recreated", func(ctx context.Context) (bool, error) {
			sec, err := secrets.Get(ctx, "linkerd-previous-anchor", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if string(sec.Data[steps.CertificateKey]) != string(steps.EncodePEM(old)) {
				t.Fatalf("linkerd-previous-anchor recreated with another certificate")
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(bundleOf(t, e), string(steps.EncodePEM(old))) {
			t.Fatal("the bundle lost the old anchor")
		}
		CheckPreviousAnchorHasNoKey(t, e)
	}})
	checkEvent(t, e, "PreviousAnchorRecreated", "recreated")
	CheckOracle(t, e, start)
}

// TestIssuerFromUnrelatedCA points the identity issuer at a CA that chains to neither anchor
// while the rotation waits for the issuer. Expected: the rotation parks with a blocking message
// saying the issuer is signed by neither anchor; once the issuer is renewed from the right
// ClusterIssuer it completes with 0 violations (identity never accepts the stranger issuer).
func TestIssuerFromUnrelatedCA(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	cm := e.Cluster.CertManager().CertmanagerV1()
	ctx := e.Ctx
	stranger := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "stranger-anchor", Namespace: "cert-manager"},
		Spec: cmapi.CertificateSpec{CommonName: "stranger", IsCA: true, SecretName: "stranger-anchor", Duration: &metav1.Duration{Duration: 48 * time.Hour},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm},
			IssuerRef:  cmmeta.IssuerReference{Name: "linkerd-trust-root-issuer", Kind: cmapi.IssuerKind, Group: "cert-manager.io"}},
	}
	if _, err := cm.Certificates("cert-manager").Create(ctx, stranger, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ci := &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "stranger-ca"},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "stranger-anchor"}}}}
	if _, err := cm.ClusterIssuers().Create(ctx, ci, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	setIssuerRef := func(name string) {
		patch := `{"spec":{"issuerRef":{"name":"` + name + `","kind":"ClusterIssuer","group":"cert-manager.io"}}}`
		if _, err := cm.Certificates("linkerd").Patch(ctx, "linkerd-identity-issuer", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer setIssuerRef("linkerd-identity-issuer")

	sup := NewSupervisor(t, e)
	sup.Start("")
	defer sup.Stop()
	parked := false
	Drive(t, e, sup, DriveOpts{onPoll: func(tar *v1alpha1.TrustAnchorRotation) {
		if parked || stepOf(tar) != steps.StepWaitForIdentityIssuer {
			return
		}
		parked = true
		setIssuerRef("stranger-ca")
		e.Renew("linkerd", "linkerd-identity-issuer")
		got, err := e2e.WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the unrelated issuer to be reported",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				return strings.Contains(tar.Status.BlockingMessage, "signed by neither")
			})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("parked: %s", got.Status.BlockingMessage)
		setIssuerRef("linkerd-identity-issuer") // the driver renews it next
	}})
	if !parked {
		t.Fatal("never reached wait-for-identity-issuer")
	}
	CheckOracle(t, e, start)
}

// TestTrustRootsEditedByHand edits linkerd-identity-trust-roots while Synced: once adding an
// anchor nothing chains to, once dropping the anchor. Expected: the operator restores the
// rendered bundle each time; 0 violations.
func TestTrustRootsEditedByHand(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	sup := NewSupervisor(t, e)
	sup.Start("")
	defer sup.Stop()
	want := bundleOf(t, e)
	stranger := selfSigned(t, "stranger", true, time.Now().Add(time.Hour))
	for name, edit := range map[string]string{
		"an extra anchor":  want + string(steps.EncodePEM(stranger)),
		"a foreign anchor": string(steps.EncodePEM(stranger)),
	} {
		patch := `{"data":{"ca-bundle.crt":` + quote(edit) + `}}`
		if _, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Patch(e.Ctx, "linkerd-identity-trust-roots", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		err := poll.Until(e.Ctx, time.Minute, "the bundle to be restored after "+name, func(ctx context.Context) (bool, error) {
			return bundleOf(t, e) == want, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("restored the trust bundle after a hand edit with %s", name)
	}
	CheckOracle(t, e, start)
}

// TestAnchorRenewedWithSameKey sets rotationPolicy Never on the anchor Certificate and renews
// it. Expected: the renewed anchor has the same key and subject; the operator says no rotation
// is needed (an event), updates linkerd-previous-anchor and the bundle in place, and never
// leaves Synced; 0 violations.
func TestAnchorRenewedWithSameKey(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	cm := e.Cluster.CertManager().CertmanagerV1().Certificates("cert-manager")
	setPolicy := func(p string) {
		patch := `{"spec":{"privateKey":{"rotationPolicy":"` + p + `"}}}`
		if _, err := cm.Patch(e.Ctx, "linkerd-trust-anchor", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setPolicy("Never")
	defer setPolicy("Always")
	sup := NewSupervisor(t, e)
	sup.Start("")
	defer sup.Stop()
	old := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	renewed := e.Renew("cert-manager", "linkerd-trust-anchor")
	if !steps.SameKey(old, renewed) {
		t.Fatal("rotationPolicy Never renewed the anchor with a new key")
	}
	tar, err := e2e.WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "the in-place update", func(tar *v1alpha1.TrustAnchorRotation) bool {
		if tar.Status.Phase != v1alpha1.PhaseSynced && tar.Status.Phase != "" {
			t.Fatalf("phase %s: an anchor renewed with the same key needs no rotation", tar.Status.Phase)
		}
		return tar.Status.PreviousAnchorFingerprint == steps.Fingerprint(renewed)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleOf(t, e); got != steps.RenderBundle(renewed) {
		t.Fatalf("bundle not updated in place:\n%s", got)
	}
	if cp := tar.Status.Checkpoint; cp == nil || cp.Rotation != "" {
		t.Errorf("checkpoint %+v: no rotation expected", cp)
	}
	checkEvent(t, e, "StepActed", "no rotation needed")
	CheckOracle(t, e, start)
}

// TestInvalidSpec creates TrustAnchorRotations with invalid specs against the real apiserver.
// Expected: the CRD schema rejects each with a message that says what is wrong.
func TestInvalidSpec(t *testing.T) {
	e := SharedEnv(t)
	dyn, err := dynamic.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "trust.linkerd.io", Version: "v1alpha1", Resource: "trustanchorrotations"}
	for _, tc := range []struct{ field, value, want string }{
		{"workloadCertificateRefreshInterval", "5s", "must be at least 10s"},
		{"workloadCertificateRefreshInterval", "five mins", "should match"},
		{"workloadCertificateRefreshInterval", "-1m", "should match"},
		{"workloadCertificateRefreshInterval", "10 seconds", "should match"},
		{"strategy", "Bridged", `supported values: "Standard", "CrossSigned"`},
		{"naturalChurnPeriod", "a week", "should match"},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "trust.linkerd.io/v1alpha1", "kind": "TrustAnchorRotation",
			"metadata": map[string]any{"name": "invalid-spec"},
			"spec":     map[string]any{tc.field: tc.value},
		}}
		_, err := dyn.Resource(gvr).Create(e.Ctx, obj, metav1.CreateOptions{})
		if err == nil {
			_ = dyn.Resource(gvr).Delete(e.Ctx, "invalid-spec", metav1.DeleteOptions{})
			t.Errorf("%s %q was accepted", tc.field, tc.value)
			continue
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s %q: %v; want Invalid naming the field and %q", tc.field, tc.value, err, tc.want)
			continue
		}
		t.Logf("%s %q rejected: %v", tc.field, tc.value, err)
	}
}

// TestUnusableAnchor points an operator (admin credentials: the chart grants only the real
// anchor Secret) at a Secret the test controls and feeds it bad input. Expected for each: the
// rotation waits with a blocking message that names the Secret and the problem, and the trust
// bundle is left exactly as it was; a good anchor again lets it go back to Synced.
func TestUnusableAnchor(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	secrets := e.Cluster.Kube().CoreV1().Secrets("cert-manager")
	_ = secrets.Delete(e.Ctx, "test-anchor", metav1.DeleteOptions{})
	before := bundleOf(t, e)
	op := e2e.StartOperatorWithEnv(t, []string{"POD_NAMESPACE=linkerd"}, e.Cluster.Kubeconfig(),
		"--leader-elect=false", "--trust-anchor-secret", "test-anchor")
	defer func() { op.Kill(); ScanLogs(t, e, []*e2e.Operator{op}) }()
	set := func(data []byte) {
		_ = secrets.Delete(e.Ctx, "test-anchor", metav1.DeleteOptions{})
		if data == nil {
			return
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "test-anchor", Namespace: "cert-manager"}, Data: map[string][]byte{steps.CertificateKey: data}}
		if _, err := secrets.Create(e.Ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer set(nil)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"missing", nil, "cert-manager/test-anchor not found"},
		{"malformed PEM", []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"), "x509"},
		{"not PEM", []byte("hello"), "not PEM-encoded"},
		{"not a CA", steps.EncodePEM(selfSigned(t, "leaf", false, time.Now().Add(time.Hour))), "not a CA"},
		{"expired", steps.EncodePEM(selfSigned(t, "expired", true, time.Now().Add(-time.Minute))), "expired"},
	}
	for _, tc := range cases {
		set(tc.data)
		tar, err := e2e.WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "a blocking message for "+tc.name, func(tar *v1alpha1.TrustAnchorRotation) bool {
			return strings.Contains(tar.Status.BlockingMessage, tc.want)
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := bundleOf(t, e); got != before {
			t.Fatalf("%s: the trust bundle changed", tc.name)
		}
		t.Logf("%s: %s", tc.name, tar.Status.BlockingMessage)
	}
	anchor, err := e.Cluster.Kube().CoreV1().Secrets("cert-manager").Get(e.Ctx, "linkerd-trust-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set(anchor.Data[steps.CertificateKey])
	if _, err := e2e.WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "Synced with a good anchor again", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.BlockingMessage == ""
	}); err != nil {
		t.Fatal(err)
	}
	if got := bundleOf(t, e); got != before {
		t.Fatal("the trust bundle changed")
	}
	CheckOracle(t, e, start)
}

// checkEvent fails unless an event with reason and a message containing text was recorded on
// the TrustAnchorRotation.
func checkEvent(t *testing.T, e *e2e.Env, reason, text string) {
	t.Helper()
	err := poll.Until(e.Ctx, 30*time.Second, "event "+reason, func(ctx context.Context) (bool, error) {
		list, err := e.Cluster.Kube().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Name == rotationName && strings.Contains(ev.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Error(err)
	}
}

func selfSigned(t *testing.T, cn string, isCA bool, notAfter time.Time) *x509.Certificate {
	t.Helper()
	c, _, _, err := pki.SelfSigned(cn, isCA, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
