package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/steps/observe"
)

// DescribeUnfinishedRollouts says, for every Deployment in namespaces whose rollout is not
// complete (as the operator judges it: observe.DeploymentFrom), its status and each of its pods: phase,
// readiness, node, deletion, and the reason of a condition that is not true. A rotation that
// waits on a rollout for minutes is stuck in the cluster, not in the operator; this says where.
func DescribeUnfinishedRollouts(ctx context.Context, kube kubernetes.Interface, namespaces ...string) string {
	var b strings.Builder
	for _, ns := range namespaces {
		deps, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&b, "listing Deployments in %s: %v\n", ns, err)
			continue
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			if observe.DeploymentFrom(ns, d.Name, d).RolledOut {
				continue
			}
			st := d.Status
			fmt.Fprintf(&b, "Deployment %s/%s generation %d (observed %d): replicas %d, updated %d, ready %d, available %d, terminating %d\n",
				ns, d.Name, d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, deref(st.TerminatingReplicas))
			for _, c := range st.Conditions {
				fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				sel = labels.Nothing()
			}
			pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			if err != nil {
				fmt.Fprintf(&b, "  listing its pods: %v\n", err)
				continue
			}
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "  pod %s (%s) %s on %q%s%s\n", p.Name, p.Labels["pod-template-hash"], p.Status.Phase, p.Spec.NodeName, deletion(&p), notTrue(&p))
			}
		}
	}
	if b.Len() == 0 {
		return "every Deployment in " + strings.Join(namespaces, ", ") + " is rolled out"
	}
	return b.String()
}

func deletion(p *corev1.Pod) string {
	if p.DeletionTimestamp == nil {
		return ""
	}
	return fmt.Sprintf(", deleted at %s (finalizers %v)", p.DeletionTimestamp.UTC().Format("15:04:05.000"), p.Finalizers)
}

func notTrue(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			out = append(out, fmt.Sprintf("%s=%s %s %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// Namespaces are the control plane's namespace and the applications', each once.
func (e *Env) Namespaces() []string {
	var out []string
	for _, w := range append(e.Mesh.ControlPlane(), e.Apps...) {
		if !slices.Contains(out, w.Namespace) {
			out = append(out, w.Namespace)
		}
	}
	return out
}
