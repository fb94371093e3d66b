package e2e

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// automationValues turn both automations on: restarts by rollout within a budget of two
// workloads at once (one per namespace), automatic issuer renewal, a 10s accelerated interval.
var automationValues = []string{
	"rotation.spec.workloadCertificateRefreshInterval=10s",
	"rotation.spec.dataPlaneRestart.policy=Automatic",
	"rotation.spec.dataPlaneRestart.maxConcurrent=2",
	"rotation.spec.dataPlaneRestart.maxConcurrentPerNamespace=1",
	"rotation.spec.identityIssuerRenewal=Automatic",
}

// TestHandsOffRotation rotates with nobody in the loop: cert-manager renews the anchor on its own
// schedule and the operator does everything else (data-plane restarts, the issuer renewal),
// under the chart's ServiceAccount with the RBAC the automation values add, the oracle watching.
func TestHandsOffRotation(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ChartSet: automationValues}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	t.Cleanup(func() { e.restoreDefaults(c) })
	start := time.Now()

	t.Run("TwoRestartsPerWorkload", func(t *testing.T) {
		e := *e
		e.T = t
		e.Mesh.ResetRolloutStats()
		since := time.Now()
		_, newAnchor := e.letCertManagerRenewAnchor()
		tar := e.waitSyncedOn(newAnchor, 6*time.Minute)
		stats := e.Mesh.RolloutStats()
		for _, w := range e.Apps {
			if n := stats.Restarts[w.String()]; n != 2 {
				t.Errorf("%s restarted %d times, want 2 (expanded bundle, reduced bundle)", w, n)
			}
		}
		if stats.MaxConcurrent > 2 || stats.MaxConcurrentPerNamespace > 1 {
			t.Errorf("budget exceeded: %d workloads rolling at once (max 2), %d in one namespace (max 1)\n%s", stats.MaxConcurrent, stats.MaxConcurrentPerNamespace, stats.Peak)
		}
		if tar.Status.WorkloadCertificateRefreshInterval != nil {
			t.Errorf("Synced with the refresh override still in effect: %v", tar.Status.WorkloadCertificateRefreshInterval)
		}
		e.checkNoOverrideLeft()
		e.checkEvents(since, ReasonWorkloadsRestartedEvent, ReasonIssuerRenewalEvent)
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("FallbackRestartWhenProxiesIgnoreTheInterval", func(t *testing.T) {
		e := *e
		e.T = t
		if e.Mesh.Real() {
			t.Skip("a proxy injector that ignores config.linkerd.io/proxy-additional-env (Linkerd before edge-26.4.3) is a fault only the simulator makes; Linkerd's own injector here honours it")
		}
		e.Mesh.SetIgnoreAdditionalEnv(true)
		defer e.Mesh.SetIgnoreAdditionalEnv(false)
		e.Mesh.ResetRolloutStats()
		since := time.Now()
		newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
		e.waitSyncedOn(newAnchor, 6*time.Minute)
		stats := e.Mesh.RolloutStats()
		for _, w := range e.Apps {
			if n := stats.Restarts[w.String()]; n != 3 {
				t.Errorf("%s restarted %d times, want 3 (the certificate fallback included)", w, n)
			}
		}
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("EvictionHeldByMaintenanceWindowAndPDB", func(t *testing.T) {
		e := *e
		e.T = t
		// The window opens at a full minute and lasts an hour: the first full minute at least
		// 40s away, so that the operator has time to report the hold before it opens (the
		// anchor's renewal and its detection take seconds).
		opens := time.Now().UTC().Add(40 * time.Second).Truncate(time.Minute).Add(time.Minute)
		window := fmt.Sprintf(`rotation.spec.dataPlaneRestart.maintenanceWindows=[{"start":%q,"end":%q}]`, opens.Format("15:04"), opens.Add(time.Hour).Format("15:04"))
		if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: append(append([]string{}, automationValues...), "rotation.spec.dataPlaneRestart.method=Evict"), SetJSON: []string{window}}); err != nil {
			t.Fatal(err)
		}
		// A PodDisruptionBudget that allows no disruption of one workload.
		blocked := e.Apps[0]
		pdbs := c.Kube().PolicyV1().PodDisruptionBudgets(blocked.Namespace)
		minAvailable := intstr.FromInt32(2)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: blocked.Name, Namespace: blocked.Namespace},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": blocked.Name}}},
		}
		if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pdbs.Delete(context.Background(), blocked.Name, metav1.DeleteOptions{}) }()
		since := time.Now()
		e.Mesh.ResetRolloutStats()
		starts := proxyStarts(&e)

		renewed := time.Now()
		newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
		if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Until(opens), "restarts held outside the maintenance window",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				return strings.Contains(tar.Status.BlockingMessage, "the next maintenance window opens at "+opens.Format(time.RFC3339))
			}); err != nil {
			t.Fatalf("%v (the anchor renewed %s before the window opened)", err, opens.Sub(renewed).Round(time.Second))
		}
		t.Logf("restarts held %s after the anchor's renewal, %s before the window opens",
			time.Since(renewed).Round(100*time.Millisecond), time.Until(opens).Round(100*time.Millisecond))
		// Counted first, then the clock read: every start counted happened before the window.
		if got := proxyStarts(&e); time.Now().Before(opens) && got != starts {
			t.Fatalf("pods were replaced before the maintenance window opened: %d proxy starts, want %d", got, starts)
		}
		// Once the window opens, evictions start; the PDB holds its workload with a clear message.
		want := fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption of %s/Deployment/%s", blocked.Namespace, blocked.Name, blocked.Namespace, blocked.Name)
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 4*time.Minute, "the rotation parked on the PDB",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				return tar.Status.Phase == v1alpha1.PhasePropagatingTrustRoots && strings.Contains(tar.Status.BlockingMessage, want) &&
					tar.Status.TrustBundle != nil && tar.Status.TrustBundle.TargetPods-tar.Status.TrustBundle.ConvergedPods == 2
			}); err != nil {
			t.Fatal(err)
		}
		// The PDB allows one disruption at a time: the rotation goes on by itself.
		if _, err := pdbs.Patch(ctx, blocked.Name, types.MergePatchType, []byte(`{"spec":{"minAvailable":1}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitSyncedOn(newAnchor, 6*time.Minute)
		// The budget holds under Evict too: an evicted workload counts as restarting until its
		// Deployment's status, changed since the eviction, shows it rolled out and its evicted
		// pods are replaced — what the simulator counts is the Deployments' status.
		stats := e.Mesh.RolloutStats()
		t.Logf("rollouts seen under Evict: restarts %v, at most %d at once, %d in one namespace", stats.Restarts, stats.MaxConcurrent, stats.MaxConcurrentPerNamespace)
		if stats.MaxConcurrent > 2 || stats.MaxConcurrentPerNamespace > 1 {
			t.Errorf("budget exceeded under Evict: %d workloads rolling at once (max 2), %d in one namespace (max 1)\n%s", stats.MaxConcurrent, stats.MaxConcurrentPerNamespace, stats.Peak)
		}
		if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
			t.Fatalf("mTLS violations: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("ScheduledRotate", func(t *testing.T) {
		e := *e
		e.T = t
		testScheduledRotate(&e, c)
	})
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Fatalf("mTLS violations: %v", err)
	}
}

// testScheduledRotate installs the chart's CronJob, runs its `linkerd-trust rotate` under its
// ServiceAccount: it starts a rotation when Synced, refuses and changes nothing while one is in
// progress, and its ServiceAccount may do what rotate needs and nothing more.
func testScheduledRotate(e *Env, c *cluster.Cluster) {
	t, ctx := e.T, e.Ctx
	rel, err := charts.Install(ctx, c, charts.InstallOptions{Set: append(append([]string{}, automationValues...), "rotationSchedule=0 3 1 * *")})
	if err != nil {
		t.Fatal(err)
	}
	cj, err := c.Kube().BatchV1().CronJobs(rel.Namespace).Get(ctx, "trust-rotation-operator-rotate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cj.Spec.Schedule != "0 3 1 * *" || cj.Spec.ConcurrencyPolicy != "Forbid" {
		t.Errorf("CronJob schedule %q, concurrencyPolicy %s", cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	sa, args := pod.ServiceAccountName, pod.Containers[0].Args
	if sa == rel.ServiceAccount || len(args) == 0 || args[0] != "rotate" {
		t.Fatalf("CronJob runs %v as %s (the operator is %s)", args, sa, rel.ServiceAccount)
	}
	user := cluster.ServiceAccountUser(rel.Namespace, sa)
	kubeconfig, err := c.KubeconfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	run := func() (string, int) {
		cmd := exec.CommandContext(ctx, Binary(t, "linkerd-trust"), append(append([]string{}, args...), "--kubeconfig", kubeconfig)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		return string(out), code
	}

	old := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	out, code := run()
	if code != 0 || !strings.Contains(out, "Triggered the renewal of Certificate cert-manager/linkerd-trust-anchor") {
		t.Fatalf("rotate on a Synced rotation: exit %d\n%s", code, out)
	}
	fp, err := pki.WaitRenewed(ctx, c.Kube(), c.CertManager(), "cert-manager", "linkerd-trust-anchor", steps.Fingerprint(old), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "the rotation under way", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase != v1alpha1.PhaseSynced
	}); err != nil {
		t.Fatal(err)
	}
	// cert-manager may still write the Certificate's status after the renewal, so "unchanged"
	// means: no version of it between before and after the refusal asks for an issuance.
	seen := watchCertificate(t, ctx, c, "cert-manager", "linkerd-trust-anchor")
	out, code = run()
	if code != 1 || !strings.Contains(out, "a rotation is in progress") || !strings.Contains(out, "Not rotating") {
		t.Fatalf("rotate during a rotation: exit %d, want 1 with the reason\n%s", code, out)
	}
	versions := seen()
	t.Logf("Certificate cert-manager/linkerd-trust-anchor: %d versions written around the refusal", len(versions))
	for _, crt := range versions {
		for _, cond := range crt.Status.Conditions {
			if cond.Type == cmapi.CertificateConditionIssuing && cond.Reason == apply.ReasonManuallyTriggered {
				t.Errorf("rotate triggered a renewal of Certificate cert-manager/linkerd-trust-anchor while refusing (resourceVersion %s: Issuing=%s, %s)",
					crt.ResourceVersion, cond.Status, cond.Reason)
			}
		}
	}
	anchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	if steps.Fingerprint(anchor) != fp {
		t.Fatalf("the anchor changed again")
	}
	e.waitSyncedOn(anchor, 6*time.Minute)

	// Exactly what rotate needs: the objects it reads by name, the anchor's status; nothing else.
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + rel.Namespace, "system:authenticated"}
	for _, tc := range []struct {
		ns, group, resource, sub, verb, name string
		allowed                              bool
	}{
		{"", "trust.linkerd.io", "trustanchorrotations", "", "get", rotationName, true},
		{"cert-manager", "cert-manager.io", "certificates", "status", "update", "linkerd-trust-anchor", true},
		{"cert-manager", "cert-manager.io", "certificates", "", "get", "linkerd-trust-anchor", true},
		{"linkerd", "cert-manager.io", "certificates", "", "get", "linkerd-identity-issuer", true},
		{"cert-manager", "cert-manager.io", "issuers", "", "get", "linkerd-trust-root-issuer", true},
		{"", "cert-manager.io", "clusterissuers", "", "get", "linkerd-identity-issuer", true},
		{"cert-manager", "", "secrets", "", "get", "linkerd-trust-anchor", false},
		{"linkerd", "", "secrets", "", "get", "linkerd-identity-issuer", false},
		{"linkerd", "cert-manager.io", "certificates", "status", "update", "linkerd-identity-issuer", false},
		{"cert-manager", "cert-manager.io", "certificates", "", "update", "linkerd-trust-anchor", false},
		{"cert-manager", "cert-manager.io", "certificates", "", "list", "", false},
		{"", "trust.linkerd.io", "trustanchorrotations", "status", "update", rotationName, false},
		{"app-0", "apps", "deployments", "", "patch", "svc-0", false},
		{"linkerd", "", "configmaps", "", "get", "linkerd-identity-trust-roots", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tc.ns, Group: tc.group, Resource: tc.resource,
				Subresource: tc.sub, Verb: tc.verb, Name: tc.name}}}
		res, err := c.Kube().AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s %s in %q: allowed %v, want %v", tc.verb, tc.resource, tc.sub, tc.name, tc.ns, res.Status.Allowed, tc.allowed)
		}
	}
}

// watchCertificate starts watching Certificate namespace/name; the function it returns stops
// the watch and returns every version of the Certificate written since the watch started, up to
// the version the apiserver holds at that moment.
func watchCertificate(t testing.TB, ctx context.Context, c *cluster.Cluster, namespace, name string) func() []*cmapi.Certificate {
	t.Helper()
	certs := c.CertManager().CertmanagerV1().Certificates(namespace)
	start, err := certs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := certs.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: start.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	return func() []*cmapi.Certificate {
		t.Helper()
		defer w.Stop()
		end, err := certs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var seen []*cmapi.Certificate
		if end.ResourceVersion == start.ResourceVersion {
			return nil
		}
		timeout := time.After(time.Minute)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch of Certificate %s/%s ended before resourceVersion %s", namespace, name, end.ResourceVersion)
				}
				crt, ok := ev.Object.(*cmapi.Certificate)
				if !ok {
					t.Fatalf("watching Certificate %s/%s: %s %T", namespace, name, ev.Type, ev.Object)
				}
				seen = append(seen, crt)
				if crt.ResourceVersion == end.ResourceVersion {
					return seen
				}
			case <-timeout:
				t.Fatalf("the watch of Certificate %s/%s did not reach resourceVersion %s within a minute", namespace, name, end.ResourceVersion)
			}
		}
	}
}

// restoreDefaults leaves the cluster as the other tests expect it: the charts' defaults, Synced.
func (e *Env) restoreDefaults(c *cluster.Cluster) {
	t := e.T
	e.Mesh.SetIgnoreAdditionalEnv(false)
	ctx := context.Background()
	// A value, even a default one: without any, Helm 3 would reuse the previous values.
	if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: []string{"rotation.spec.dataPlaneRestart.policy=Manual"}}); err != nil {
		t.Errorf("restoring the charts' defaults: %v", err)
	}
	// And the rotation's spec itself, whatever Helm's three-way merge made of it.
	if err := e.resetSpec(ctx); err != nil {
		t.Errorf("restoring the rotation's default spec: %v", err)
	}
}

// TestRestartsWithoutRollout rotates hands-off (RolloutRestart) with two StatefulSets whose pods
// a template change never replaces — one with updateStrategy OnDelete, one with a partition
// above all its pods — beside the Deployments: the operator evicts their pods within the budget,
// leaves their templates alone, and the rotation completes, the oracle watching.
func TestRestartsWithoutRollout(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, StatefulSets: 2, ChartSet: automationValues},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })
	t.Cleanup(func() {
		e.removeStatefulSets()
		e.restoreDefaults(c)
	})
	sets := c.Kube().AppsV1().StatefulSets
	strategies := map[string]string{
		"db-0": `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`,
		"db-1": `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":2}}}}`,
	}
	podUIDs := map[string]map[types.UID]bool{} // the StatefulSets' pods before the rotation
	var stateful []string
	for _, w := range e.Apps {
		if w.Kind != meshsim.KindStatefulSet {
			continue
		}
		if _, err := sets(w.Namespace).Patch(ctx, w.Name, types.MergePatchType, []byte(strategies[w.Name]), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		pods, err := c.Kube().CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + w.Name})
		if err != nil || len(pods.Items) != 2 {
			t.Fatalf("pods of %s: %v (%d)", w, err, len(pods.Items))
		}
		podUIDs[w.String()] = map[types.UID]bool{}
		for _, p := range pods.Items {
			podUIDs[w.String()][p.UID] = true
		}
		stateful = append(stateful, w.String())
	}
	if len(stateful) != 2 {
		t.Fatalf("StatefulSets %v, want 2", stateful)
	}
	since := time.Now()
	e.Mesh.ResetRolloutStats()
	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	e.waitSyncedOn(newAnchor, 6*time.Minute)

	stats := e.Mesh.RolloutStats()
	for _, w := range e.Apps {
		n := stats.Restarts[w.String()]
		if w.Kind != meshsim.KindStatefulSet {
			if n != 2 {
				t.Errorf("%s restarted %d times, want 2 (expanded bundle, reduced bundle)", w, n)
			}
			continue
		}
		if n != 0 {
			t.Errorf("%s: its template was restarted %d times; a template change does not replace its pods", w, n)
		}
		ss, err := sets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ss.Annotations[steps.EvictedForAnnotation] == "" {
			t.Errorf("%s carries no %s: its pods were not evicted by the operator", w, steps.EvictedForAnnotation)
		}
		for _, a := range []string{steps.RefreshOverrideAnnotation, steps.AdditionalEnvAnnotation} {
			if v, ok := ss.Spec.Template.Annotations[a]; ok {
				t.Errorf("%s: the operator changed its template (%s=%s)", w, a, v)
			}
		}
		pods, err := c.Kube().CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + w.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if podUIDs[w.String()][p.UID] {
				t.Errorf("%s: pod %s was never replaced", w, p.Name)
			}
		}
	}
	if stats.MaxConcurrent > 2 || stats.MaxConcurrentPerNamespace > 1 {
		t.Errorf("budget exceeded: %d workloads rolling at once (max 2), %d in one namespace (max 1)\n%s", stats.MaxConcurrent, stats.MaxConcurrentPerNamespace, stats.Peak)
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
		t.Fatalf("mTLS violations: %v", err)
	}
}

// Event reasons the operator records for the automations' acts.
const (
	ReasonWorkloadsRestartedEvent = "WorkloadsRestarted"
	ReasonIssuerRenewalEvent      = "IdentityIssuerRenewalTriggered"
)

// letCertManagerRenewAnchor makes cert-manager renew the trust anchor by itself: it shortens the
// Certificate's renewBefore so that its renewal time is past, waits for the new anchor, and puts
// renewBefore back before the next renewal is due.
func (e *Env) letCertManagerRenewAnchor() (oldAnchor, newAnchor *x509.Certificate) {
	t, ctx := e.T, e.Ctx
	oldAnchor = e.SecretCert("cert-manager", "linkerd-trust-anchor")
	certs := e.Cluster.CertManager().CertmanagerV1().Certificates("cert-manager")
	crt, err := certs.Get(ctx, "linkerd-trust-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewBefore := crt.Spec.RenewBefore.Duration
	short := crt.Spec.Duration.Duration - time.Minute // renew one minute after issuance: now
	patch := func(d time.Duration) {
		t.Helper()
		p := fmt.Sprintf(`{"spec":{"renewBefore":%q}}`, d.String())
		if _, err := certs.Patch(ctx, "linkerd-trust-anchor", types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(short)
	defer patch(renewBefore)
	if _, err := pki.WaitRenewed(ctx, e.Cluster.Kube(), e.Cluster.CertManager(), "cert-manager", "linkerd-trust-anchor", steps.Fingerprint(oldAnchor), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	return oldAnchor, e.SecretCert("cert-manager", "linkerd-trust-anchor")
}

// waitSyncedOn waits until the rotation to anchor completed.
func (e *Env) waitSyncedOn(anchor *x509.Certificate, timeout time.Duration) *v1alpha1.TrustAnchorRotation {
	e.T.Helper()
	fp := steps.Fingerprint(anchor)
	tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, timeout, "Synced on anchor "+fp[:12], func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.PreviousAnchorFingerprint == fp &&
			stepOf(tar) == steps.StepDetectAnchorRotation && tar.Status.BlockingMessage == ""
	})
	if err != nil {
		e.T.Fatal(err)
	}
	return tar
}

// checkNoOverrideLeft fails unless no application pod template keeps the operator's refresh
// override or a proxy-additional-env annotation it created.
func (e *Env) checkNoOverrideLeft() {
	e.T.Helper()
	for _, w := range e.Apps {
		d, err := e.Cluster.Kube().AppsV1().Deployments(w.Namespace).Get(e.Ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			e.T.Fatal(err)
		}
		for _, a := range []string{steps.RefreshOverrideAnnotation, steps.AdditionalEnvAnnotation} {
			if v, ok := d.Spec.Template.Annotations[a]; ok {
				e.T.Errorf("%s keeps %s=%s after the rotation", w, a, v)
			}
		}
	}
}

// checkEvents fails unless the operator recorded an Event of each reason since the time. It
// waits for them a while: client-go's event recorder sends Events in the background, so one may
// reach the apiserver after the status write that the test saw.
func (e *Env) checkEvents(since time.Time, reasons ...string) {
	e.T.Helper()
	missing := reasons
	err := poll.Until(e.Ctx, 30*time.Second, "the operator's Events", func(ctx context.Context) (bool, error) {
		evs, err := e.Cluster.Kube().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, poll.Pending("listing Events: %v", err)
		}
		missing = nil
		for _, r := range reasons {
			found := false
			for _, ev := range evs.Items {
				if ev.Reason == r && ev.InvolvedObject.Kind == "TrustAnchorRotation" && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
					found = true
				}
			}
			if !found {
				missing = append(missing, r)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		for _, r := range missing {
			e.T.Errorf("no %s Event since %s", r, since.Format(time.RFC3339))
		}
	}
}

func proxyStarts(e *Env) int {
	n := 0
	for _, w := range e.Apps {
		n += e.Mesh.ProxyStarts(w.Namespace, w.Name)
	}
	return n
}

// resetSpec puts the TrustAnchorRotation's spec back to its defaults: no automation.
func (e *Env) resetSpec(ctx context.Context) error {
	return e.patchSpec(ctx, `{"spec":{"workloadCertificateRefreshInterval":"5m","identityIssuerRenewal":"Manual","strategy":"Standard","naturalChurnPeriod":"168h",`+
		`"stalledAfter":{"default":"1h","identityIssuerRenewal":"24h"},`+
		`"dataPlaneRestart":{"policy":"Manual","method":"RolloutRestart","maxConcurrent":5,"maxConcurrentPerNamespace":1,`+
		`"namespaceSelector":null,"workloadSelector":null,"maintenanceWindows":null},"suspend":null,"takeover":null,"staleIssuerRestart":"Manual"}}`)
}

// patchSpec merge-patches the TrustAnchorRotation (PatchSpec).
func (e *Env) patchSpec(ctx context.Context, patch string) error { return e.PatchSpec(ctx, patch) }
