package reallinkerd_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// controlPlaneRecording is where the control plane `linkerd install` renders with cert-manager
// is recorded; TestControlPlaneMatchesLinkerd (test/meshsim) replays it against the
// simulator's control plane.
var controlPlaneRecording = filepath.Join("..", "meshsim", "testdata", "linkerd-install", "control-plane.yaml")

// controlPlaneDeployments are the Deployments of the recording: the ones the operator restarts.
var controlPlaneDeployments = []string{"linkerd-identity", "linkerd-destination", "linkerd-proxy-injector"}

// TestLinkerdInstallRendersTheControlPlane records, with -update and LINKERD_BIN, the
// control-plane Deployments the real `linkerd install` renders the way README installs
// Linkerd with cert-manager (identity.externalCA=true, identity.issuer.scheme=kubernetes.io/tls),
// verbatim. It needs a cluster: with an external CA, `linkerd install` reads the issuer Secret,
// and refuses to run before the Gateway API CRDs (from the gateway-api module this module
// requires) and Linkerd's own CRDs (`linkerd install --crds`) are installed. Go runs the tests
// of a package file by file in name order: this one after TestLinkerdCheckRunsTheExtension
// (check_test.go), whose recording expects a cluster without those CRDs, and before
// TestLinkerdIdentityJudgesIssuers (identity_test.go), which runs identity with the arguments
// recorded here.
func TestLinkerdInstallRendersTheControlPlane(t *testing.T) {
	bins := recordingBinaries(t, "TestControlPlaneMatchesLinkerd (test/meshsim)", recorder{what: "the real linkerd CLI", cli: true})
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	version, err := bins.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rendered := renderInstall(t, ctx, c, bins)

	var out strings.Builder
	fmt.Fprintf(&out, `# Recorded output of the real Linkerd CLI: the control-plane Deployments, verbatim.
# TestControlPlaneMatchesLinkerd compares the simulator's control plane with them. Do not edit:
# record again (go test ./test/reallinkerd -run TestLinkerdInstallRendersTheControlPlane -update
# with LINKERD_BIN set) when Linkerd changes what it renders.
#   linkerd: %s (linkerd version --client --short)
#   command: linkerd %s
#   cluster: the test bed with the Linkerd PKI issued by cert-manager (test/pki), the Gateway API
#            CRDs and 'linkerd install --crds'
`, version, strings.Join(installArgs, " "))
	found := map[string]bool{}
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var d appsv1.Deployment
		if yaml.Unmarshal([]byte(doc), &d) != nil || d.Kind != "Deployment" {
			continue
		}
		for _, name := range controlPlaneDeployments {
			if d.Name == name {
				found[name] = true
				fmt.Fprintf(&out, "---\n%s\n", strings.Trim(doc, "-\n"))
			}
		}
	}
	for _, name := range controlPlaneDeployments {
		if !found[name] {
			t.Errorf("linkerd %s rendered no Deployment %s", strings.Join(installArgs, " "), name)
		}
	}
	if t.Failed() {
		return
	}
	if err := os.MkdirAll(filepath.Dir(controlPlaneRecording), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(controlPlaneRecording, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// installArgs render the control plane the way README installs Linkerd with cert-manager.
var installArgs = []string{"install", "--set", "identity.externalCA=true", "--set", "identity.issuer.scheme=kubernetes.io/tls"}

// rendered caches what `linkerd install` rendered, for the recordings that run Linkerd's
// components with the configuration it rendered (linkerd-config, container args).
var rendered struct {
	sync.Mutex
	out []byte
}

// renderInstall prepares the shared cluster as `linkerd install` requires with an external CA
// (the Linkerd PKI issued by cert-manager, the Gateway API CRDs, `linkerd install --crds`) and
// returns what `linkerd install` renders, once per test binary.
func renderInstall(t *testing.T, ctx context.Context, c *cluster.Cluster, bins reallinkerd.Binaries) []byte {
	t.Helper()
	rendered.Lock()
	defer rendered.Unlock()
	if rendered.out != nil {
		return rendered.out
	}
	if _, err := pki.Install(ctx, c.Kube(), c.CertManager(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	run := func(name string, stdin []byte, args ...string) []byte {
		t.Helper()
		return runWithCluster(t, ctx, c, name, stdin, args...)
	}
	gatewayAPI := strings.TrimSpace(string(run("go", nil, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")))
	run("kubectl", nil, "apply", "--server-side", "-f", filepath.Join(gatewayAPI, "config", "crd", "standard"))
	run("kubectl", run(bins.CLI, nil, "install", "--crds"), "apply", "--server-side", "-f", "-")
	rendered.out = run(bins.CLI, nil, installArgs...)
	return rendered.out
}

// runWithCluster runs a command with the shared cluster's admin kubeconfig and returns its
// standard output; it fails the test if the command fails.
func runWithCluster(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig())
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stderr.String(), out)
	}
	return out
}
