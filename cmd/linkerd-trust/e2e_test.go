package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/cmd/linkerd-trust/cli"
	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

func TestMain(m *testing.M) { os.Exit(cluster.ForTest(m, cluster.Options{Nodes: 1})) }

// e2e is the state the steps of TestEndToEnd share.
type e2e struct {
	t    *testing.T
	ctx  context.Context
	c    *cluster.Cluster
	kube kubernetes.Interface
	pki  *pki.PKI
}

// run runs linkerd-trust in this process against the cluster.
func (e *e2e) run(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	args = append(args, "--kubeconfig", e.c.Kubeconfig())
	code := cli.Main(e.ctx, args, &cli.Env{Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}

// kubectl runs kubectl against the cluster with stdin.
func (e *e2e) kubectl(stdin string, args ...string) string {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, "kubectl", append([]string{"--kubeconfig", e.c.Kubeconfig()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// until polls cond (no sleeping in between beyond the poll interval) until it holds.
func (e *e2e) until(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, timeout, true, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// checkOutput is Linkerd's schema for an extension's `check --output=json`
// (linkerd2 pkg/healthcheck: checkOutput, checkCategory, check), parsed as strictly as Linkerd.
type checkOutput struct {
	Success    bool `json:"success"`
	Categories []struct {
		Name   string `json:"categoryName"`
		Checks []struct {
			Description string `json:"description"`
			Hint        string `json:"hint,omitempty"`
			Error       string `json:"error,omitempty"`
			Result      string `json:"result"`
		} `json:"checks"`
	} `json:"categories"`
}

func parseCheck(t *testing.T, out string) checkOutput {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var co checkOutput
	if err := dec.Decode(&co); err != nil {
		t.Fatalf("check output does not parse as Linkerd's schema: %v\n%s", err, out)
	}
	for _, cat := range co.Categories {
		for _, ch := range cat.Checks {
			switch ch.Result {
			case "success":
				if ch.Error != "" || ch.Hint != "" {
					t.Errorf("%s: a successful check has an error or a hint", ch.Description)
				}
			case "warning", "error":
				if ch.Error == "" || !strings.HasPrefix(ch.Hint, cli.HintBase) {
					t.Errorf("%s: a failed check without error or hint into the docs: %+v", ch.Description, ch)
				}
			default:
				t.Errorf("%s: result %q is not one Linkerd knows", ch.Description, ch.Result)
			}
		}
	}
	return co
}

// failed returns the hint anchors of the checks that failed with an error.
func failed(co checkOutput) []string {
	var hints []string
	for _, cat := range co.Categories {
		for _, ch := range cat.Checks {
			if ch.Result == "error" {
				hints = append(hints, strings.TrimPrefix(ch.Hint, cli.HintBase))
			}
		}
	}
	return hints
}

// TestEndToEnd runs the CLI on a real cluster with the real cert-manager, the Linkerd PKI, the
// mesh simulator and the operator, in order: each step starts from the state the previous left.
func TestEndToEnd(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	p, err := pki.Install(ctx, c.Kube(), c.CertManager(), pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{t: t, ctx: ctx, c: c, kube: c.Kube(), pki: p}
	e.installCertManagerDeployment()

	for _, s := range []struct {
		name string
		fn   func(e *e2e)
	}{
		{"BundleAppliedWithKubectl", testBundle},
		{"CheckPreGreen", testCheckPreGreen},
		{"AdoptFromHelm", testAdoptFromHelm},
		{"AdoptFromTrustManager", testAdoptFromTrustManager},
		{"CheckPreFailsOnMissingPKIObject", testCheckPreMissing},
		{"RotationWithOperatorAndMesh", testRotation},
		{"CheckPreFailsWithoutCertManagerCRDs", testCheckNoCRDs},
	} {
		ok := t.Run(s.name, func(t *testing.T) {
			sub := *e
			sub.t = t
			s.fn(&sub)
		})
		if !ok {
			t.Fatalf("step %s failed; later steps depend on its end state", s.name)
		}
	}
}

// installCertManagerDeployment creates the Deployment the cert-manager chart creates, labelled
// like it; kwok runs its pod, and the controller itself runs as a process of the test cluster.
func (e *e2e) installCertManagerDeployment() {
	labels := map[string]string{"app.kubernetes.io/name": "cert-manager", "app.kubernetes.io/component": "controller", "app.kubernetes.io/instance": "cert-manager"}
	e.createDeployment("cert-manager", "cert-manager", labels)
}

func (e *e2e) createDeployment(ns, name string, labels map[string]string) {
	e.t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "quay.io/jetstack/cert-manager-controller:v1.21.2"}}},
			},
		},
	}
	if _, err := e.kube.AppsV1().Deployments(ns).Create(e.ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	e.until("Deployment "+ns+"/"+name+" to be available", time.Minute, func(ctx context.Context) (bool, error) {
		d, err := e.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas > 0, nil
	})
}

// applyBundle pipes `linkerd-trust bundle` into kubectl, as the README and every hint of the
// CLI say (cli.ApplyBundleCommand): server-side, under the operator's field manager.
func (e *e2e) applyBundle() string {
	e.t.Helper()
	out, errOut, code := e.run("bundle")
	if code != 0 {
		e.t.Fatalf("bundle: exit code %d: %s", code, errOut)
	}
	e.kubectl(out, "apply", "--server-side", "--field-manager="+steps.FieldManager, "-f", "-")
	return out
}

func (e *e2e) configMapBundle() string {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps("linkerd").Get(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return cm.Data[steps.TrustRootsKey]
}

func testBundle(e *e2e) {
	anchor, err := e.pki.Anchor(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.applyBundle()
	if got, want := e.configMapBundle(), steps.RenderBundle(anchor); got != want {
		e.t.Fatalf("kubectl applied a bundle that differs from steps.RenderBundle:\n%q\nwant\n%q", got, want)
	}
	// Applied as the hints say, the operator's field manager alone owns the bundle: the owner
	// check has nothing to warn of.
	cm, err := e.kube.CoreV1().ConfigMaps("linkerd").Get(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if owners := observe.BundleOwners(cm); len(owners) != 1 || owners[0].Manager != steps.FieldManager {
		e.t.Errorf("the applied bundle's %s is owned by %+v, want %s alone", steps.TrustRootsKey, owners, steps.FieldManager)
	}
	// JSON applies to the same bytes.
	out, _, code := e.run("bundle", "-o", "json")
	if code != 0 {
		e.t.Fatalf("bundle -o json: exit %d", code)
	}
	e.kubectl(out, "apply", "--server-side", "--field-manager="+steps.FieldManager, "-f", "-")
	if got := e.configMapBundle(); got != steps.RenderBundle(anchor) {
		e.t.Fatalf("JSON bundle applied different bytes: %q", got)
	}
}

func testCheckPreGreen(e *e2e) {
	out, errOut, code := e.run("check", "--pre")
	if code != 0 || !strings.HasSuffix(out, "Status check results are √\n") {
		e.t.Fatalf("check --pre: exit code %d, stderr %q:\n%s", code, errOut, out)
	}
	e.t.Logf("check --pre:\n%s", out)
	out, _, code = e.run("check", "--pre", "--output=json")
	co := parseCheck(e.t, out)
	if code != 0 || !co.Success || len(failed(co)) > 0 {
		e.t.Fatalf("check --pre -o json: exit %d:\n%s", code, out)
	}
	if len(co.Categories) != 2 {
		e.t.Errorf("--pre ran %d categories, want the 2 prerequisite ones", len(co.Categories))
	}
}

// testCheckPreMissing deletes each object of the Linkerd PKI in turn, checks that check --pre
// fails with that object's hint, and restores it.
func testCheckPreMissing(e *e2e) {
	cm := e.c.CertManager().CertmanagerV1()
	cases := []struct {
		name   string
		hint   string
		delete func(ctx context.Context) error
	}{
		{"Issuer", "l5d-trust-root-issuer", func(ctx context.Context) error {
			return cm.Issuers("cert-manager").Delete(ctx, "linkerd-trust-root-issuer", metav1.DeleteOptions{})
		}},
		{"anchor Certificate", "l5d-trust-anchor-certificate", func(ctx context.Context) error {
			return cm.Certificates("cert-manager").Delete(ctx, "linkerd-trust-anchor", metav1.DeleteOptions{})
		}},
		{"ClusterIssuer", "l5d-trust-identity-cluster-issuer", func(ctx context.Context) error {
			return cm.ClusterIssuers().Delete(ctx, "linkerd-identity-issuer", metav1.DeleteOptions{})
		}},
		{"issuer Certificate", "l5d-trust-identity-issuer-certificate", func(ctx context.Context) error {
			return cm.Certificates("linkerd").Delete(ctx, "linkerd-identity-issuer", metav1.DeleteOptions{})
		}},
	}
	for _, tc := range cases {
		e.t.Run(tc.name, func(t *testing.T) {
			if err := tc.delete(e.ctx); err != nil {
				t.Fatal(err)
			}
			out, _, code := e.run("check", "--pre", "-o", "json")
			co := parseCheck(t, out)
			if code != 1 || co.Success {
				t.Errorf("exit code %d, success %v; want 1, false", code, co.Success)
			}
			if hints := failed(co); !contains(hints, tc.hint) {
				t.Errorf("failed checks %v do not include %s:\n%s", hints, tc.hint, out)
			}
			table, _, _ := e.run("check", "--pre")
			if !strings.Contains(table, "see "+cli.HintBase+tc.hint+" for hints") || !strings.HasSuffix(table, "Status check results are ×\n") {
				t.Errorf("table output lacks the hint or the failed status:\n%s", table)
			}
			e.restorePKI()
		})
	}
	// The trust bundle is no prerequisite: the operator creates it when it starts. Without it
	// check --pre passes, warning with the bundle's hint.
	e.t.Run("trust bundle ConfigMap", func(t *testing.T) {
		if err := e.kube.CoreV1().ConfigMaps("linkerd").Delete(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		out, _, code := e.run("check", "--pre", "-o", "json")
		co := parseCheck(t, out)
		if code != 0 || !co.Success {
			t.Errorf("exit code %d, success %v; want 0, true:\n%s", code, co.Success, out)
		}
		var warned []string
		for _, cat := range co.Categories {
			for _, ch := range cat.Checks {
				if ch.Result == "warning" {
					warned = append(warned, strings.TrimPrefix(ch.Hint, cli.HintBase))
				}
			}
		}
		if !contains(warned, "l5d-trust-bundle") {
			t.Errorf("warnings %v do not include l5d-trust-bundle:\n%s", warned, out)
		}
		e.restorePKI()
	})
}

// restorePKI re-creates whatever PKI object is missing and waits until check --pre is green.
func (e *e2e) restorePKI() {
	e.t.Helper()
	if _, err := pki.Install(e.ctx, e.kube, e.c.CertManager(), pki.Options{}); err != nil {
		e.t.Fatal(err)
	}
	e.applyBundle()
	e.until("check --pre to pass again", time.Minute, func(context.Context) (bool, error) {
		_, _, code := e.run("check", "--pre")
		return code == 0, nil
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// testCheckNoCRDs removes cert-manager's CRDs (cert-manager objects go with them), checks the
// failure and its hint, and restores them and the PKI.
func testCheckNoCRDs(e *e2e) {
	crds := []string{"certificates.cert-manager.io", "issuers.cert-manager.io", "clusterissuers.cert-manager.io"}
	e.kubectl("", append([]string{"delete", "crd", "--wait=true"}, crds...)...)
	// Other cert-manager.io resources (certificaterequests) stay served: wait for these three.
	e.until("certificates, issuers and clusterissuers to leave discovery", time.Minute, func(context.Context) (bool, error) {
		list, err := e.kube.Discovery().ServerResourcesForGroupVersion("cert-manager.io/v1")
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == "certificates" || r.Name == "issuers" || r.Name == "clusterissuers" {
				return false, nil
			}
		}
		return true, nil
	})
	out, _, code := e.run("check", "--pre", "-o", "json")
	co := parseCheck(e.t, out)
	if code != 1 || !contains(failed(co), "l5d-trust-cm-crds") {
		e.t.Errorf("check --pre without cert-manager CRDs: exit %d, failed %v:\n%s", code, failed(co), out)
	}
	bin, err := cluster.BinDir(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	apply := []string{"apply", "--server-side"}
	for _, r := range []string{"certificates", "issuers", "clusterissuers"} {
		apply = append(apply, "-f", filepath.Join(bin, "cert-manager-crds", "cert-manager.io_"+r+".yaml"))
	}
	e.kubectl("", apply...)
	e.until("cert-manager CRDs to be served again", time.Minute, func(context.Context) (bool, error) {
		list, err := e.kube.Discovery().ServerResourcesForGroupVersion("cert-manager.io/v1")
		return err == nil && len(list.APIResources) >= 4, nil
	})
	e.restorePKI()
}

// --- the rotation ------------------------------------------------------------------------------

// operator runs the trust-rotation operator in this process until stop is called.
type operator struct {
	cancel context.CancelFunc
	done   chan error
}

func (e *e2e) startOperator() *operator {
	e.t.Helper()
	tars, err := client.NewForConfig(e.c.RESTConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	clients, err := kube.NewForConfig(e.c.RESTConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	ctrl, err := app.New(clients, tars, app.NewMetrics(), app.Options{
		Config: steps.DefaultConfig(), RotationName: steps.DefaultRotationName,
		ProbeConcurrency: 10, ProbeTimeout: 2 * time.Second,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	o := &operator{cancel: cancel, done: make(chan error, 1)}
	go func() { o.done <- ctrl.Run(ctx) }()
	return o
}

func (o *operator) stop(t *testing.T) {
	o.cancel()
	if err := <-o.done; err != nil {
		t.Errorf("operator: %v", err)
	}
}

func (e *e2e) rotation(ctx context.Context) (*v1alpha1.TrustAnchorRotation, error) {
	tars, err := client.NewForConfig(e.c.RESTConfig())
	if err != nil {
		return nil, err
	}
	return tars.Get(ctx, steps.DefaultRotationName)
}

// waitStep waits until the TrustAnchorRotation's checkpoint is at step.
func (e *e2e) waitStep(step string, timeout time.Duration) *v1alpha1.TrustAnchorRotation {
	e.t.Helper()
	var tar *v1alpha1.TrustAnchorRotation
	e.until("the rotation to reach step "+step, timeout, func(ctx context.Context) (bool, error) {
		var err error
		tar, err = e.rotation(ctx)
		if err != nil {
			return false, nil
		}
		return tar.Status.Checkpoint != nil && tar.Status.Checkpoint.Step == step, nil
	})
	return tar
}

// resourceVersions records the resourceVersion of every object a rotation writes.
func (e *e2e) resourceVersions() map[string]string {
	e.t.Helper()
	rv := map[string]string{}
	ctx := e.ctx
	for _, ref := range [][2]string{{"cert-manager", "linkerd-trust-anchor"}, {"linkerd", "linkerd-previous-anchor"}, {"linkerd", "linkerd-identity-issuer"}} {
		s, err := e.kube.CoreV1().Secrets(ref[0]).Get(ctx, ref[1], metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		rv["Secret "+ref[0]+"/"+ref[1]] = s.ResourceVersion
	}
	cm, err := e.kube.CoreV1().ConfigMaps("linkerd").Get(ctx, steps.DefaultTrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	rv["ConfigMap linkerd/"+cm.Name] = cm.ResourceVersion
	for _, name := range steps.DefaultConfig().ControlPlane() {
		d, err := e.kube.AppsV1().Deployments("linkerd").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		rv["Deployment linkerd/"+name] = d.ResourceVersion
	}
	tar, err := e.rotation(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	rv["TrustAnchorRotation "+tar.Name] = tar.ResourceVersion
	return rv
}

// planJSON is what the tests read of `plan -o json`.
type planJSON struct {
	Phase string `json:"phase"`
	Step  string `json:"step"`
	Steps []struct {
		Name    string `json:"name"`
		Status  string `json:"status"`
		Outcome string `json:"outcome"`
		Changes []string
		Writes  []struct {
			Verb, Kind, Namespace, Name, Detail string
		} `json:"writes"`
	} `json:"steps"`
}

func (e *e2e) plan(args ...string) planJSON {
	e.t.Helper()
	out, errOut, code := e.run(append([]string{"plan", "-o", "json"}, args...)...)
	if code != 0 {
		e.t.Fatalf("plan %v: exit code %d: %s", args, code, errOut)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		e.t.Fatalf("plan output: %v\n%s", err, out)
	}
	return p
}

func testRotation(e *e2e) {
	t := e.t
	e.kubectl("", "apply", "--server-side", "-f", filepath.Join("..", "..", "manifests", "crds"))
	e.until("the TrustAnchorRotation CRD to be served", time.Minute, func(context.Context) (bool, error) {
		_, err := e.kube.Discovery().ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
		return err == nil, nil
	})
	mesh, apps, err := meshsim.StartSample(e.ctx, meshsim.Config{RESTConfig: e.c.RESTConfig(), VolumeRefreshDelay: 2 * time.Second},
		meshsim.WorkloadSpec{Prefix: "cli-e2e", Namespaces: 2, Deployments: 4, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer mesh.Stop()

	op := e.startOperator()
	e.waitStep(steps.StepDetectAnchorRotation, 2*time.Minute)
	op.stop(t)

	// The full check parses as Linkerd parses it, and the operator created its rotation.
	out, _, _ := e.run("check", "-o", "json")
	co := parseCheck(t, out)
	for _, hint := range failed(co) {
		if hint == "l5d-trust-operator-crd" || hint == "l5d-trust-operator-rotation" || strings.HasPrefix(hint, "l5d-trust-cm") {
			t.Errorf("check failed %s:\n%s", hint, out)
		}
	}

	// plan writes nothing, and lists the operator's steps in its order.
	before := e.resourceVersions()
	e.plan()
	whole := e.plan("--assume-anchor-renewed")
	if _, _, code := e.run("plan", "--assume-anchor-renewed"); code != 0 {
		t.Errorf("plan --assume-anchor-renewed (text): exit code %d", code)
	}
	if after := e.resourceVersions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("plan changed objects:\nbefore %v\nafter  %v", before, after)
	}
	var names, want []string
	for _, s := range whole.Steps {
		names = append(names, s.Name)
	}
	for _, s := range steps.Rotation(nil) {
		want = append(want, s.Name)
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("plan lists steps %v, the operator runs %v", names, want)
	}
	if whole.Step != steps.StepExpandTrustBundle {
		t.Errorf("plan --assume-anchor-renewed starts at %s, want %s", whole.Step, steps.StepExpandTrustBundle)
	}

	// Renew the anchor; the plan's next write is exactly what the operator then writes.
	if _, err := e.pki.RenewAnchor(e.ctx); err != nil {
		t.Fatal(err)
	}
	next := e.plan()
	if next.Step != steps.StepExpandTrustBundle {
		t.Fatalf("after the renewal, plan's next step is %s, want %s", next.Step, steps.StepExpandTrustBundle)
	}
	var planned string
	for _, s := range next.Steps {
		if s.Status == "next" && len(s.Writes) == 1 && s.Writes[0].Kind == "ConfigMap" {
			planned = strings.TrimPrefix(s.Writes[0].Detail, "bundle sha256 ")
		}
	}
	if planned == "" {
		t.Fatalf("plan records no ConfigMap write for %s: %+v", steps.StepExpandTrustBundle, next.Steps)
	}
	var restarts []string
	for _, s := range next.Steps {
		if s.Name == steps.StepRefreshControlPlane {
			restarts = s.Changes
		}
	}

	op = e.startOperator()
	defer func() { op.stop(t) }()
	e.waitStep(steps.StepPropagateTrustRoots, 2*time.Minute)
	if got := steps.BundleHash(e.configMapBundle()); got != planned {
		t.Errorf("the operator wrote a bundle with sha256 %s, the plan said %s", got, planned)
	}
	for _, ch := range restarts {
		name := ch[strings.LastIndex(ch, "/")+1:]
		d, err := e.kube.AppsV1().Deployments("linkerd").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil || d.Spec.Template.Annotations[steps.RestartedAtAnnotation] == "" {
			t.Errorf("the plan said %q, but Deployment %s was not restarted", ch, name)
		}
	}

	// Mid-rotation: restart half of the workloads; inspect must list exactly the pods the mesh
	// simulator knows are not on the expanded bundle.
	for _, w := range apps[:len(apps)/2] {
		if err := mesh.RolloutRestart(e.ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := meshsim.WaitForRollouts(e.ctx, e.kube, apps); err != nil {
		t.Fatal(err)
	}
	hash := steps.BundleHash(e.configMapBundle())
	var got, truth []string
	e.until("inspect to list exactly the pods the mesh simulator has not converged", 90*time.Second, func(context.Context) (bool, error) {
		truth = notConverged(mesh, hash)
		out, errOut, code := e.run("inspect", "-o", "json", "--timeout", "2s")
		if code != 0 {
			return false, fmt.Errorf("inspect: exit code %d: %s", code, errOut)
		}
		var in struct {
			Pods []struct{ Namespace, Name string } `json:"pods"`
		}
		if err := json.Unmarshal([]byte(out), &in); err != nil {
			return false, err
		}
		got = got[:0]
		for _, p := range in.Pods {
			got = append(got, p.Namespace+"/"+p.Name)
		}
		sort.Strings(got)
		return len(truth) > 0 && strings.Join(got, ",") == strings.Join(truth, ","), nil
	})
	t.Logf("inspect lists the %d pods not converged: %v", len(got), got)
	table, _, code := e.run("inspect")
	if code != 0 || !strings.Contains(table, fmt.Sprintf("Pods that have not converged (%d)", len(truth))) {
		t.Errorf("inspect table (exit %d):\n%s", code, table)
	}
	t.Logf("inspect:\n%s", table)
}

// notConverged is the simulator's truth: the running application pods whose proxy was injected
// with another bundle than the one of hash, or holds no certificate.
func notConverged(mesh *meshsim.Mesh, hash string) []string {
	var out []string
	for _, s := range mesh.Pods() {
		if s.Component != "" {
			continue
		}
		if s.TrustRootSHA256 != hash || !s.HasCertificate {
			out = append(out, s.PodRef.String())
		}
	}
	sort.Strings(out)
	return out
}
