// The checks of category linkerd-trust-cert-manager, the first half of the prerequisites (check
// --pre): the Kubernetes API answers, and cert-manager's CRDs and controller are there.

package cli

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (c *checks) apiReachable(ctx context.Context) error {
	if _, err := withContext(ctx, c.cl.Kube.Discovery().ServerVersion); err != nil {
		return fmt.Errorf("querying the Kubernetes API (GET /version): %s", apiError(err))
	}
	_, err := c.cl.Kube.CoreV1().Namespaces().Get(ctx, c.cfg.LinkerdNamespace, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s: %w", c.cfg.LinkerdNamespace, err)
	}
	return nil
}

// withContext runs f, a call of client-go's discovery client, which takes no context, and
// returns when it does or when ctx ends: check --wait bounds every check, and the discovery
// client's own timeout is 32s. The call left running ends by that timeout.
func withContext[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// apiError says what an apiserver's refusal means for the user: a 403 or a 401 whose body is
// not a Status (client-go then says only "unknown") is named by its code, with what to do.
func apiError(err error) string {
	detail := ""
	if msg := err.Error(); msg != "unknown" {
		detail = ": " + msg
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("the apiserver did not accept the credentials of the kubeconfig's user (401 Unauthorized%s): log in again, or check --kubeconfig and --context", detail)
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the apiserver refused the request (403 Forbidden%s): the discovery endpoints are granted to every authenticated user by the ClusterRole system:discovery; ask an administrator what denies it", detail)
	}
	return err.Error()
}

// servedResources reports which of the resources the API group version serves are missing.
func (c *checks) missingResources(ctx context.Context, groupVersion string, resources ...string) ([]string, error) {
	list, err := withContext(ctx, func() (*metav1.APIResourceList, error) {
		return c.cl.Kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
	})
	if apierrors.IsNotFound(err) {
		return resources, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering the API group %s: %w", groupVersion, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	var missing []string
	for _, r := range resources {
		if !served[r] {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

func (c *checks) certManagerCRDs(ctx context.Context) error {
	missing, err := c.missingResources(ctx, "cert-manager.io/v1", "certificates", "issuers", "clusterissuers")
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m + ".cert-manager.io"
		}
		return fmt.Errorf("the API does not serve cert-manager.io/v1 %s: install cert-manager with its CRDs (CustomResourceDefinitions %s)",
			strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	return nil
}

func (c *checks) certManagerController(ctx context.Context) error {
	ns := c.cfg.CertManagerNamespace
	list, err := c.cl.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: c.o.certManagerSelector})
	if err != nil {
		return fmt.Errorf("listing Deployments %s in namespace %s: %w", c.o.certManagerSelector, ns, err)
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("no cert-manager controller Deployment (labels %s) in namespace %s", c.o.certManagerSelector, ns)
	}
	for i := range list.Items {
		if ok, _ := deploymentAvailable(&list.Items[i]); ok {
			return nil
		}
	}
	_, why := deploymentAvailable(&list.Items[0])
	return fmt.Errorf("Deployment %s/%s is not available: %s", ns, list.Items[0].Name, why)
}

// deploymentAvailable reports whether a Deployment has an available replica, and why not.
func deploymentAvailable(d *appsv1.Deployment) (bool, string) {
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status != "True" {
			return false, fmt.Sprintf("%s: %s", cond.Reason, cond.Message)
		}
	}
	if d.Status.AvailableReplicas == 0 {
		return false, fmt.Sprintf("0 of %d replicas available", replicas(d))
	}
	return true, ""
}

func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}
