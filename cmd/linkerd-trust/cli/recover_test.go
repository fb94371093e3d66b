package cli

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// MergePatch applies a JSON merge patch as the apiserver does, over the object's JSON.
func (f fakeRotations) MergePatch(_ context.Context, name string, patch []byte, _ string) (*v1alpha1.TrustAnchorRotation, error) {
	tar, err := f.Get(context.Background(), name)
	if err != nil {
		return nil, err
	}
	orig, err := json.Marshal(tar)
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(orig, patch)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.TrustAnchorRotation{}
	if err := json.Unmarshal(merged, out); err != nil {
		return nil, err
	}
	f[name] = out
	return out.DeepCopy(), nil
}

// testCA makes a CA certificate valid from notBefore to notAfter, signed by parent (self-signed
// when nil): the fixture's PKI files cannot express an expiry relative to testNow.
func testCA(t *testing.T, cn string, parent *x509.Certificate, parentKey crypto.Signer, notBefore, notAfter time.Time) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// onPKI moves the fixture onto anchor and issuer: the Secrets, the bundle, the status, and
// every pod's probe, whose leaf expires at leaves[pod] (an hour after testNow when not there).
func (f *fixture) onPKI(anchor, issuer *x509.Certificate, leaves map[string]time.Time) {
	f.issue("cert-manager", "linkerd-trust-anchor", pemOf(anchor))
	f.replace(secret("linkerd", "linkerd-previous-anchor", pemOf(anchor)))
	f.issue("linkerd", "linkerd-identity-issuer", pemOf(issuer))
	f.replace(bundleConfigMap(steps.RenderBundle(anchor)))
	st := &f.rotations["cluster"].Status
	st.PreviousAnchorFingerprint, st.ActiveIssuerFingerprint = steps.Fingerprint(anchor), steps.Fingerprint(issuer)
	for key := range f.probes {
		at, ok := leaves[key]
		if !ok {
			at = testNow.Add(time.Hour)
		}
		f.probes[key] = probe.ProbeResult{Issuer: steps.Fingerprint(issuer), Chain: []*x509.Certificate{issuer}, LeafNotAfter: at}
	}
}

// recover refuses where nothing has expired, naming what is valid until when, and changes
// nothing.
func TestRecoverRefusesWithNothingExpired(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := f.run("recover", "--yes")
	for _, want := range []string{"nothing to recover from: the trust anchor the mesh trusts", "is valid until 2035-01-01T00:00:00Z", "the identity issuer", "nothing was changed"} {
		if code == ExitOK || !strings.Contains(errOut, want) {
			t.Errorf("recover with nothing expired: exit %d, want it to say %q\n%s%s", code, want, out, errOut)
		}
	}
	if spec := f.rotations["cluster"].Spec; spec.IdentityIssuerRenewal != "" || spec.DataPlaneRestart.Policy != "" {
		t.Errorf("the spec was changed: %+v", spec)
	}
}

// An expired anchor, not renewed: recover prints which pods have no valid certificate and when
// the others lose theirs, the recovery's order and the steps; with --yes it sets the spec the
// recovery runs under (the whole data plane at once) and renews the anchor.
func TestRecoverFromExpiredAnchor(t *testing.T) {
	f := newFixture(t)
	anchor, key := testCA(t, "root.linkerd.cluster.local", nil, nil, testNow.Add(-365*24*time.Hour), testNow.Add(-time.Hour))
	// cert-manager's CA issuer does not cap what it signs at its CA's expiry: the issuer outlives
	// the anchor, and so do the leaves.
	issuer, _ := testCA(t, "identity.linkerd.cluster.local", anchor, key, testNow.Add(-24*time.Hour), testNow.Add(24*time.Hour))
	f.onPKI(anchor, issuer, map[string]time.Time{
		"emojivoto/web-7c9d8f6b5-qx2lp":    testNow.Add(-10 * time.Minute),
		"emojivoto/voting-6b4d9f8c7-m2k9s": testNow.Add(3 * time.Hour),
	})

	out, errOut, code := f.run("recover", "--dry-run")
	if code != ExitOK {
		t.Fatalf("recover --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"Recovery (TrustAnchorExpired): trust anchor " + steps.ShortFingerprint(steps.Fingerprint(anchor)) + " expired at 2026-06-01T11:00:00Z",
		"meshed pods read: 4",
		"without a valid certificate now (expired at): 1 pod(s)\n    2026-06-01T11:50:00Z  emojivoto/web-7c9d8f6b5-qx2lp",
		"with one until (soonest first): 3 pod(s)\n    2026-06-01T13:00:00Z  emojivoto/web-7c9d8f6b5-zt7wn\n    2026-06-01T13:00:00Z  linkerd/linkerd-identity-5d8f9c7b6-aaaaa\n    2026-06-01T15:00:00Z  emojivoto/voting-6b4d9f8c7-m2k9s",
		"1. linkerd-trust recover renews the trust anchor, Certificate cert-manager/linkerd-trust-anchor",
		"restarts linkerd-identity onto both, before any other pod",
		"every meshed workload, 2 at a time",
		"It restarts: linkerd-identity 3 times, linkerd-destination and linkerd-proxy-injector 3 times each, every meshed workload (2) twice",
		"It sets on TrustAnchorRotation cluster: identityIssuerRenewal: Automatic; dataPlaneRestart: policy Automatic, maxConcurrent 2, maxConcurrentPerNamespace 2",
		"renew-issuer-first", "RenewingIssuerFirst",
		"How long: pods restarted and pods not restarted yet refuse each other until every meshed workload has restarted: one rollout of the mesh. No completed rotation in status.history",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --dry-run does not say %q\n%s", want, out)
		}
	}
	// With a rotation in the history, how long one restart of the data plane took there.
	finished := metav1.NewTime(testNow.Add(-30 * 24 * time.Hour))
	older := metav1.NewTime(testNow.Add(-60 * 24 * time.Hour))
	f.rotations["cluster"].Status.History = []v1alpha1.RotationRecord{ // the latest first
		{Rotation: strings.Repeat("cd", 32), Outcome: v1alpha1.RotationSuperseded},
		{Rotation: strings.Repeat("ab", 32), Outcome: v1alpha1.RotationCompleted, FinishTime: &finished, Phases: []v1alpha1.PhaseDuration{
			{Phase: v1alpha1.PhaseRefreshingControlPlane, Duration: metav1.Duration{Duration: time.Second}},
			{Phase: v1alpha1.PhasePropagatingTrustRoots, Duration: metav1.Duration{Duration: 4*time.Minute + 30*time.Second}},
		}},
		{Rotation: strings.Repeat("ef", 32), Outcome: v1alpha1.RotationCompleted, FinishTime: &older, Phases: []v1alpha1.PhaseDuration{
			{Phase: v1alpha1.PhasePropagatingTrustRoots, Duration: metav1.Duration{Duration: time.Hour}},
		}},
	}
	out, _, _ = f.run("recover", "--dry-run")
	if want := "This cluster's last completed rotation (to anchor abababababab, finished 2026-05-02T12:00:00Z) spent 4m30s in PropagatingTrustRoots restarting the data plane"; !strings.Contains(out, want) {
		t.Errorf("recover --dry-run with a rotation in the history does not say %q\n%s", want, out)
	}
	if spec := f.rotations["cluster"].Spec; spec.IdentityIssuerRenewal != "" || spec.DataPlaneRestart.Policy != "" {
		t.Errorf("--dry-run changed the spec: %+v", spec)
	}

	out, errOut, code = f.run("recover", "--yes")
	if code != ExitOK {
		t.Fatalf("recover --yes: exit %d\n%s%s", code, out, errOut)
	}
	spec := f.rotations["cluster"].Spec
	if spec.IdentityIssuerRenewal != v1alpha1.Automatic || spec.DataPlaneRestart.Policy != v1alpha1.Automatic ||
		spec.DataPlaneRestart.MaxConcurrent != 2 || spec.DataPlaneRestart.MaxConcurrentPerNamespace != 2 {
		t.Errorf("spec after recover: %+v", spec)
	}
	if !issuing(t, f, "cert-manager", "linkerd-trust-anchor") {
		t.Error("the trust anchor's renewal was not triggered")
	}
	for _, want := range []string{"Triggered the renewal of Certificate cert-manager/linkerd-trust-anchor",
		`put the restart budget back: kubectl patch trustanchorrotation cluster --type=merge -p '{"spec":{"dataPlaneRestart":{"policy":"Manual","maxConcurrent":null,"maxConcurrentPerNamespace":null}}}'`} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --yes does not say %q\n%s", want, out)
		}
	}
}

// An expired anchor under spec.strategy CrossSigned: recover says the cross-signed order (no
// workload restarts before the reduction, no pair broken) and lifts no restart budget; once
// cert-manager renewed the anchor with the expired one's key, the plan is that order's.
func TestRecoverFromExpiredAnchorCrossSigned(t *testing.T) {
	f := newFixture(t)
	anchor, key := testCA(t, "root.linkerd.cluster.local", nil, nil, testNow.Add(-365*24*time.Hour), testNow.Add(-time.Hour))
	issuer, _ := testCA(t, "identity.linkerd.cluster.local", anchor, key, testNow.Add(-24*time.Hour), testNow.Add(24*time.Hour))
	f.onPKI(anchor, issuer, nil)
	f.rotations["cluster"].Spec.Strategy = v1alpha1.StrategyCrossSigned

	out, errOut, code := f.run("recover", "--dry-run")
	if code != ExitOK {
		t.Fatalf("recover --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"cert-manager signs the new anchor with the expired one's key",
		"restarts linkerd-identity onto both, before any other pod",
		"no workload restarts for it",
		"It restarts: linkerd-identity 3 times, linkerd-destination and linkerd-proxy-injector twice each, every meshed workload (2) once, after the reduction",
		"How long: no pair that verifies now breaks",
		"It sets on TrustAnchorRotation cluster: identityIssuerRenewal: Automatic\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --dry-run does not say %q\n%s", want, out)
		}
	}
	if strings.Contains(out, "maxConcurrent") {
		t.Errorf("recover lifts the restart budget, which the cross-signed order does not need\n%s", out)
	}

	// cert-manager renewed the anchor with the expired one's key: the rotation's plan.
	renewed, _ := testCA(t, "root.linkerd.cluster.local", anchor, key, testNow.Add(-time.Minute), testNow.Add(365*24*time.Hour))
	f.issue("cert-manager", "linkerd-trust-anchor", pemOf(renewed))
	out, errOut, code = f.run("recover", "--dry-run")
	if code != ExitOK {
		t.Fatalf("recover --dry-run, the anchor renewed: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"every meshed workload (2) once", "recovering from the expired trust anchor through the bridge",
		"would write ConfigMap linkerd/linkerd-identity-trust-roots: [" + steps.ShortFingerprint(steps.Fingerprint(anchor)) + "] -> [" + steps.ShortFingerprint(steps.Fingerprint(renewed)) + " (new), " + steps.ShortFingerprint(steps.Fingerprint(anchor)) + " (previous)]"} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --dry-run, the anchor renewed, does not say %q\n%s", want, out)
		}
	}
	if out, errOut, code = f.run("recover", "--yes"); code != ExitOK {
		t.Fatalf("recover --yes: exit %d\n%s%s", code, out, errOut)
	}
	if spec := f.rotations["cluster"].Spec; spec.IdentityIssuerRenewal != v1alpha1.Automatic || spec.DataPlaneRestart.Policy != "" {
		t.Errorf("spec after recover: %+v; want the issuer's renewal alone", spec.DataPlaneRestart)
	}
}

// recover --cross-signed from the standard setup: it points the anchor's Certificate at the CA
// issuer over its own Secret (the identity issuer's ClusterIssuer), which makes cert-manager sign
// the renewed anchor with the expired one's key, and sets spec.strategy CrossSigned; without the
// flag, the plan names it as the way without an outage. Refused once cert-manager renewed the
// anchor from elsewhere.
func TestRecoverCrossSignedSwitchesTheAnchorIssuer(t *testing.T) {
	f := newFixture(t)
	anchor, key := testCA(t, "root.linkerd.cluster.local", nil, nil, testNow.Add(-365*24*time.Hour), testNow.Add(-time.Hour))
	issuer, _ := testCA(t, "identity.linkerd.cluster.local", anchor, key, testNow.Add(-24*time.Hour), testNow.Add(24*time.Hour))
	f.onPKI(anchor, issuer, nil)

	out, _, _ := f.run("recover", "--dry-run")
	if want := "Without an outage: linkerd-trust recover --cross-signed"; !strings.Contains(out, want) {
		t.Errorf("recover --dry-run does not say %q\n%s", want, out)
	}
	out, errOut, code := f.run("recover", "--cross-signed", "--dry-run")
	if code != ExitOK {
		t.Fatalf("recover --cross-signed --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"1. linkerd-trust recover points Certificate cert-manager/linkerd-trust-anchor at ClusterIssuer linkerd-identity-issuer, the CA issuer over its own Secret (was Issuer linkerd-trust-root-issuer)",
		"It sets on TrustAnchorRotation cluster: identityIssuerRenewal: Automatic; strategy: CrossSigned",
		"every meshed workload (2) once, after the reduction",
		"recovering from the expired trust anchor through the bridge",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --cross-signed --dry-run does not say %q\n%s", want, out)
		}
	}
	if strings.Contains(out, "Without an outage") {
		t.Errorf("recover --cross-signed still offers itself\n%s", out)
	}
	anchorIssuer := func() cmmeta.IssuerReference {
		crt, err := f.cmClients[len(f.cmClients)-1].CertmanagerV1().Certificates("cert-manager").Get(context.Background(), "linkerd-trust-anchor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return crt.Spec.IssuerRef
	}
	if got := anchorIssuer(); got.Name != "linkerd-trust-root-issuer" || f.rotations["cluster"].Spec.Strategy != "" {
		t.Fatalf("--dry-run changed something: anchor issuer %+v, strategy %q", got, f.rotations["cluster"].Spec.Strategy)
	}

	out, errOut, code = f.run("recover", "--cross-signed", "--yes")
	if code != ExitOK {
		t.Fatalf("recover --cross-signed --yes: exit %d\n%s%s", code, out, errOut)
	}
	if got := anchorIssuer(); got.Name != "linkerd-identity-issuer" || got.Kind != cmapi.ClusterIssuerKind {
		t.Errorf("the anchor's Certificate is issued by %+v, want ClusterIssuer linkerd-identity-issuer", got)
	}
	spec := f.rotations["cluster"].Spec
	if spec.Strategy != v1alpha1.StrategyCrossSigned || spec.IdentityIssuerRenewal != v1alpha1.Automatic || spec.DataPlaneRestart.Policy != "" {
		t.Errorf("spec after recover --cross-signed: %+v", spec)
	}
	if !strings.Contains(out, "Pointed Certificate cert-manager/linkerd-trust-anchor at ClusterIssuer linkerd-identity-issuer") {
		t.Errorf("recover --cross-signed --yes does not say what it changed\n%s", out)
	}
	// Again, the Certificate issued so already (each run reads the fixture's objects afresh):
	// nothing more to switch.
	for _, o := range f.cm {
		if crt, ok := o.(*cmapi.Certificate); ok && crt.Name == "linkerd-trust-anchor" {
			crt.Spec.IssuerRef = cmmeta.IssuerReference{Name: "linkerd-identity-issuer", Kind: cmapi.ClusterIssuerKind}
		}
	}
	if out, errOut, code = f.run("recover", "--cross-signed", "--dry-run"); code != ExitOK || strings.Contains(out, "points Certificate") || !strings.Contains(out, "cert-manager signs the new anchor with the expired one's key") {
		t.Errorf("recover --cross-signed after the switch: exit %d\n%s%s", code, out, errOut)
	}

	// cert-manager renewed the anchor self-signed before the switch took: refused.
	g := newFixture(t)
	g.onPKI(anchor, issuer, nil)
	renewed, _ := testCA(t, "root.linkerd.cluster.local", nil, nil, testNow.Add(-time.Minute), testNow.Add(365*24*time.Hour))
	g.issue("cert-manager", "linkerd-trust-anchor", pemOf(renewed))
	out, errOut, code = g.run("recover", "--cross-signed", "--yes")
	if code == ExitOK || !strings.Contains(errOut, "already renewed the trust anchor to "+steps.ShortFingerprint(steps.Fingerprint(renewed))) || !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("recover --cross-signed after a self-signed renewal: exit %d, want a refusal\n%s%s", code, out, errOut)
	}
	if g.rotations["cluster"].Spec.Strategy != "" {
		t.Errorf("the refused recover set the strategy: %q", g.rotations["cluster"].Spec.Strategy)
	}
}

// An expired issuer under a valid anchor: nothing restarts; recover sets the issuer's renewal
// alone.
func TestRecoverFromExpiredIssuer(t *testing.T) {
	f := newFixture(t)
	anchor, key := testCA(t, "root.linkerd.cluster.local", nil, nil, testNow.Add(-24*time.Hour), testNow.Add(365*24*time.Hour))
	issuer, _ := testCA(t, "identity.linkerd.cluster.local", anchor, key, testNow.Add(-48*time.Hour), testNow.Add(-time.Minute))
	f.onPKI(anchor, issuer, map[string]time.Time{
		"emojivoto/web-7c9d8f6b5-qx2lp": testNow.Add(-time.Minute), "emojivoto/web-7c9d8f6b5-zt7wn": testNow.Add(-time.Minute),
		"emojivoto/voting-6b4d9f8c7-m2k9s": testNow.Add(-time.Minute), "linkerd/linkerd-identity-5d8f9c7b6-aaaaa": testNow.Add(-time.Minute),
	})
	// --cross-signed is the expired anchor's way out: refused here, nothing changed.
	if out, errOut, code := f.run("recover", "--cross-signed", "--yes"); code == ExitOK || !strings.Contains(errOut, "--cross-signed is the way out of an expired trust anchor") {
		t.Errorf("recover --cross-signed with an expired issuer: exit %d, want a refusal\n%s%s", code, out, errOut)
	}
	if spec := f.rotations["cluster"].Spec; spec.IdentityIssuerRenewal != "" {
		t.Errorf("the refused recover changed the spec: %+v", spec)
	}
	out, errOut, code := f.run("recover", "--yes")
	if code != ExitOK {
		t.Fatalf("recover --yes: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"Recovery (IdentityIssuerExpired): the identity issuer in Secret linkerd/linkerd-identity-issuer expired at 2026-06-01T11:59:00Z",
		"without a valid certificate now (expired at): 4 pod(s)", "It restarts: nothing: no pod restarts", "Set on TrustAnchorRotation cluster: identityIssuerRenewal: Automatic."} {
		if !strings.Contains(out, want) {
			t.Errorf("recover does not say %q\n%s", want, out)
		}
	}
	spec := f.rotations["cluster"].Spec
	if spec.IdentityIssuerRenewal != v1alpha1.Automatic || spec.DataPlaneRestart.Policy != "" {
		t.Errorf("spec after recover: %+v, want the issuer's renewal alone", spec)
	}
	if issuing(t, f, "cert-manager", "linkerd-trust-anchor") {
		t.Error("the trust anchor was renewed: only the issuer expired")
	}
}

// issuing reports whether the last run left the Certificate Issuing (a renewal triggered).
func issuing(t *testing.T, f *fixture, ns, name string) bool {
	t.Helper()
	cm := f.cmClients[len(f.cmClients)-1]
	crt, err := cm.CertmanagerV1().Certificates(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			return true
		}
	}
	return false
}

// recover refuses, changing nothing, when the operator's RBAC does not let it act on the spec it
// would set, naming what is denied and the helm upgrade that grants it; --dry-run says it would.
func TestRecoverRefusesWhatTheOperatorMayNotDo(t *testing.T) {
	f := newFixture(t)
	anchor, key := testCA(t, "root.linkerd.cluster.local", nil, nil, testNow.Add(-365*24*time.Hour), testNow.Add(-time.Hour))
	issuer, _ := testCA(t, "identity.linkerd.cluster.local", anchor, key, testNow.Add(-24*time.Hour), testNow.Add(24*time.Hour))
	f.onPKI(anchor, issuer, nil)
	f.rotations["cluster"].Annotations = map[string]string{steps.HelmReleaseNameAnnotation: "trust-rotation-operator", steps.HelmReleaseNamespaceAnnotation: "linkerd"}
	f.operatorDenied = []string{"patch deployments"}

	out, errOut, code := f.run("recover", "--dry-run")
	if code != ExitOK || !strings.Contains(out, "This would be refused: the operator's ServiceAccount linkerd/default may not act on the spec this would set") {
		t.Errorf("recover --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = f.run("recover", "--yes")
	for _, want := range []string{
		"dataPlaneRestart.policy: Automatic needs it to patch deployments.apps in namespace emojivoto",
		"helm upgrade -n linkerd trust-rotation-operator <chart> --reuse-values --set rotation.spec.dataPlaneRestart.policy=Automatic, then run this again",
		"nothing was changed",
	} {
		if code == ExitOK || !strings.Contains(errOut, want) {
			t.Errorf("recover --yes with the operator denied restarts: exit %d, want it to say %q\n%s%s", code, want, out, errOut)
		}
	}
	if spec := f.rotations["cluster"].Spec; spec.IdentityIssuerRenewal != "" || spec.DataPlaneRestart.Policy != "" || issuing(t, f, "cert-manager", "linkerd-trust-anchor") {
		t.Errorf("changed something: spec %+v", spec)
	}
}

// The mesh's rollout is measured by the latest completed rotation that restarted the data plane,
// even one whose restart took under a second (the history's grain), which records 0s.
func TestMeshRollout(t *testing.T) {
	at := func(s string) *metav1.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		mt := metav1.NewTime(tm)
		return &mt
	}
	rec := func(rotation string, finished string, outcome v1alpha1.RotationOutcome, phases ...v1alpha1.PhaseDuration) v1alpha1.RotationRecord {
		return v1alpha1.RotationRecord{Rotation: rotation, FinishTime: at(finished), Outcome: outcome, Phases: phases}
	}
	propagate := func(d time.Duration) v1alpha1.PhaseDuration {
		return v1alpha1.PhaseDuration{Phase: v1alpha1.PhasePropagatingTrustRoots, Duration: metav1.Duration{Duration: d}}
	}
	other := v1alpha1.PhaseDuration{Phase: v1alpha1.PhaseRefreshingControlPlane, Duration: metav1.Duration{Duration: 3 * time.Second}}
	for _, tc := range []struct {
		name    string
		history []v1alpha1.RotationRecord
		want    string
	}{
		{"none", nil, "No completed rotation in status.history"},
		{"sub-second restart is the latest", []v1alpha1.RotationRecord{
			rec("bbbbbbbbbbbbbbbb", "2026-12-03T02:25:30Z", v1alpha1.RotationCompleted, other, propagate(0)),
			rec("aaaaaaaaaaaaaaaa", "2026-12-03T02:25:04Z", v1alpha1.RotationCompleted, propagate(7*time.Second)),
		}, "(to anchor bbbbbbbbbbbb, finished 2026-12-03T02:25:30Z) spent under a second in PropagatingTrustRoots"},
		{"superseded and phase-less rotations are passed over", []v1alpha1.RotationRecord{
			rec("cccccccccccccccc", "2026-12-03T03:00:00Z", v1alpha1.RotationSuperseded, propagate(time.Minute)),
			rec("bbbbbbbbbbbbbbbb", "2026-12-03T02:25:30Z", v1alpha1.RotationCompleted, other),
			rec("aaaaaaaaaaaaaaaa", "2026-12-03T02:25:04Z", v1alpha1.RotationCompleted, propagate(1400*time.Millisecond), other, propagate(5*time.Second)),
		}, "(to anchor aaaaaaaaaaaa, finished 2026-12-03T02:25:04Z) spent 6s in PropagatingTrustRoots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := meshRollout(tc.history); !strings.Contains(got, tc.want) {
				t.Errorf("meshRollout = %q, want it to contain %q", got, tc.want)
			}
		})
	}
}
