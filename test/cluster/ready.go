package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// NodeAnnotation marks the Nodes kwok manages (value "fake").
const NodeAnnotation = "kwok.x-k8s.io/node"

// Each readiness step gets at most this long; the whole start is bounded by Options.ReadyTimeout.
const stepTimeout = 2 * time.Minute

// until polls cond like poll.Until, but fails at once when a component has exited.
func (c *Cluster) until(ctx context.Context, what string, cond poll.Condition) error {
	return poll.Until(ctx, stepTimeout, what, func(ctx context.Context) (bool, error) {
		if err := c.exitedComponent(); err != nil {
			return false, err
		}
		return cond(ctx)
	})
}

func (c *Cluster) waitEtcd(ctx context.Context, clientURL string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.until(ctx, "etcd to report healthy", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `"health":"true"`) {
			return false, poll.Pending("etcd /health: %s", body)
		}
		return true, nil
	})
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return c.until(ctx, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		body, err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, poll.Pending("/readyz: %v: %s", err, body)
		}
		return string(body) == "ok", nil
	})
}

func (c *Cluster) createNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// NodeName returns the name of the i-th fake node.
func NodeName(i int) string { return "kwok-node-" + strconv.Itoa(i) }

// createNodes registers the fake nodes. kwok takes over every Node annotated NodeAnnotation=fake:
// it marks it Ready, heartbeats its Lease, and runs the lifecycle of the pods bound to it.
func (c *Cluster) createNodes(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(c.opts.NodePods), resource.DecimalSI),
	}
	for i := range c.opts.Nodes {
		name := NodeName(i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{NodeAnnotation: "fake"},
				Labels: map[string]string{
					"type":                   "kwok",
					"kubernetes.io/hostname": name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
				},
			},
			Status: corev1.NodeStatus{
				Capacity:    capacity,
				Allocatable: capacity,
				NodeInfo:    corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "kwok"},
			},
		}
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating fake node %s: %w", name, err)
		}
	}
	return nil
}

// waitReady observes every sign of a working cluster the tests rely on.
func (c *Cluster) waitReady(ctx context.Context) error {
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		err := c.until(ctx, "a leader of "+lease, func(ctx context.Context) (bool, error) {
			l, err := c.kube.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
			if err != nil {
				return false, poll.Pending("lease kube-system/%s: %v", lease, err)
			}
			return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
		})
		if err != nil {
			return err
		}
	}

	// Pods cannot be created in a namespace before its `default` ServiceAccount exists (the
	// ServiceAccount admission plugin rejects them), so tests would flake without this.
	err := c.until(ctx, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := c.kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("serviceaccount default/default: %v", err)
		}
		return true, nil
	})
	if err != nil {
		return err
	}

	err = c.until(ctx, fmt.Sprintf("%d Ready fake nodes", c.opts.Nodes), func(ctx context.Context) (bool, error) {
		for i := range c.opts.Nodes {
			n, err := c.kube.CoreV1().Nodes().Get(ctx, NodeName(i), metav1.GetOptions{})
			if err != nil {
				return false, poll.Pending("node %s: %v", NodeName(i), err)
			}
			if !nodeReady(n) {
				return false, poll.Pending("node %s is not Ready", n.Name)
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}

	if !c.opts.WithoutCertManager {
		return c.waitCertManager(ctx)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitCertManager proves the cert-manager controller reconciles: a throwaway self-signed Issuer
// must become Ready. Its informers being synced and its issuer controller running are exactly
// what a later Certificate needs.
func (c *Cluster) waitCertManager(ctx context.Context) error {
	issuers := c.certManager.CertmanagerV1().Issuers(CertManagerNamespace)
	probe := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-readiness-probe"},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}
	if _, err := issuers.Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the cert-manager readiness probe Issuer: %w", err)
	}
	err := c.until(ctx, "cert-manager to mark the probe Issuer Ready", func(ctx context.Context) (bool, error) {
		iss, err := issuers.Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("issuer %s: %v", probe.Name, err)
		}
		for _, cond := range iss.Status.Conditions {
			if cond.Type == cmapi.IssuerConditionReady && cond.Status == cmmeta.ConditionTrue {
				return true, nil
			}
		}
		return false, poll.Pending("issuer %s has conditions %v", probe.Name, iss.Status.Conditions)
	})
	if err != nil {
		return err
	}
	if err := issuers.Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the cert-manager readiness probe Issuer: %w", err)
	}
	return nil
}
