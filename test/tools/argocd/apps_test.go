package argocd

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/argo/normalizers"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// repoRoot is this repository's root, from test/tools/argocd.
var repoRoot = filepath.Join("..", "..", "..")

// applications reads every Application of the example (root.yaml and apps/) into Argo CD's own
// type, strictly: a misspelt field fails.
func applications(t *testing.T) map[string]*appv1.Application {
	t.Helper()
	dir := filepath.Join(repoRoot, "manifests", "argocd")
	files, err := filepath.Glob(filepath.Join(dir, "apps", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Applications in %s/apps: %v", dir, err)
	}
	apps := map[string]*appv1.Application{}
	for _, f := range append(files, filepath.Join(dir, "root.yaml")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		app := &appv1.Application{}
		if err := yaml.UnmarshalStrict(data, app); err != nil {
			t.Fatalf("%s is not an Argo CD Application: %v", f, err)
		}
		if app.Kind != "Application" || app.APIVersion != "argoproj.io/v1alpha1" {
			t.Fatalf("%s: %s %s, want an argoproj.io/v1alpha1 Application", f, app.APIVersion, app.Kind)
		}
		apps[app.Name] = app
	}
	return apps
}

// The example's Applications sync in the order the README promises: the PKI, the CRDs (Linkerd's
// and the operator's, in one wave), the operator (which bootstraps the trust bundle), then Linkerd.
func TestApplicationsSyncInOrder(t *testing.T) {
	apps := applications(t)
	if w := apps["linkerd-crds"].Annotations["argocd.argoproj.io/sync-wave"]; w != apps["trust-rotation-operator-crds"].Annotations["argocd.argoproj.io/sync-wave"] {
		t.Errorf("linkerd-crds is in wave %q, not with trust-rotation-operator-crds", w)
	}
	order := []string{"linkerd-pki", "linkerd-crds", "trust-rotation-operator", "linkerd-control-plane"}
	wave := map[string]int{}
	for _, name := range order {
		app, ok := apps[name]
		if !ok {
			t.Fatalf("no Application %s", name)
		}
		w, err := strconv.Atoi(app.Annotations["argocd.argoproj.io/sync-wave"])
		if err != nil {
			t.Fatalf("%s: sync wave: %v", name, err)
		}
		wave[name] = w
	}
	for i := 1; i < len(order); i++ {
		if wave[order[i-1]] >= wave[order[i]] {
			t.Errorf("%s (wave %d) must sync before %s (wave %d)", order[i-1], wave[order[i-1]], order[i], wave[order[i]])
		}
	}
}

// Every chart is pinned to one version: Argo CD resolves "*" (or a range) to whatever was
// published last, and would upgrade the PKI, the operator or Linkerd behind everyone's back. The
// project's own charts are pinned to the versions in charts/*/Chart.yaml, and pulled from the
// registry that holds the operator's image.
func TestChartsArePinned(t *testing.T) {
	exact := regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	image := chartImage(t)
	for name, app := range applications(t) {
		src := app.Spec.GetSource()
		if src.Chart == "" {
			continue
		}
		if !exact.MatchString(src.TargetRevision) {
			t.Errorf("Application %s: chart %s targetRevision %q is not one exact version", name, src.Chart, src.TargetRevision)
		}
		chartYAML := filepath.Join(repoRoot, "charts", src.Chart, "Chart.yaml")
		data, err := os.ReadFile(chartYAML)
		if os.IsNotExist(err) {
			continue // not one of this project's charts
		} else if err != nil {
			t.Fatal(err)
		}
		var chart struct {
			Version string `json:"version"`
		}
		if err := yaml.Unmarshal(data, &chart); err != nil {
			t.Fatal(err)
		}
		if src.TargetRevision != chart.Version {
			t.Errorf("Application %s: chart %s targetRevision %s, but %s says %s", name, src.Chart, src.TargetRevision, chartYAML, chart.Version)
		}
		if registry := strings.TrimSuffix(src.RepoURL, "/charts"); !strings.HasPrefix(image, registry+"/") {
			t.Errorf("Application %s pulls chart %s from %s, but the chart's image is %s: use one registry", name, src.Chart, src.RepoURL, image)
		}
	}
}

// Everything the example installs is open source and shipped where it says: Linkerd's charts
// from Linkerd's own Helm repository (not a vendor's distribution), at one release; this
// project's charts from its registry; the PKI from this repository's manifests, a file that
// exists, pinned to a tag.
func TestSourcesAreOpenSource(t *testing.T) {
	linkerdCharts := map[string]string{}
	for name, app := range applications(t) {
		src := app.Spec.GetSource()
		switch {
		case name == "linkerd-trust-rotation": // root.yaml: the user's GitOps repository
		case src.Chart == "linkerd-crds" || src.Chart == "linkerd-control-plane":
			if src.RepoURL != "https://helm.linkerd.io/edge" {
				t.Errorf("Application %s pulls Linkerd's %s from %s, want Linkerd's open-source repository https://helm.linkerd.io/edge", name, src.Chart, src.RepoURL)
			}
			linkerdCharts[src.Chart] = src.TargetRevision
		case src.Chart != "":
			if _, err := os.Stat(filepath.Join(repoRoot, "charts", src.Chart, "Chart.yaml")); err != nil {
				t.Errorf("Application %s installs chart %s, which is neither Linkerd's nor this repository's", name, src.Chart)
			}
		default:
			if src.RepoURL != "https://github.com/linkerd/trust-rotation.git" || !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(src.TargetRevision) {
				t.Errorf("Application %s syncs %s at %q, want this repository at a release tag", name, src.RepoURL, src.TargetRevision)
			}
			if src.Directory == nil || src.Directory.Include == "" {
				t.Errorf("Application %s syncs all of %s, want one file (directory.include)", name, src.Path)
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, src.Path, src.Directory.Include)); err != nil {
				t.Errorf("Application %s: %v", name, err)
			}
		}
	}
	if len(linkerdCharts) != 2 || linkerdCharts["linkerd-crds"] != linkerdCharts["linkerd-control-plane"] {
		t.Errorf("Linkerd's charts: %v, want linkerd-crds and linkerd-control-plane at one version", linkerdCharts)
	}
}

// chartImage is the operator chart's default image repository.
func chartImage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "charts", "trust-rotation-operator", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	return values.Image.Repository
}

// The project names its image and its charts' registry one way everywhere: the chart, the
// manifests and every document.
func TestOneRegistryName(t *testing.T) {
	image := chartImage(t)
	registry := image[:strings.LastIndex(image, "/")]
	ref := regexp.MustCompile(`[a-z0-9.-]+\.io/[a-z0-9-]+/(charts/)?trust-rotation[a-z-]*`)
	for _, dir := range []string{".", "charts", "manifests", "docs"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != filepath.Join(repoRoot, dir) && (dir == "." || strings.HasPrefix(d.Name(), ".")) {
					return filepath.SkipDir // the root's own files only; its directories are listed
				}
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range ref.FindAllString(string(data), -1) {
				if !strings.HasPrefix(m, registry+"/") {
					t.Errorf("%s names %s, not in %s (the chart's image is %s)", path, m, registry, image)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The TrustAnchorRotation's status is the rotation's checkpoint: the operator's Application has
// the chart annotate it so that Argo CD never prunes or deletes it (test/charts renders the
// chart with these values and checks the annotation).
func TestTrustAnchorRotationIsNeverPruned(t *testing.T) {
	app := applications(t)["trust-rotation-operator"]
	if app == nil {
		t.Fatal("no Application trust-rotation-operator")
	}
	src := app.Spec.GetSource()
	var values struct {
		Rotation struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"rotation"`
	}
	if src.Helm == nil || src.Helm.ValuesObject == nil {
		t.Fatal("the Application sets no chart values")
	}
	if err := yaml.Unmarshal(src.Helm.ValuesObject.Raw, &values); err != nil {
		t.Fatal(err)
	}
	if got := values.Rotation.Annotations["argocd.argoproj.io/sync-options"]; got != "Prune=false,Delete=false" {
		t.Errorf("rotation.annotations sets argocd.argoproj.io/sync-options %q, want Prune=false,Delete=false", got)
	}
}

// operatorAnnotations reads the annotations the operator writes on workloads from the steps
// package: every exported constant named *Annotation but the ones it only reads. A new one fails
// this test until it is classified here, and covered by the ignoreDifferences below.
func operatorAnnotations(t *testing.T) (podTemplate, workload []string) {
	t.Helper()
	readOnly := map[string]bool{
		"TrustRootSHA256Annotation": true, // written by Linkerd's injector
		// Helm's, on the trust-roots ConfigMap and the issuer Secret: a takeover reads them to
		// ask the user for the keep annotation (steps/takeover.go), and writes none.
		"HelmReleaseNameAnnotation": true, "HelmReleaseNamespaceAnnotation": true, "HelmResourcePolicyAnnotation": true,
	}
	onWorkload := map[string]bool{"EvictedForAnnotation": true} // the rest are pod-template annotations
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(repoRoot, "steps"), func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if !strings.HasSuffix(n.Name, "Annotation") || !n.IsExported() || readOnly[n.Name] {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Fatalf("steps.%s is not a string literal", n.Name)
						}
						v := constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
						if onWorkload[n.Name] {
							workload = append(workload, v)
						} else {
							podTemplate = append(podTemplate, v)
						}
					}
				}
			}
		}
	}
	sort.Strings(podTemplate)
	sort.Strings(workload)
	if want := []string{"config.linkerd.io/proxy-additional-env", "kubectl.kubernetes.io/restartedAt", "trust.linkerd.io/refresh-override"}; !slices.Equal(podTemplate, want) {
		t.Fatalf("the operator writes the pod-template annotations %v; this test knows %v", podTemplate, want)
	}
	if want := []string{"trust.linkerd.io/evicted-for"}; !slices.Equal(workload, want) {
		t.Fatalf("the operator writes the workload annotations %v; this test knows %v", workload, want)
	}
	return podTemplate, workload
}

// workloadObjects is a workload as Git holds it, with annotations of its own, and the same one
// live after the operator restarted it: every annotation the operator writes, on the pod
// template or the workload, set or changed.
func workloadObjects(kind string, podTemplate, workload []string, gitAdditionalEnv bool) (git, live *unstructured.Unstructured) {
	tmplAnn := map[string]any{"linkerd.io/inject": "enabled"}
	if gitAdditionalEnv {
		tmplAnn["config.linkerd.io/proxy-additional-env"] = `[{"name":"RUST_LOG","value":"info"}]`
	}
	git = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": kind,
		"metadata": map[string]any{"name": "web", "namespace": "emojivoto", "annotations": map[string]any{"team": "emoji"}},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}, "annotations": tmplAnn},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "example.com/web:1"}}},
			},
		},
	}}
	live = git.DeepCopy()
	for _, a := range podTemplate {
		_ = unstructured.SetNestedField(live.Object, "written by the operator", "spec", "template", "metadata", "annotations", a)
	}
	for _, a := range workload {
		_ = unstructured.SetNestedField(live.Object, "written by the operator", "metadata", "annotations", a)
	}
	return git, live
}

// Argo CD's own ignoreDifferences normalizer, with the rules of the Linkerd control plane's
// Application (and argocd-cm.yaml's overrides), makes a workload the operator restarted equal to
// what Git holds, for Deployments, StatefulSets and DaemonSets; and the Application keeps the
// rules on sync.
func TestIgnoreDifferencesCoverWhatTheOperatorWrites(t *testing.T) {
	podTemplate, workload := operatorAnnotations(t)
	app := applications(t)["linkerd-control-plane"]
	if app == nil {
		t.Fatal("no Application linkerd-control-plane")
	}
	if app.Spec.SyncPolicy == nil || !app.Spec.SyncPolicy.SyncOptions.HasOption("RespectIgnoreDifferences=true") {
		t.Error("linkerd-control-plane does not respect its ignoreDifferences on sync: a sync would undo the operator's restarts")
	}
	overrides := resourceOverrides(t)
	normalizer, err := normalizers.NewIgnoreNormalizer(app.Spec.IgnoreDifferences, overrides, normalizers.IgnoreNormalizerOpts{})
	if err != nil {
		t.Fatal(err)
	}
	none, err := normalizers.NewIgnoreNormalizer(nil, overrides, normalizers.IgnoreNormalizerOpts{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		for _, gitEnv := range []bool{false, true} {
			t.Run(kind+"/proxy-additional-env in Git "+strconv.FormatBool(gitEnv), func(t *testing.T) {
				git, live := workloadObjects(kind, podTemplate, workload, gitEnv)
				// Without the rules, Argo CD sees the operator's writes as a difference.
				g, l := git.DeepCopy(), live.DeepCopy()
				if err := none.Normalize(g); err != nil {
					t.Fatal(err)
				}
				if err := none.Normalize(l); err != nil {
					t.Fatal(err)
				}
				if equality.Semantic.DeepEqual(g.Object, l.Object) {
					t.Fatal("the live object does not differ from Git without ignoreDifferences: the test checks nothing")
				}
				if err := normalizer.Normalize(git); err != nil {
					t.Fatal(err)
				}
				if err := normalizer.Normalize(live); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(git.Object, live.Object) {
					gy, _ := yaml.Marshal(git.Object)
					ly, _ := yaml.Marshal(live.Object)
					t.Errorf("after linkerd-control-plane's ignoreDifferences, the %s still differs from Git:\nGit:\n%s\nlive:\n%s", kind, gy, ly)
				}
			})
		}
	}
}
