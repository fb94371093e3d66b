// Package charts runs the project's Helm charts (charts/) with the real helm binaries the test
// bed builds (helm3 and helm4, see scripts/tools.sh): rendering, linting, and installing both
// charts into a local test cluster (test/cluster). Install returns what a test needs to run the
// operator out of cluster with exactly the chart's identity and arguments: a kubeconfig that
// acts as the chart's ServiceAccount (so the chart's RBAC is what authorises every request) and
// the flags of the installed Deployment.
package charts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/test/cluster"
)

// Chart names: the directories under charts/.
const (
	CRDChart      = "trust-rotation-operator-crds"
	OperatorChart = "trust-rotation-operator"
)

// Helm is one helm binary.
type Helm struct {
	// Name is "helm3" or "helm4", the binary's name in the tools directory.
	Name string
	// Bin is the binary's path.
	Bin string
	// Home isolates helm's cache, configuration and data from the user's (HELM_*_HOME).
	Home string
}

// Helms returns Helm 3 and Helm 4 from the test bed's tools directory (cluster.BinDir), with
// their state under home.
func Helms(ctx context.Context, home string) ([]Helm, error) {
	dir, err := cluster.BinDir(ctx)
	if err != nil {
		return nil, err
	}
	var out []Helm
	for _, name := range []string{"helm3", "helm4"} {
		bin := filepath.Join(dir, name)
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%s is missing from the tools directory %s (scripts/tools.sh build %s): %w", name, dir, name, err)
		}
		out = append(out, Helm{Name: name, Bin: bin, Home: filepath.Join(home, name)})
	}
	return out, nil
}

// ChartPath returns the directory of the named chart in this repository.
func ChartPath(name string) (string, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", name), nil
}

// Run runs helm with args (and KUBECONFIG=kubeconfig when not empty) and returns its stdout; a
// failure carries stderr.
func (h Helm) Run(ctx context.Context, kubeconfig string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"),
	)
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// WaitDelay bounds the wait for helm's pipes after ctx kills it.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", h.Name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// Template renders a chart of this repository as release in namespace, with --set values.
func (h Helm) Template(ctx context.Context, chart, release, namespace string, set ...string) ([]byte, error) {
	path, err := ChartPath(chart)
	if err != nil {
		return nil, err
	}
	args := []string{"template", release, path, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return h.Run(ctx, "", args...)
}

// Decode splits rendered YAML into objects, skipping empty documents.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// Find returns the rendered object of kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// InstallOptions choose how Install installs the charts. The zero value installs both charts
// with Helm 3 into the linkerd namespace with the default values.
type InstallOptions struct {
	// Helm installs the charts; the zero value means Helm 3 from the tools directory.
	Helm Helm
	// Namespace of both releases (default linkerd, as in README). It must exist.
	Namespace string
	// Set are --set values of the operator chart, and SetJSON its --set-json values.
	Set     []string
	SetJSON []string
	// Timeout bounds each `helm upgrade --install --wait` (default 3 minutes).
	Timeout time.Duration
	// Repository, when set, installs the charts from an OCI registry, as a user does, rather
	// than from charts/: oci://<registry>/<path>, holding both charts at Version (see
	// Publish). PlainHTTP reaches a registry without TLS, such as the test bed's.
	Repository string
	Version    string
	PlainHTTP  bool
	// Hooks keeps the chart's Helm hook Jobs (values hooks.*), which are off otherwise: kwok
	// completes a Job's pods without running anything, so a hook means something only where the
	// test runs its pods (cluster.PodRunnerLabel, hooks.podLabels) while Install waits for them.
	Hooks bool
}

// Release is both charts installed into a cluster.
type Release struct {
	Namespace string
	// ServiceAccount is the operator's ServiceAccount, and User the name it authenticates as.
	ServiceAccount, User string
	// Kubeconfig and RESTConfig act as the ServiceAccount (impersonated by the cluster admin:
	// RBAC authorises every request exactly as for the ServiceAccount's own token).
	Kubeconfig string
	RESTConfig *rest.Config
	// Deployment is the operator Deployment as installed.
	Deployment *appsv1.Deployment
	// OperatorArgs are the operator container's arguments in the installed Deployment, without
	// --admin-addr and --v (log verbosity): add --kubeconfig=Kubeconfig, an admin address and a
	// verbosity of your own to run the operator out of cluster as the chart configures it. Run it
	// with POD_NAMESPACE set to Namespace, as the Deployment does.
	OperatorArgs []string
}

// Install installs (or upgrades) the CRD chart and then the operator chart into c with
// `helm upgrade --install --wait`, which returns once the CRD is established and the operator
// Deployment's pods are ready (kwok runs them: nothing executes inside), and returns the
// release's identity and arguments.
func Install(ctx context.Context, c *cluster.Cluster, opts InstallOptions) (*Release, error) {
	if opts.Namespace == "" {
		opts.Namespace = "linkerd"
	}
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	if opts.Helm.Bin == "" {
		home, err := os.MkdirTemp("", "trust-rotation-helm-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(home)
		helms, err := Helms(ctx, home)
		if err != nil {
			return nil, err
		}
		opts.Helm = helms[0]
	}
	for _, rel := range []struct {
		chart        string
		set, setJSON []string
	}{{CRDChart, nil, nil}, {OperatorChart, operatorSet(opts), opts.SetJSON}} {
		path, err := ChartPath(rel.chart)
		if err != nil {
			return nil, err
		}
		var from []string
		if opts.Repository != "" {
			path = opts.Repository + "/" + rel.chart
			from = append(from, "--version", opts.Version)
			if opts.PlainHTTP {
				from = append(from, "--plain-http")
			}
		}
		args := append([]string{"upgrade", "--install", rel.chart, path, "--namespace", opts.Namespace,
			"--wait", "--timeout", opts.Timeout.String()}, from...)
		for _, s := range rel.set {
			args = append(args, "--set", s)
		}
		for _, s := range rel.setJSON {
			args = append(args, "--set-json", s)
		}
		if _, err := opts.Helm.Run(ctx, c.Kubeconfig(), args...); err != nil {
			return nil, err
		}
	}

	// The release's objects, as installed: the Deployment names the ServiceAccount and carries
	// the operator's flags.
	out, err := opts.Helm.Run(ctx, c.Kubeconfig(), "get", "manifest", OperatorChart, "--namespace", opts.Namespace)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(out)
	if err != nil {
		return nil, err
	}
	var name string
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			name = o.GetName()
		}
	}
	if name == "" {
		return nil, errors.New("the operator release has no Deployment")
	}
	dep, err := c.Kube().AppsV1().Deployments(opts.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	r := &Release{Namespace: opts.Namespace, Deployment: dep, ServiceAccount: dep.Spec.Template.Spec.ServiceAccountName}
	r.User = cluster.ServiceAccountUser(opts.Namespace, r.ServiceAccount)
	if r.Kubeconfig, err = c.KubeconfigFor(r.User); err != nil {
		return nil, err
	}
	r.RESTConfig = c.RESTConfigFor(r.User)
	for _, ctr := range dep.Spec.Template.Spec.Containers {
		if ctr.Name != "operator" {
			continue
		}
		for _, a := range ctr.Args {
			if !strings.HasPrefix(a, "--admin-addr") && !strings.HasPrefix(a, "--v=") {
				r.OperatorArgs = append(r.OperatorArgs, a)
			}
		}
	}
	if len(r.OperatorArgs) == 0 {
		return nil, fmt.Errorf("Deployment %s/%s has no operator container with arguments", opts.Namespace, name)
	}
	return r, nil
}

// operatorSet are the --set values of the operator chart: the hooks off unless asked for.
func operatorSet(opts InstallOptions) []string {
	if opts.Hooks {
		return opts.Set
	}
	return append([]string{"hooks.preflight.enabled=false", "hooks.waitReady.enabled=false"}, opts.Set...)
}

// Uninstall removes both releases. The TrustAnchorRotation and the CRD stay (the charts' keep
// policy).
func Uninstall(ctx context.Context, c *cluster.Cluster, h Helm, namespace string) error {
	var errs []error
	for _, rel := range []string{OperatorChart, CRDChart} {
		if _, err := h.Run(ctx, c.Kubeconfig(), "uninstall", rel, "--namespace", namespace, "--wait"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
