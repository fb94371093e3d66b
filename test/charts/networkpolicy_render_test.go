package charts

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/linkerd/trust-rotation/test/cluster"
)

// TestNetworkPolicyRender renders networkPolicy: nothing by default; enabled, an ingress policy
// in the control plane's namespace and in each probed one that admits exactly the operator's
// pods, from the release's namespace, to the proxies' admin port, and an egress policy of the
// operator's pods to that port, the apiserver and the extra rules. The real apiserver accepts
// every one (a dry-run create).
func TestNetworkPolicyRender(t *testing.T) {
	render := renderTRO(t)
	for _, o := range render() {
		if o.GetKind() == "NetworkPolicy" {
			t.Errorf("NetworkPolicy %s/%s rendered by default", o.GetNamespace(), o.GetName())
		}
	}
	objs := render("networkPolicy.enabled=true", "networkPolicy.probedNamespaces={app-0,linkerd,app-1}",
		"networkPolicy.extraEgress[0].ports[0].port=7443")
	deploy := Find(objs, "Deployment", "tro-trust-rotation-operator")
	if deploy == nil {
		t.Fatal("no operator Deployment")
	}
	podLabels, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "labels")

	var probed []string
	c := cluster.Shared(t)
	ctx := testContext(t, time.Minute)
	for _, o := range objs {
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		np := toTyped[networkingv1.NetworkPolicy](t, o)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: np.Namespace}}
		if _, err := c.Kube().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := c.Kube().NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the apiserver refuses NetworkPolicy %s/%s: %v", np.Namespace, np.Name, err)
		}
		switch np.Name {
		case "tro-trust-rotation-operator-probes":
			probed = append(probed, np.Namespace)
			if len(np.Spec.PodSelector.MatchLabels) != 0 || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("%s/%s selects %v, types %v: want every pod, ingress only", np.Namespace, np.Name, np.Spec.PodSelector, np.Spec.PolicyTypes)
			}
			if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || len(np.Spec.Ingress[0].Ports) != 1 {
				t.Fatalf("%s/%s ingress %+v: want one rule, from one peer, to one port", np.Namespace, np.Name, np.Spec.Ingress)
			}
			from, port := np.Spec.Ingress[0].From[0], np.Spec.Ingress[0].Ports[0]
			if from.NamespaceSelector == nil || from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ops" {
				t.Errorf("%s/%s admits namespaces %v, want the release's, ops", np.Namespace, np.Name, from.NamespaceSelector)
			}
			if from.PodSelector == nil || !subset(from.PodSelector.MatchLabels, podLabels) || len(from.PodSelector.MatchLabels) == 0 {
				t.Errorf("%s/%s admits pods %v, which does not select the operator's (%v)", np.Namespace, np.Name, from.PodSelector, podLabels)
			}
			if port.Port == nil || port.Port.IntValue() != 4191 {
				t.Errorf("%s/%s admits port %v, want 4191", np.Namespace, np.Name, port.Port)
			}
		case "tro-trust-rotation-operator":
			if np.Namespace != "ops" || !subset(np.Spec.PodSelector.MatchLabels, podLabels) ||
				!slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
				t.Errorf("egress policy %s/%s selects %v, types %v: want the operator's pods in ops, egress only", np.Namespace, np.Name, np.Spec.PodSelector, np.Spec.PolicyTypes)
			}
			var ports []int
			for _, r := range np.Spec.Egress {
				if len(r.To) != 0 {
					t.Errorf("egress rule %+v names destinations: the proxies and the apiserver are anywhere", r)
				}
				for _, p := range r.Ports {
					ports = append(ports, p.Port.IntValue())
				}
			}
			if want := []int{4191, 443, 6443, 7443}; !slices.Equal(ports, want) {
				t.Errorf("egress to ports %v, want %v", ports, want)
			}
		default:
			t.Errorf("unexpected NetworkPolicy %s/%s", np.Namespace, np.Name)
		}
	}
	slices.Sort(probed)
	if want := []string{"app-0", "app-1", "linkerd"}; !slices.Equal(probed, want) {
		t.Errorf("probe policies in %v, want %v (the control plane's once)", probed, want)
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
