package observe

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestDescribeWorkloadFromLists converts listed objects into the rotation's view: the template's
// annotations, the rollout, the replicas, the selectors (namespace labels) and the covering
// PodDisruptionBudget that allows the fewest disruptions; a workload out of scope or without an
// object is left undescribed.
func TestDescribeWorkloadFromLists(t *testing.T) {
	labels := map[string]string{"app": "web"}
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Generation: 2, Labels: labels,
			Annotations: map[string]string{steps.EvictedForAnnotation: "T1"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels,
			Annotations: map[string]string{steps.RestartedAtAnnotation: "T0", steps.RefreshOverrideAnnotation: "1m"}}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2},
	}
	pdb := func(name string, allowed int32, sel map[string]string) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"restart": "yes"}}}
	k := fake.NewClientset(web, ns, pdb("loose", 2, labels), pdb("tight", 1, labels), pdb("other", 0, map[string]string{"app": "db"}))
	list, err := ListWorkloads(context.Background(), clientset.Kube(k))
	if err != nil {
		t.Fatal(err)
	}
	s := &steps.State{Config: steps.DefaultConfig()}
	s.Spec.DataPlaneRestart = v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"restart": "yes"}}}
	w := WorkloadOf(s, "shop/Deployment/web")
	if obj := DescribeWorkload(s, list, w, true); obj == nil {
		t.Fatal("no object for shop/Deployment/web")
	}
	if !w.Found || !w.Selected || !w.RolledOut || w.Replicas != 2 || w.RestartedAt != "T0" || w.RefreshOverride != "1m" || w.EvictedFor != "T1" ||
		w.PDB != "tight" || w.DisruptionsAllowed != 1 {
		t.Errorf("described as %+v", *w)
	}
	ns.Labels = nil
	k = fake.NewClientset(web, ns)
	if list, err = ListWorkloads(context.Background(), clientset.Kube(k)); err != nil {
		t.Fatal(err)
	}
	w = WorkloadOf(&steps.State{}, "shop/Deployment/web")
	if DescribeWorkload(s, list, w, true); w.Selected || w.PDB != "" {
		t.Errorf("namespace without the selected label: %+v", *w)
	}
	gone := WorkloadOf(s, "shop/Deployment/gone")
	if DescribeWorkload(s, list, gone, true) != nil || gone.Found {
		t.Errorf("a workload without an object: %+v", *gone)
	}
	out := WorkloadOf(s, "elsewhere/Deployment/web")
	if DescribeWorkload(s, list, out, false) != nil || !out.OutOfScope {
		t.Errorf("a workload out of scope: %+v", *out)
	}
}
