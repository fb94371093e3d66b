package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// shortIssuerLifetime is the identity issuer's lifetime in TestRecoveryFromExpiredIssuer: long
// enough for identity to load it and one workload to be restarted onto it, short enough to
// expire within the test. cert-manager renews it a third of it before it expires (renewBefore,
// 25h in the bed, exceeds it), so the test stops cert-manager as soon as it has issued it.
const shortIssuerLifetime = time.Minute

// TestRecoveryFromExpiredIssuer is case 2 of docs/design/recovery.md, end to end: cert-manager
// is down (its controller process stopped) while the identity issuer expires; the anchor stays
// valid. The pods of the workload restarted onto that issuer lose mTLS when it expires (identity
// caps their certificates at its expiry and then refuses to sign); the others, on an issuer
// still valid, keep it. The operator reports it (status, `check`) and, under
// spec.identityIssuerRenewal Automatic, triggers the renewal; once cert-manager runs again the
// renewed issuer reaches the Secret, identity reloads it and each cut-off proxy gets a
// certificate at its next retry — with no restart of anything, and no pair that verified when
// cert-manager came back broken. The oracle measures the outage before and after.
func TestRecoveryFromExpiredIssuer(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The shape of the tests around it on the shared cluster (see TestRotationHistory).
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1, ChartSet: []string{"rotation.spec.identityIssuerRenewal=Automatic"}},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	t.Cleanup(func() { e.restoreDefaults(c) })
	const ns, name = "linkerd", "linkerd-identity-issuer"
	certs := c.CertManager().CertmanagerV1().Certificates(ns)
	crt, err := certs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setDuration := func(d time.Duration) {
		t.Helper()
		p := fmt.Sprintf(`{"spec":{"duration":%q}}`, d.String())
		if _, err := certs.Patch(context.Background(), name, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var resume func() error
	t.Cleanup(func() {
		if resume != nil {
			if err := resume(); err != nil {
				t.Errorf("starting cert-manager again: %v", err)
			}
		}
		setDuration(crt.Spec.Duration.Duration)
		if !t.Failed() {
			return // the recovery left an issuer of the usual lifetime
		}
		// The next test starts from an issuer of the usual lifetime (the test's context is done).
		bg := context.Background()
		sec, err := c.Kube().CoreV1().Secrets(ns).Get(bg, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("reading the issuer after the test: %v", err)
			return
		}
		chain, err := steps.ParseCertificates(sec.Data["tls.crt"])
		if err != nil || len(chain) == 0 {
			t.Errorf("the issuer after the test: %v", err)
			return
		}
		if err := pki.Renew(bg, c.CertManager(), ns, name); err != nil {
			t.Errorf("renewing the issuer after the test: %v", err)
		} else if _, err := pki.WaitRenewed(bg, c.Kube(), c.CertManager(), ns, name, steps.Fingerprint(chain[0]), 2*time.Minute); err != nil {
			t.Errorf("renewing the issuer after the test: %v", err)
		}
	})

	// A short-lived issuer, loaded by identity; cert-manager stopped before it renews it.
	setDuration(shortIssuerLifetime)
	short := e.Renew(ns, name)
	if resume, err = c.Suspend(cluster.CertManagerController); err != nil {
		t.Fatal(err)
	}
	if got := short.NotAfter.Sub(short.NotBefore); got > 2*shortIssuerLifetime {
		t.Fatalf("cert-manager issued an issuer valid for %s, want %s", got, shortIssuerLifetime)
	}
	e.waitIdentityOn(short)
	web := e.Apps[:1]
	e.Restart(web)
	onShort := func(s meshsim.PodState) bool { return s.Workload == web[0].Name && s.Namespace == web[0].Namespace }
	if err := e.Mesh.WaitForCertificates(ctx, 2, onShort); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.Mesh.Pods() {
		if onShort(s) && s.IssuerFingerprint != steps.Fingerprint(short) {
			t.Fatalf("%s presents a certificate of issuer %s, want the short-lived %s", s.PodRef, steps.ShortFingerprint(s.IssuerFingerprint), steps.ShortFingerprint(steps.Fingerprint(short)))
		}
	}
	restartsBefore := e.Mesh.RolloutStats()
	expired := short.NotAfter

	// Expired: web's pods are cut off, the others are not; the operator says so and triggers
	// the renewal, which cert-manager, stopped, does not perform.
	if _, err := e.Mesh.Oracle().WaitForViolation(ctx, expired); err != nil {
		t.Fatalf("no pair failed once the issuer expired: %v", err)
	}
	tar, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the renewal of the expired issuer triggered", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && strings.Contains(tar.Status.BlockingMessage, "waiting for cert-manager to re-issue Certificate "+ns+"/"+name)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"the identity issuer in Secret " + ns + "/" + name + " expired at", "linkerd-identity refuses every certificate request",
		"meshed pod(s) on an expired issuer, without a valid certificate now, e.g. " + web[0].Namespace + "/" + web[0].Name + "-"} {
		if !strings.Contains(tar.Status.BlockingMessage, want) {
			t.Errorf("blockingMessage does not say %q: %s", want, tar.Status.BlockingMessage)
		}
	}
	e.checkEvents(expired, ReasonIssuerRenewalEvent)
	if out, code := e.cliExit("check"); code == 0 || !strings.Contains(out, "expired") {
		t.Errorf("linkerd-trust check with an expired issuer: exit %d\n%s", code, out)
	}
	// linkerd trust recover says the same in plain numbers: web's pods without a valid
	// certificate, nothing to restart, and the spec already what the recovery runs under.
	out := e.cli("recover", "--dry-run")
	for _, want := range []string{"Recovery (IdentityIssuerExpired): the identity issuer in Secret " + ns + "/" + name + " expired at",
		fmt.Sprintf("without a valid certificate now (expired at): %d pod(s)", 2), "It restarts: nothing: no pod restarts"} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --dry-run does not say %q\n%s", want, out)
		}
	}
	if out := e.cli("recover", "--yes"); !strings.Contains(out, "already has the spec the recovery runs under") {
		t.Errorf("recover --yes with identityIssuerRenewal Automatic already set:\n%s", out)
	}
	acted := e.issuingSince(ns, name)
	for _, s := range e.Mesh.Pods() {
		if s.Component == "" && !onShort(s) && !s.LeafNotAfter.After(time.Now()) {
			t.Errorf("%s, on an issuer still valid, has no valid certificate (leaf expired at %s)", s.PodRef, s.LeafNotAfter)
		}
	}

	// cert-manager runs again: the triggered renewal goes through, identity reloads the renewed
	// issuer, and the proxies' retries bring every pair back.
	setDuration(crt.Spec.Duration.Duration)
	back := time.Now()
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	resume = nil
	renewedFP, err := pki.WaitRenewed(ctx, c.Kube(), c.CertManager(), ns, name, steps.Fingerprint(short), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	renewedAt := time.Now()
	renewed := e.SecretCert(ns, name)
	e.waitIdentityOn(renewed)
	loadedAt := time.Now()
	if err := e.Mesh.Oracle().WaitFor(ctx, func(s meshsim.OracleStatus) bool { return s.ActiveViolations == 0 && s.PodsWithoutCertificate == 0 }); err != nil {
		t.Fatal(err)
	}
	restoredAt := time.Now()
	for _, s := range e.Mesh.Pods() {
		if onShort(s) && s.IssuerFingerprint != renewedFP {
			t.Errorf("%s presents a certificate of issuer %s after the recovery, want the renewed %s", s.PodRef, steps.ShortFingerprint(s.IssuerFingerprint), steps.ShortFingerprint(renewedFP))
		}
	}
	if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "Synced with nothing to report", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.BlockingMessage == ""
	}); err != nil {
		t.Fatal(err)
	}

	// Nothing was restarted to recover: not a workload, not identity.
	if after := e.Mesh.RolloutStats(); fmt.Sprint(after.Restarts) != fmt.Sprint(restartsBefore.Restarts) || fmt.Sprint(after.ControlPlaneRestarts) != fmt.Sprint(restartsBefore.ControlPlaneRestarts) {
		t.Errorf("restarts during the recovery: workloads %v → %v, control plane %v → %v", restartsBefore.Restarts, after.Restarts, restartsBefore.ControlPlaneRestarts, after.ControlPlaneRestarts)
	}
	oracle := e.Mesh.Oracle()
	down, recovering := oracle.Outage(expired, back), oracle.Outage(back, restoredAt)
	if recovering.Started != 0 {
		t.Errorf("a pair that verified when cert-manager came back broke during the recovery: %s\n%v", recovering, oracle.ViolationsSince(back))
	}
	if after := oracle.Outage(restoredAt, time.Time{}); after.Down != 0 {
		t.Errorf("pairs failing after every pair verified again: %s", after)
	}
	t.Logf("issuer expired at %s; the operator triggered its renewal %s later (cert-manager down)", expired.Format(time.RFC3339), acted.Sub(expired).Round(time.Second))
	t.Logf("while cert-manager was down: %s", down)
	t.Logf("from cert-manager back to every pair verifying: %s; renewed issuer in the Secret after %s, loaded by identity after %s, every pair verifying %s after that",
		recovering, renewedAt.Sub(back).Round(time.Second), loadedAt.Sub(back).Round(time.Second), restoredAt.Sub(loadedAt).Round(time.Second))
}

// waitIdentityOn waits until every identity pod signs with the issuer.
func (e *Env) waitIdentityOn(issuer *x509.Certificate) {
	e.T.Helper()
	fp := steps.Fingerprint(issuer)
	if err := poll.Until(e.Ctx, time.Minute, "identity on issuer "+steps.ShortFingerprint(fp), func(context.Context) (bool, error) {
		ids := e.Mesh.Identities()
		for _, id := range ids {
			if id.IssuerFingerprint != fp {
				return false, nil
			}
		}
		return len(ids) > 0, nil
	}); err != nil {
		e.T.Fatalf("%v: %+v", err, e.Mesh.Identities())
	}
}

// issuingSince is when the Certificate's Issuing condition turned True (the renewal triggered).
func (e *Env) issuingSince(namespace, name string) time.Time {
	e.T.Helper()
	crt, err := e.Cluster.CertManager().CertmanagerV1().Certificates(namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == "True" && c.LastTransitionTime != nil {
			return c.LastTransitionTime.Time
		}
	}
	e.T.Fatalf("Certificate %s/%s is not Issuing: %+v", namespace, name, crt.Status.Conditions)
	return time.Time{}
}
