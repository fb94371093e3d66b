package meshsim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestControlPlaneMatchesLinkerd compares the simulator's control-plane Deployments
// (InstallControlPlane) with the ones the real `linkerd install` renders with cert-manager,
// recorded verbatim in testdata/linkerd-install/control-plane.yaml (the Linkerd version and the
// command are in its header; test/reallinkerd records it again with -update), on every field the
// operator and the CLI read of a control-plane pod: its labels and annotations, where its proxy
// is and how that proxy gets its trust anchors, its admin port.
func TestControlPlaneMatchesLinkerd(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "linkerd-install", "control-plane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]*appsv1.Deployment{}
	for _, doc := range strings.Split(string(b), "\n---\n")[1:] {
		d := parseDeployment(t, "control-plane.yaml", []byte(doc))
		recorded[d.Name] = d
	}
	for _, component := range []string{ComponentIdentity, ComponentDestination, ComponentProxyInjector} {
		name := "linkerd-" + component
		t.Run(name, func(t *testing.T) {
			real := recorded[name]
			if real == nil {
				t.Fatalf("control-plane.yaml has no Deployment %s", name)
			}
			tmpl := real.Spec.Template
			opts := ControlPlaneOptions{Namespace: DefaultLinkerdNamespace, TrustDomain: DefaultTrustDomain,
				Replicas: 1, ProxyVersion: tmpl.Annotations[AnnotationProxyVersion]}
			sim := controlPlaneDeployment(opts, component, tmpl.Annotations[AnnotationTrustRootHash])
			for _, d := range compareControlPlane(sim, real) {
				t.Errorf("%s differs from real Linkerd (%s): %s", name, opts.ProxyVersion, d)
			}
		})
	}
}

// compareControlPlane lists, field by field, where the simulator's control-plane Deployment
// differs from real Linkerd's on what the operator and the CLI read.
func compareControlPlane(sim, real *appsv1.Deployment) []string {
	var diffs []string
	differ := func(field string, s, r any) {
		if fmt.Sprint(s) != fmt.Sprint(r) {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %q, linkerd %q", field, fmt.Sprint(s), fmt.Sprint(r)))
		}
	}
	for _, l := range []string{LabelControlPlaneComponent, LabelControlPlaneNS} {
		differ("label "+l, sim.Labels[l], real.Labels[l])
		differ("pod label "+l, sim.Spec.Template.Labels[l], real.Spec.Template.Labels[l])
	}
	differ("pod label "+LabelWorkloadNS, sim.Spec.Template.Labels[LabelWorkloadNS], real.Spec.Template.Labels[LabelWorkloadNS])
	for _, a := range []string{AnnotationTrustRootHash, AnnotationProxyVersion} {
		differ("pod annotation "+a, sim.Spec.Template.Annotations[a], real.Spec.Template.Annotations[a])
	}
	differ("serviceAccountName", sim.Spec.Template.Spec.ServiceAccountName, real.Spec.Template.Spec.ServiceAccountName)
	sp := &corev1.Pod{ObjectMeta: sim.Spec.Template.ObjectMeta, Spec: sim.Spec.Template.Spec}
	rp := &corev1.Pod{ObjectMeta: real.Spec.Template.ObjectMeta, Spec: real.Spec.Template.Spec}
	differ("proxy's place", proxyPlace(sp), proxyPlace(rp))
	sproxy, rproxy := ProxyOf(sp), ProxyOf(rp)
	if sproxy == nil || rproxy == nil {
		return append(diffs, fmt.Sprintf("%s container: simulator %v, linkerd %v", ProxyContainerName, sproxy != nil, rproxy != nil))
	}
	differ("proxy restartPolicy", restartPolicy(sproxy), restartPolicy(rproxy))
	differ("proxy env "+EnvTrustAnchors+" source", envSource(sproxy, EnvTrustAnchors), envSource(rproxy, EnvTrustAnchors))
	differ("proxy admin port "+AdminPortName, adminPortOf(sproxy), adminPortOf(rproxy))
	return diffs
}

// envSource says where a container's env var comes from: a literal, or the ConfigMap key.
func envSource(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			return "configMapKeyRef " + e.ValueFrom.ConfigMapKeyRef.Name + "/" + e.ValueFrom.ConfigMapKeyRef.Key
		}
		if e.ValueFrom != nil {
			return "valueFrom (other)"
		}
		return "value"
	}
	return "(unset)"
}
