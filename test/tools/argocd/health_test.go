package argocd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/gitops-engine/pkg/health"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

const argoCDNamespace = "argocd"

// resourceOverrides reads manifests/argocd/argocd-cm.yaml the way Argo CD does: its settings
// manager, over a cluster that holds that ConfigMap (and the argocd-secret every Argo CD has),
// parses the resource.customizations.* keys into resource overrides.
func resourceOverrides(t *testing.T) map[string]appv1.ResourceOverride {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", "argocd", "argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(data, cm); err != nil {
		t.Fatalf("argocd-cm.yaml: %v", err)
	}
	if cm.Name != "argocd-cm" || cm.Namespace != argoCDNamespace {
		t.Fatalf("argocd-cm.yaml is ConfigMap %s/%s, want argocd/argocd-cm", cm.Namespace, cm.Name)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: argoCDNamespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}}}
	mgr := settings.NewSettingsManager(t.Context(), fake.NewClientset(cm, secret), argoCDNamespace)
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		t.Fatalf("Argo CD's settings manager rejects argocd-cm.yaml: %v", err)
	}
	return overrides
}

// healthOf evaluates obj's health as Argo CD's application controller does
// (controller/health.go): gitops-engine's GetResourceHealth with the resource overrides as
// util/lua's ResourceHealthOverrides, which runs the health check in Argo CD's Lua VM with the
// libraries Argo CD opens for it.
func healthOf(t *testing.T, overrides map[string]appv1.ResourceOverride, obj map[string]any) *health.HealthStatus {
	t.Helper()
	hs, err := health.GetResourceHealth(&unstructured.Unstructured{Object: obj}, lua.ResourceHealthOverrides(overrides))
	if err != nil {
		t.Fatalf("Argo CD's health check fails: %v", err)
	}
	if hs == nil {
		t.Fatal("Argo CD found no health check for the object")
	}
	return hs
}

// cond is a condition of the TrustAnchorRotation's status, as the operator writes it.
func cond(typ, status, reason, message string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": message,
		"lastTransitionTime": "2026-06-01T12:00:00Z", "observedGeneration": int64(2)}
}

// tar is a TrustAnchorRotation at generation 2 with the given status (none when nil).
func tar(status map[string]any) map[string]any {
	obj := map[string]any{
		"apiVersion": "trust.linkerd.io/v1alpha1", "kind": "TrustAnchorRotation",
		"metadata": map[string]any{"name": "cluster", "generation": int64(2)},
		"spec":     map[string]any{"workloadCertificateRefreshInterval": "5m"},
	}
	if status != nil {
		obj["status"] = status
	}
	return obj
}

// rotation is the status of a rotation in phase: Reconciling with the phase as reason, and
// Stalled or not, as the operator writes them.
func rotation(phase, step, waitReason, blocking string, stalled bool) map[string]any {
	stalledCond := cond("Stalled", "False", "NotStalled", "in phase "+phase+" since 2026-06-01T12:00:00Z; stalled after 1h")
	if stalled {
		stalledCond = cond("Stalled", "True", waitReason, "blocked in phase "+phase+" since 2026-06-01T12:00:00Z, longer than 1h: "+blocking)
	}
	return map[string]any{
		"phase": phase, "blockingMessage": blocking, "observedGeneration": int64(2),
		"lastPhaseTransitionTime": "2026-06-01T12:00:00Z",
		"checkpoint":              map[string]any{"step": step, "rotation": "ab12"},
		"conditions": []any{
			cond("OutOfOrderIssuerRotation", "False", "IssuerRotationInOrder", "identity issuer rotation is not ahead of trust-bundle convergence"),
			cond("Ready", "False", phase, blocking),
			cond("Reconciling", "True", phase, blocking),
			stalledCond,
		},
	}
}

// refused is the error of a workload patch the operator's RBAC does not allow.
const refused = `patching Deployment app-0/app-0: deployments.apps "app-0" is forbidden: User "system:serviceaccount:linkerd:trust-rotation-operator" cannot patch resource "deployments" in API group "apps" in the namespace "app-0"`

// actFailed is the status of a rotation whose act at propagate-trust-roots was refused, as the
// operator writes it: ActFailed, Ready and Reconciling with reason ActFailed, and Stalled once
// the failure lasts longer than the threshold.
func actFailed(stalled bool) map[string]any {
	failed := "step propagate-trust-roots: the operator's write failed (Forbidden): " + refused
	blocking := failed + "; retrying"
	stalledCond := cond("Stalled", "False", "NotStalled", "acts of step propagate-trust-roots failing since 2026-06-01T12:00:00Z; stalled after 1h")
	if stalled {
		stalledCond = cond("Stalled", "True", "Forbidden", "acts of step propagate-trust-roots failing since 2026-06-01T12:00:00Z, longer than 1h: "+refused)
	}
	return map[string]any{
		"phase": "PropagatingTrustRoots", "blockingMessage": blocking, "observedGeneration": int64(2),
		"checkpoint": map[string]any{"step": "propagate-trust-roots", "rotation": "ab12"},
		"actFailure": map[string]any{"step": "propagate-trust-roots", "reason": "Forbidden", "message": refused, "since": "2026-06-01T12:00:00Z"},
		"conditions": []any{
			cond("Ready", "False", "ActFailed", blocking),
			cond("Reconciling", "True", "ActFailed", blocking),
			stalledCond,
			cond("ActFailed", "True", "Forbidden", failed),
		},
	}
}

// suspended is the status of a rotation held by spec.suspend before an act.
func suspended() map[string]any {
	msg := "suspended (spec.suspend): the operator acts on nothing; next: step propagate-trust-roots would act (RestartingWorkloads): restarting 2 workload(s)"
	return map[string]any{
		"phase": "PropagatingTrustRoots", "blockingMessage": msg, "observedGeneration": int64(2),
		"checkpoint": map[string]any{"step": "propagate-trust-roots", "rotation": "ab12"},
		"conditions": []any{
			cond("Ready", "False", "Suspended", msg),
			cond("Reconciling", "True", "PropagatingTrustRoots", msg),
			cond("Stalled", "False", "Suspended", "suspended: a rotation held by spec.suspend is not stalled"),
			cond("Suspended", "True", "Suspended", msg),
		},
	}
}

func TestTrustAnchorRotationHealth(t *testing.T) {
	overrides := resourceOverrides(t)
	override, ok := overrides["trust.linkerd.io/TrustAnchorRotation"]
	if !ok || override.HealthLua == "" {
		t.Fatalf("Argo CD reads no TrustAnchorRotation health check from argocd-cm.yaml: %v", overrides)
	}
	if override.UseOpenLibs {
		t.Fatal("the health check must run with Argo CD's default libraries, without useOpenLibs")
	}

	synced := map[string]any{
		"phase": "Synced", "observedGeneration": int64(2), "checkpoint": map[string]any{"step": "detect-anchor-rotation"},
		"conditions": []any{
			cond("Ready", "True", "Synced", "no rotation in progress, and nothing blocks the operator"),
			cond("Reconciling", "False", "Synced", "no rotation in progress"),
			cond("Stalled", "False", "NotStalled", ""),
		},
	}
	cases := map[string]struct {
		status      map[string]any
		want        health.HealthStatusCode
		wantMessage string
	}{
		"no status yet": {nil, health.HealthStatusProgressing, "Waiting for the operator"},
		"a status without conditions, from an operator without them": {map[string]any{"phase": "Synced"},
			health.HealthStatusProgressing, "Waiting for the operator"},
		"Synced and Ready": {synced, health.HealthStatusHealthy, "no rotation in progress"},
		"Ready for an older generation of the spec": {func() map[string]any {
			s := map[string]any{}
			for k, v := range synced {
				s[k] = v
			}
			s["observedGeneration"] = int64(1)
			return s
		}(), health.HealthStatusProgressing, "latest spec"},
		"bootstrapping": {map[string]any{
			"phase": "Synced", "observedGeneration": int64(2), "checkpoint": map[string]any{"step": "bootstrap"},
			"conditions": []any{
				cond("Ready", "False", "Bootstrapping", "step bootstrap: Secret linkerd/linkerd-previous-anchor is missing"),
				cond("Reconciling", "True", "Bootstrapping", "step bootstrap: Secret linkerd/linkerd-previous-anchor is missing"),
				cond("Stalled", "False", "NotStalled", "in phase Synced since 2026-06-01T12:00:00Z; stalled after 1h"),
			},
		}, health.HealthStatusProgressing, "Bootstrapping: step bootstrap: Secret linkerd/linkerd-previous-anchor is missing"},
		"Synced but blocked for longer than the threshold": {map[string]any{
			"phase": "Synced", "observedGeneration": int64(2), "blockingMessage": "trust anchor Secret cert-manager/linkerd-trust-anchor not found",
			"conditions": []any{
				cond("Ready", "False", "TrustAnchorUnavailable", "trust anchor Secret cert-manager/linkerd-trust-anchor not found"),
				cond("Reconciling", "True", "TrustAnchorUnavailable", "trust anchor Secret cert-manager/linkerd-trust-anchor not found"),
				cond("Stalled", "True", "TrustAnchorUnavailable", "blocked in phase Synced since 2026-06-01T12:00:00Z, longer than 1h: trust anchor Secret cert-manager/linkerd-trust-anchor not found"),
			},
		}, health.HealthStatusDegraded, "TrustAnchorUnavailable: blocked in phase Synced"},
		"an act refused, within the threshold": {actFailed(false), health.HealthStatusProgressing,
			"ActFailed: step propagate-trust-roots: the operator's write failed (Forbidden): patching Deployment app-0/app-0"},
		"an act refused for longer than the threshold": {actFailed(true), health.HealthStatusDegraded,
			"Forbidden: acts of step propagate-trust-roots failing since 2026-06-01T12:00:00Z, longer than 1h: patching Deployment app-0/app-0"},
		"suspended mid-rotation": {suspended(), health.HealthStatusSuspended,
			"suspended (spec.suspend): the operator acts on nothing; next: step propagate-trust-roots would act"},
		"a TrustAnchorRotation the operator ignores": {map[string]any{
			"conditions": []any{cond("Ignored", "True", "NotDrivenByOperator", `the trust-rotation operator drives only TrustAnchorRotation "cluster" (its --rotation-name); this object is ignored`)},
		}, health.HealthStatusDegraded, `drives only TrustAnchorRotation "cluster"`},
	}
	for _, p := range []struct{ phase, step, waitReason, blocking string }{
		{"RefreshingControlPlane", "refresh-control-plane", "ControlPlaneRollingOut", "Waiting for the rollout of Deployment linkerd/linkerd-destination: 0 of 1 updated replicas are available"},
		{"PropagatingTrustRoots", "propagate-trust-roots", "TrustBundleConverging", "Waiting for 2 pod(s) to converge on the expanded trust bundle; restart: emojivoto/Deployment/web (2 pods)"},
		{"WaitingForRemoteClusters", "wait-for-remote-clusters", "RemoteClustersConverging", "Waiting for 1 remote cluster(s)"},
		{"WaitingForIdentityRotation", "wait-for-identity-issuer", "WaitingForIssuerRenewal", "Waiting for the identity issuer to be renewed onto the new trust anchor: cmctl renew -n linkerd linkerd-identity-issuer"},
		{"RenewingWorkloadCerts", "renew-workload-certificates", "WorkloadCertificatesRenewing", "Waiting for 3 pod(s) to present a certificate from the new identity issuer"},
		{"RemovingOldTrustRoots", "remove-old-trust-roots", "TrustBundleConverging", "Waiting for 2 pod(s) to converge on the reduced trust bundle"},
	} {
		cases[p.phase+", within its threshold"] = struct {
			status      map[string]any
			want        health.HealthStatusCode
			wantMessage string
		}{rotation(p.phase, p.step, p.waitReason, p.blocking, false), health.HealthStatusProgressing, p.phase + ": " + p.blocking}
		cases[p.phase+", stalled"] = struct {
			status      map[string]any
			want        health.HealthStatusCode
			wantMessage string
		}{rotation(p.phase, p.step, p.waitReason, p.blocking, true), health.HealthStatusDegraded,
			p.waitReason + ": blocked in phase " + p.phase + " since 2026-06-01T12:00:00Z, longer than 1h: " + p.blocking}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			hs := healthOf(t, overrides, tar(c.status))
			if hs.Status != c.want || !strings.Contains(hs.Message, c.wantMessage) {
				t.Errorf("health %s %q, want %s with %q", hs.Status, hs.Message, c.want, c.wantMessage)
			}
		})
	}
}

// Argo CD's Lua VM runs a health check without Lua's string and math libraries, and with os
// only through require("os"): the check above runs in an environment where a script that
// relies on them fails.
func TestArgoCDHealthChecksHaveNoStringOrMathLibrary(t *testing.T) {
	for _, script := range []string{
		`return {status = string.format("%s", "Healthy")}`,
		`return {status = "Healthy", message = tostring(math.floor(1.5))}`,
		`return {status = "Healthy", message = tostring(os.time())}`,
	} {
		overrides := map[string]appv1.ResourceOverride{"trust.linkerd.io/TrustAnchorRotation": {HealthLua: script}}
		hs, err := health.GetResourceHealth(&unstructured.Unstructured{Object: tar(nil)}, lua.ResourceHealthOverrides(overrides))
		if err == nil {
			t.Errorf("%s: health %+v, want an error", script, hs)
		}
	}
}

func TestApplicationHealth(t *testing.T) {
	overrides := resourceOverrides(t)
	app := func(status map[string]any) map[string]any {
		obj := map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
			"metadata": map[string]any{"name": "trust-rotation-operator", "namespace": argoCDNamespace}}
		if status != nil {
			obj["status"] = status
		}
		return obj
	}
	for name, c := range map[string]struct {
		status map[string]any
		want   health.HealthStatusCode
	}{
		"not synced yet": {nil, health.HealthStatusProgressing},
		"healthy":        {map[string]any{"health": map[string]any{"status": "Healthy"}}, health.HealthStatusHealthy},
		"degraded":       {map[string]any{"health": map[string]any{"status": "Degraded", "message": "stalled"}}, health.HealthStatusDegraded},
	} {
		t.Run(name, func(t *testing.T) {
			if hs := healthOf(t, overrides, app(c.status)); hs.Status != c.want {
				t.Errorf("health %s %q, want %s", hs.Status, hs.Message, c.want)
			}
		})
	}
}
