package cluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// The cert-manager controller runs as a local process, not in a pod. A real install has a
// Deployment labelled as the Helm chart labels it, and tools look for it (`linkerd trust check`
// reports whether cert-manager's controller is available). The stand-in is that Deployment,
// with the chart's labels; kwok runs its pod, and the process behind it is the local one.
const certManagerStandIn = "cert-manager"

func (c *Cluster) createCertManagerStandIn(ctx context.Context) error {
	labels := map[string]string{
		"app.kubernetes.io/name":      "cert-manager",
		"app.kubernetes.io/instance":  "cert-manager",
		"app.kubernetes.io/component": "controller",
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: certManagerStandIn, Namespace: CertManagerNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "cert-manager-controller", Image: "quay.io/jetstack/cert-manager-controller:v1.21.2",
				}}},
			},
		},
	}
	_, err := c.kube.AppsV1().Deployments(CertManagerNamespace).Create(ctx, d, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the cert-manager stand-in Deployment: %w", err)
	}
	return c.until(ctx, "the cert-manager stand-in Deployment to be available", func(ctx context.Context) (bool, error) {
		got, err := c.kube.AppsV1().Deployments(CertManagerNamespace).Get(ctx, certManagerStandIn, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return got.Status.AvailableReplicas >= 1, nil
	})
}
