package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/test/cluster"
)

// helms returns Helm 3 and Helm 4. The tests run real helm binaries, which a fresh machine must
// build first (minutes), so like the other tests of the test bed they are skipped under -short.
func helms(t *testing.T) []Helm {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: runs the helm binaries the test bed builds; run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	hs, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// allFeatures turns on every optional part of the operator chart.
var allFeatures = []string{
	"metrics.serviceMonitor.enabled=true",
	"metrics.prometheusRule.enabled=true",
	"dashboard.enabled=true",
}

func TestLint(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	for _, h := range helms(t) {
		for _, chart := range []string{CRDChart, OperatorChart} {
			t.Run(h.Name+"/"+chart, func(t *testing.T) {
				path, err := ChartPath(chart)
				if err != nil {
					t.Fatal(err)
				}
				if out, err := h.Run(ctx, "", "lint", "--strict", path); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
			})
		}
	}
}

// Helm 3 and Helm 4 render the same objects (whitespace aside), and each renders the same bytes
// twice: no random values, no lookups, nothing that would make a GitOps tool see drift.
func TestRenderIsDeterministic(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	hs := helms(t)
	for _, tc := range []struct {
		chart string
		set   []string
	}{{CRDChart, nil}, {OperatorChart, nil}, {OperatorChart, allFeatures}} {
		t.Run(tc.chart+"/"+strings.Join(tc.set, ","), func(t *testing.T) {
			var first []*unstructured.Unstructured
			for _, h := range hs {
				a, err := h.Template(ctx, tc.chart, tc.chart, "linkerd", tc.set...)
				if err != nil {
					t.Fatal(err)
				}
				b, err := h.Template(ctx, tc.chart, tc.chart, "linkerd", tc.set...)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("%s renders %s differently twice", h.Name, tc.chart)
				}
				objs, err := Decode(a)
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = objs
				} else if !reflect.DeepEqual(first, objs) {
					t.Errorf("%s and %s render %s to different objects", hs[0].Name, h.Name, tc.chart)
				}
			}
		})
	}
}

// The dashboard is valid JSON with the release's PKI names, and the alerts name the metrics the
// operator exports.
func TestDashboardAndAlerts(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	h := helms(t)[0]
	// Certificates named apart from their Secrets: the dashboard's variables and the alerts'
	// cmctl commands name Certificates (cert-manager's metrics and cmctl know those).
	out, err := h.Template(ctx, OperatorChart, OperatorChart, "linkerd", append(allFeatures, "certManager.namespace=pki",
		"certManager.trustAnchorCertificate=anchor-cert", "linkerd.identityIssuerCertificate=issuer-cert")...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	cm := toTyped[corev1.ConfigMap](t, Find(objs, "ConfigMap", "trust-rotation-operator-dashboard"))
	var dash struct {
		Panels     []struct{ Title string }
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["linkerd-trust-rotation.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if len(dash.Panels) < 5 {
		t.Errorf("dashboard has %d panels", len(dash.Panels))
	}
	wantVars := map[string]string{"anchor_namespace": "pki", "anchor_name": "anchor-cert", "issuer_namespace": "linkerd", "issuer_name": "issuer-cert"}
	for _, v := range dash.Templating.List {
		if want, ok := wantVars[v.Name]; ok {
			if v.Query != want {
				t.Errorf("dashboard variable %s defaults to %v, want %s", v.Name, v.Query, want)
			}
			delete(wantVars, v.Name)
		}
	}
	if len(wantVars) > 0 {
		t.Errorf("dashboard lacks the variables %v", wantVars)
	}
	if regexp.MustCompile(`__[A-Z_]+__`).MatchString(cm.Data["linkerd-trust-rotation.json"]) {
		t.Error("the dashboard has a placeholder left")
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v", cm.Labels)
	}
	rule := Find(objs, "PrometheusRule", "trust-rotation-operator")
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	text, _ := json.Marshal(rule.Object)
	// The expiry alerts read the operator's roles (its app.Role* constants), one alert each.
	for _, want := range []string{"TrustRotationBlocked", "trust_rotation_phase", "TrustAnchorExpiringSoon", "IdentityIssuerExpiringSoon", "BridgeCertificateExpiringSoon",
		"TrustRotationIdentityIssuerStale", `trust_rotation_identity_issuer_stale_pods{namespace=\"linkerd\"}`, "kubectl rollout restart -n linkerd deploy/linkerd-identity",
		`trust_rotation_certificate_expiration_timestamp_seconds{namespace=\"linkerd\", role=\"` + app.RoleTrustBundle + `\"}`,
		`role=\"` + app.RoleIdentityIssuer + `\"`, `role=\"` + app.RoleBridge + `\"`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("PrometheusRule lacks %s", want)
		}
	}
	for _, want := range []string{"cmctl renew -n linkerd issuer-cert", "Certificate linkerd/issuer-cert"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("PrometheusRule does not say %q", want)
		}
	}
	if strings.Contains(string(text), "linkerd-identity-issuer") {
		t.Error("PrometheusRule names the issuer's Secret where it means its Certificate")
	}
	if strings.Contains(string(text), "certmanager_certificate_expiration") {
		t.Error("the expiry alerts still read cert-manager's metrics: the operator exports its own")
	}
}

// The committed plain manifests are what `make manifests` renders now: the chart without its
// Helm hooks, which only a Helm release runs.
func TestManifestsAreRenderedFromTheChart(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	h := helms(t)[0]
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(root, "manifests", "trust-rotation-operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path, err := ChartPath(OperatorChart)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := h.Run(ctx, "", "template", OperatorChart, path, "--namespace", "linkerd", "--no-hooks")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Decode(rendered)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("manifests/trust-rotation-operator.yaml is stale: run make manifests")
	}
}

// The CRD chart installs exactly the CRD controller-gen generates, plus its labels and the keep
// policy.
func TestCRDChartShipsTheGeneratedCRD(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	generated, err := os.ReadFile(filepath.Join(root, "manifests", "crds", "trust.linkerd.io_trustanchorrotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Decode(generated)
	if err != nil || len(want) != 1 {
		t.Fatalf("decoding the generated CRD: %v (%d objects)", err, len(want))
	}
	for _, h := range helms(t) {
		for _, keep := range []bool{true, false} {
			out, err := h.Template(ctx, CRDChart, CRDChart, "linkerd", "keep="+map[bool]string{true: "true", false: "false"}[keep])
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(out)
			if err != nil || len(got) != 1 {
				t.Fatalf("%s: decoding the rendered CRD: %v (%d objects)", h.Name, err, len(got))
			}
			crd := got[0]
			if policy := crd.GetAnnotations()["helm.sh/resource-policy"]; (policy == "keep") != keep {
				t.Errorf("%s keep=%v: resource-policy %q", h.Name, keep, policy)
			}
			if crd.GetLabels()["app.kubernetes.io/name"] != CRDChart {
				t.Errorf("%s: CRD labels %v", h.Name, crd.GetLabels())
			}
			if !reflect.DeepEqual(crd.Object["spec"], want[0].Object["spec"]) {
				t.Errorf("%s: the chart's CRD spec differs from manifests/crds: run make generate", h.Name)
			}
			if crd.GetName() != want[0].GetName() {
				t.Errorf("%s: CRD name %s, want %s", h.Name, crd.GetName(), want[0].GetName())
			}
		}
	}
}

func TestSchemaRejectsBadValues(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	hs := helms(t)
	for name, tc := range map[string]struct {
		set  string
		want string // in helm's error
	}{
		"a replica count that is not a number":   {"replicaCount=two", "replicaCount"},
		"zero replicas":                          {"replicaCount=0", "replicaCount"},
		"an unknown pull policy":                 {"image.pullPolicy=Sometimes", "pullPolicy"},
		"a misspelt top-level value":             {"replicas=2", "replicas"},
		"a misspelt nested value":                {"rotation.crate=false", "crate"},
		"a refresh interval that is no duration": {"rotation.spec.workloadCertificateRefreshInterval=5 minutes", "workloadCertificateRefreshInterval"},
		"a digest that is a tag":                 {"image.digest=latest", "digest"},
		"a port out of range":                    {"metrics.service.port=70000", "port"},
		"a boolean that is a string":             {"rotation.create=maybe", "create"},
		"a lease duration without unit":          {"operator.leaderElection.leaseDuration=15", "leaseDuration"},
	} {
		for _, h := range hs {
			t.Run(h.Name+"/"+name, func(t *testing.T) {
				_, err := h.Template(ctx, OperatorChart, OperatorChart, "linkerd", tc.set)
				if err == nil {
					t.Fatalf("--set %s rendered; want a schema error", tc.set)
				}
				if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("--set %s: want a schema error naming %s, got: %v", tc.set, tc.want, err)
				}
			})
		}
	}
	// Values the schema cannot relate: no leader election with more than one replica.
	for _, h := range hs {
		_, err := h.Template(ctx, OperatorChart, OperatorChart, "linkerd", "operator.leaderElection.enabled=false", "replicaCount=2")
		if err == nil || !strings.Contains(err.Error(), "operator.leaderElection.enabled=false needs replicaCount=1 (got 2)") {
			t.Errorf("%s: leader election off with 2 replicas: want a clear refusal, got %v", h.Name, err)
		}
		if _, err := h.Template(ctx, OperatorChart, OperatorChart, "linkerd", "operator.leaderElection.enabled=false", "replicaCount=1"); err != nil {
			t.Errorf("%s: leader election off with 1 replica rejected: %v", h.Name, err)
		}
	}
	// And good values pass.
	for _, h := range hs {
		if _, err := h.Template(ctx, OperatorChart, OperatorChart, "linkerd", append(allFeatures,
			"image.digest=sha256:"+strings.Repeat("ab", 32), "replicaCount=3", "rotation.spec.workloadCertificateRefreshInterval=90s")...); err != nil {
			t.Errorf("%s: good values rejected: %v", h.Name, err)
		}
	}
}

func toTyped[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	if u == nil {
		t.Fatalf("missing %T", new(T))
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The Deployment meets the restricted Pod Security Standard, probes the admin endpoint and
// passes every PKI name to the operator; the RBAC follows the values.
func TestOperatorChartRendersWhatTheOperatorNeeds(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	h := helms(t)[0]
	out, err := h.Template(ctx, OperatorChart, "tro", "ops",
		"linkerd.namespace=mesh", "certManager.namespace=pki", "certManager.trustAnchorSecret=root",
		"linkerd.identityIssuerSecret=issuer", "linkerd.previousAnchorSecret=prev", "linkerd.trustRootsConfigMap=roots",
		"linkerd.controlPlane.identity=id", "rotation.name=main", "operator.leaderElection.name=lock",
		"image.digest=sha256:"+strings.Repeat("01", 32))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	full := "tro-trust-rotation-operator"
	dep := toTyped[appsv1.Deployment](t, Find(objs, "Deployment", full))
	if *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v is not restricted", psc)
	}
	ctr := pod.Containers[0]
	sc := ctr.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v is not restricted", sc)
	}
	if ctr.Image != "ghcr.io/linkerd/trust-rotation@sha256:"+strings.Repeat("01", 32) {
		t.Errorf("image %s, want the digest", ctr.Image)
	}
	if ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want memory requests and limits", ctr.Resources)
	}
	if p := ctr.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("liveness probe %+v", p)
	}
	if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("readiness probe %+v", p)
	}
	if len(ctr.Env) == 0 || ctr.Env[0].Name != "POD_NAMESPACE" || ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env %+v: want POD_NAMESPACE from the downward API", ctr.Env)
	}
	for _, arg := range []string{"--linkerd-namespace=mesh", "--cert-manager-namespace=pki", "--trust-anchor-secret=root",
		"--identity-issuer-secret=issuer", "--previous-anchor-secret=prev", "--trust-roots-configmap=roots",
		"--identity-deployment=id", "--rotation-name=main", "--leader-election-name=lock", "--leader-election-namespace=ops"} {
		if !slices.Contains(ctr.Args, arg) {
			t.Errorf("args %v lack %s", ctr.Args, arg)
		}
	}

	// Every namespaced permission is in a Role of its namespace, named after the values.
	rules := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		if o.GetKind() == "Role" {
			rules[o.GetNamespace()] = append(rules[o.GetNamespace()], toTyped[rbacv1.Role](t, o).Rules...)
		}
	}
	named := func(ns, resource, verb string) []string {
		var names []string
		for _, r := range rules[ns] {
			if slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				if len(r.ResourceNames) == 0 {
					return []string{"*"}
				}
				names = append(names, r.ResourceNames...)
			}
		}
		slices.Sort(names)
		return names
	}
	for _, tc := range []struct {
		ns, resource, verb string
		want               []string
	}{
		{"pki", "secrets", "get", []string{"root"}},
		{"pki", "secrets", "list", []string{"root"}},
		{"pki", "secrets", "create", nil},
		{"mesh", "secrets", "watch", []string{"issuer", "prev"}},
		{"mesh", "secrets", "patch", []string{"prev"}},
		{"mesh", "configmaps", "patch", []string{"roots"}},
		// The server-side apply that creates them is authorised by name.
		{"mesh", "secrets", "create", []string{"prev"}},
		{"mesh", "configmaps", "create", []string{"roots"}},
		{"mesh", "deployments", "patch", []string{"id", "linkerd-destination", "linkerd-proxy-injector"}},
		// restart-identity scales identity to 0 and back: identity alone.
		{"mesh", "deployments/scale", "patch", []string{"id"}},
		{"mesh", "secrets", "delete", nil},
		{"ops", "leases", "update", []string{"lock"}},
		{"default", "events", "create", []string{"*"}},
		{"default", "secrets", "get", nil},
	} {
		if got := named(tc.ns, tc.resource, tc.verb); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s in %s: names %v, want %v", tc.verb, tc.resource, tc.ns, got, tc.want)
		}
	}
	cr := toTyped[rbacv1.ClusterRole](t, Find(objs, "ClusterRole", full))
	for _, r := range cr.Rules {
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "configmaps") || slices.Contains(r.Resources, "deployments") {
			t.Errorf("ClusterRole grants %v cluster-wide", r)
		}
		// Every TrustAnchorRotation is read (the others are marked Ignored), but the spec is
		// never written and none is deleted.
		if slices.Contains(r.Resources, "trustanchorrotations") && slices.ContainsFunc(r.Verbs, func(v string) bool {
			return v == "update" || v == "patch" || v == "delete" || v == "deletecollection" || v == "*"
		}) {
			t.Errorf("ClusterRole rule %v may write or delete TrustAnchorRotations", r)
		}
	}
	for _, leftover := range []string{"__", "{{", "<no value>"} {
		if strings.Contains(string(out), leftover) {
			t.Errorf("the rendered chart contains %q", leftover)
		}
	}
	if tar := Find(objs, "TrustAnchorRotation", "main"); tar == nil {
		t.Error("no TrustAnchorRotation main")
	} else if v, _, _ := unstructured.NestedString(tar.Object, "spec", "workloadCertificateRefreshInterval"); v != "5m" {
		t.Errorf("TrustAnchorRotation spec.workloadCertificateRefreshInterval %q, want 5m", v)
	}
}

// The Argo CD example's Application renders the chart with its own values
// (manifests/argocd/apps/trust-rotation-operator.yaml, spec.source.helm.valuesObject): the
// TrustAnchorRotation then carries Argo CD's sync options that keep a sync from pruning or
// deleting it, besides Helm's keep policy, and the image comes from the registry the
// Application pulls the chart from.
func TestArgoCDApplicationValues(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	h := helms(t)[0]
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "manifests", "argocd", "apps", "trust-rotation-operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var app struct {
		Spec struct {
			Source struct {
				RepoURL string `json:"repoURL"`
				Chart   string `json:"chart"`
				Helm    struct {
					ValuesObject map[string]any `json:"valuesObject"`
				} `json:"helm"`
			} `json:"source"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &app); err != nil {
		t.Fatal(err)
	}
	if app.Spec.Source.Chart != OperatorChart {
		t.Fatalf("the Application installs chart %q, want %s", app.Spec.Source.Chart, OperatorChart)
	}
	values, err := yaml.Marshal(app.Spec.Source.Helm.ValuesObject)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, values, 0o600); err != nil {
		t.Fatal(err)
	}
	path, err := ChartPath(OperatorChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Run(ctx, "", "template", OperatorChart, path, "--namespace", "linkerd", "-f", file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	tar := Find(objs, "TrustAnchorRotation", "cluster")
	if tar == nil {
		t.Fatal("the chart renders no TrustAnchorRotation cluster with the Application's values")
	}
	ann := tar.GetAnnotations()
	if ann["argocd.argoproj.io/sync-options"] != "Prune=false,Delete=false" || ann["helm.sh/resource-policy"] != "keep" {
		t.Errorf("TrustAnchorRotation annotations %v, want argocd.argoproj.io/sync-options: Prune=false,Delete=false and helm.sh/resource-policy: keep", ann)
	}
	dep := toTyped[appsv1.Deployment](t, Find(objs, "Deployment", OperatorChart))
	registry := strings.TrimSuffix(app.Spec.Source.RepoURL, "/charts")
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, registry+"/") {
		t.Errorf("image %s is not in %s, the registry the Application pulls the chart from (%s)", img, registry, app.Spec.Source.RepoURL)
	}
}
