package meshsim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestInjectorMatchesLinkerd compares what the simulator's proxy-injector webhook does to a pod
// with what real Linkerd does to the same pod, in both proxy layouts, on every field the
// operator and the CLI read. testdata/linkerd-inject/*.yaml were produced by the real `linkerd
// inject --manual` (the command, the Linkerd commit and how linkerd-config was set up are in each
// file's header) from deployment.yaml; regenerate them the same way when Linkerd changes what it
// injects. The simulator's patch is applied with the JSON-patch library the apiserver applies
// admission patches with.
func TestInjectorMatchesLinkerd(t *testing.T) {
	dir := filepath.Join("testdata", "linkerd-inject")
	input := readDeployment(t, filepath.Join(dir, "deployment.yaml"))
	for _, tc := range []struct {
		file   string
		native bool
	}{
		{"native-sidecar.yaml", true},
		{"proxy-container.yaml", false},
	} {
		t.Run(strings.TrimSuffix(tc.file, ".yaml"), func(t *testing.T) {
			real := readDeployment(t, filepath.Join(dir, tc.file))
			for _, d := range matchLinkerd(t, input, real, tc.native) {
				t.Errorf("%s differs from real Linkerd (%s): %s", tc.file, real.Spec.Template.Annotations[AnnotationProxyVersion], d)
			}
		})
	}
}

// matchLinkerd injects input's pod template with the simulator, in the layout real Linkerd was
// asked for (native, or the workload's opt-out annotation), with the bundle and version real
// Linkerd injected, and lists where the result differs from real's pod template.
func matchLinkerd(t *testing.T, input, real *appsv1.Deployment, native bool) []string {
	t.Helper()
	want := &corev1.Pod{ObjectMeta: real.Spec.Template.ObjectMeta, Spec: real.Spec.Template.Spec}
	realProxy := ProxyOf(want)
	if realProxy == nil {
		return []string{"real Linkerd injected no " + ProxyContainerName + " container"}
	}
	pod := &corev1.Pod{ObjectMeta: *input.Spec.Template.ObjectMeta.DeepCopy(), Spec: *input.Spec.Template.Spec.DeepCopy()}
	pod.Namespace = input.Namespace
	if !native {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[AnnotationNativeSidecar] = "false"
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: input.Namespace,
		Annotations: map[string]string{AnnotationInject: "enabled"}}}
	m := &Mesh{cfg: Config{LinkerdNamespace: DefaultLinkerdNamespace, TrustDomain: DefaultTrustDomain,
		ProxyVersion: want.Annotations[AnnotationProxyVersion]}}
	got := injectWithPatch(t, m, pod, ns, envValue(realProxy, EnvTrustAnchors))
	return compareInjection(got, want)
}

// compareInjection lists the differences, field by field, between two injected pods on what the
// operator and the CLI read of them.
func compareInjection(got, want *corev1.Pod) []string {
	var diffs []string
	differ := func(field string, g, w any) {
		if fmt.Sprint(g) != fmt.Sprint(w) {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %q, linkerd %q", field, fmt.Sprint(g), fmt.Sprint(w)))
		}
	}
	gp, wp := ProxyOf(got), ProxyOf(want)
	if gp == nil || wp == nil {
		return []string{fmt.Sprintf("%s container: simulator %v, linkerd %v", ProxyContainerName, gp != nil, wp != nil)}
	}
	differ("proxy's place", proxyPlace(got), proxyPlace(want))
	differ("proxy restartPolicy", restartPolicy(gp), restartPolicy(wp))
	differ("env "+EnvTrustAnchors, envValue(gp, EnvTrustAnchors), envValue(wp, EnvTrustAnchors))
	differ("env "+EnvLocalName, envValue(gp, EnvLocalName), envValue(wp, EnvLocalName))
	differ("admin port "+AdminPortName, adminPortOf(gp), adminPortOf(wp))
	for _, a := range []string{AnnotationTrustRootHash, AnnotationProxyVersion} {
		differ("annotation "+a, got.Annotations[a], want.Annotations[a])
	}
	differ("label "+LabelControlPlaneNS, got.Labels[LabelControlPlaneNS], want.Labels[LabelControlPlaneNS])
	return diffs
}

// proxyPlace says where the proxy is relative to the pod's own containers: which list, and
// whether it comes before or after the containers of that list that are not Linkerd's.
func proxyPlace(pod *corev1.Pod) string {
	place := func(list []corev1.Container, name string) string {
		for i, c := range list {
			if c.Name != ProxyContainerName {
				continue
			}
			before := 0
			for _, o := range list[:i] {
				if !strings.HasPrefix(o.Name, "linkerd-") {
					before++
				}
			}
			return fmt.Sprintf("%s, after %d of the pod's own", name, before)
		}
		return ""
	}
	if p := place(pod.Spec.InitContainers, "initContainers"); p != "" {
		return p
	}
	return place(pod.Spec.Containers, "containers")
}

func restartPolicy(c *corev1.Container) string {
	if c.RestartPolicy == nil {
		return "(none)"
	}
	return string(*c.RestartPolicy)
}

func adminPortOf(c *corev1.Container) string {
	for _, p := range c.Ports {
		if p.Name == AdminPortName {
			return fmt.Sprint(p.ContainerPort)
		}
	}
	return "(none)"
}

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return "(unset)"
}

// injectWithPatch runs the simulator's webhook decision on pod and applies its patch as the
// apiserver does.
func injectWithPatch(t *testing.T, m *Mesh, pod *corev1.Pod, ns *corev1.Namespace, bundle string) *corev1.Pod {
	t.Helper()
	patch, err := m.patchFor(pod, ns, bundle)
	if err != nil || patch == nil {
		t.Fatalf("the simulator did not inject: patch %s, %v", patch, err)
	}
	ops, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decoding the simulator's patch: %v", err)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = ops.Apply(raw); err != nil {
		t.Fatalf("applying the simulator's patch: %v\n%s", err, patch)
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func readDeployment(t *testing.T, path string) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseDeployment(t, path, b)
}

func parseDeployment(t *testing.T, what string, b []byte) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return &d
}

func TestCompareInjectionNamesTheField(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	proxy := corev1.Container{Name: ProxyContainerName, RestartPolicy: &always,
		Ports: []corev1.ContainerPort{{Name: AdminPortName, ContainerPort: AdminPort}},
		Env:   []corev1.EnvVar{{Name: EnvTrustAnchors, Value: "A\n"}}}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationTrustRootHash: "h", AnnotationProxyVersion: "v"}},
		Spec:       corev1.PodSpec{InitContainers: []corev1.Container{proxy}, Containers: []corev1.Container{{Name: "web"}}},
	}
	if d := compareInjection(want.DeepCopy(), want); len(d) != 0 {
		t.Fatalf("identical pods differ: %v", d)
	}
	for name, tc := range map[string]struct {
		mutate func(*corev1.Pod)
		field  string
	}{
		"proxy moved to the containers": {func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, p.Spec.InitContainers[0])
			p.Spec.InitContainers = nil
		}, "proxy's place"},
		"no restartPolicy":          {func(p *corev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil }, "proxy restartPolicy"},
		"another bundle":            {func(p *corev1.Pod) { p.Spec.InitContainers[0].Env[0].Value = "B\n" }, "env " + EnvTrustAnchors},
		"another admin port":        {func(p *corev1.Pod) { p.Spec.InitContainers[0].Ports[0].ContainerPort = 4192 }, "admin port"},
		"no trust-root-sha256":      {func(p *corev1.Pod) { delete(p.Annotations, AnnotationTrustRootHash) }, "annotation " + AnnotationTrustRootHash},
		"another proxy-version":     {func(p *corev1.Pod) { p.Annotations[AnnotationProxyVersion] = "w" }, "annotation " + AnnotationProxyVersion},
		"no control-plane-ns label": {func(p *corev1.Pod) { p.Labels = map[string]string{LabelControlPlaneNS: "linkerd"} }, "label " + LabelControlPlaneNS},
	} {
		got := want.DeepCopy()
		tc.mutate(got)
		d := compareInjection(got, want)
		if len(d) != 1 || !strings.HasPrefix(d[0], tc.field) {
			t.Errorf("%s: differences %q, want one naming %q", name, d, tc.field)
		}
	}
}
