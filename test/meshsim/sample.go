package meshsim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SeedTrustBundle creates linkerd-identity-trust-roots from the trust anchor Secret
// (cert-manager/linkerd-trust-anchor, tls.crt) if it does not exist yet — the state that
// `linkerd trust bundle | kubectl apply --server-side ...` produces before Linkerd is installed.
func SeedTrustBundle(ctx context.Context, client kubernetes.Interface, linkerdNS, anchorNS, anchorSecret string) error {
	if _, err := client.CoreV1().ConfigMaps(linkerdNS).Get(ctx, TrustRootsConfigMap, metav1.GetOptions{}); err == nil {
		return nil
	}
	s, err := client.CoreV1().Secrets(anchorNS).Get(ctx, anchorSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading trust anchor secret %s/%s: %w", anchorNS, anchorSecret, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: TrustRootsConfigMap, Namespace: linkerdNS},
		Data: map[string]string{TrustRootsKey: string(s.Data[corev1.TLSCertKey])}}
	if _, err := client.CoreV1().ConfigMaps(linkerdNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating configmap %s/%s: %w", linkerdNS, TrustRootsConfigMap, err)
	}
	return nil
}

// StartSample brings up a playground mesh on a cluster whose Linkerd PKI is issued: it seeds
// the trust bundle if needed, starts the simulator, installs the control plane, creates the
// sample workloads and waits until every proxy holds a certificate. Stop the returned Mesh to
// tear the simulation down (the Kubernetes objects stay).
func StartSample(ctx context.Context, cfg Config, spec WorkloadSpec) (*Mesh, []Workload, error) {
	if err := cfg.defaults(); err != nil {
		return nil, nil, err
	}
	m, err := Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*Mesh, []Workload, error) {
		m.Stop()
		return nil, nil, err
	}
	if err := SeedTrustBundle(ctx, m.client, cfg.LinkerdNamespace, "cert-manager", "linkerd-trust-anchor"); err != nil {
		return fail(err)
	}
	if err := InstallControlPlane(ctx, m.client, ControlPlaneOptions{Namespace: cfg.LinkerdNamespace, TrustDomain: cfg.TrustDomain,
		ProxyVersion: cfg.ProxyVersion, ProxyMinRefresh: cfg.ProxyMinRefresh, ProxyMaxRefresh: cfg.ProxyMaxRefresh,
		ProxyAsContainer: cfg.ProxyAsContainer}); err != nil {
		return fail(err)
	}
	if err := WaitForRollouts(ctx, m.client, m.ControlPlane()); err != nil {
		return fail(err)
	}
	ws, err := CreateMeshedWorkloads(ctx, m.client, spec)
	if err != nil {
		return fail(err)
	}
	if err := WaitForRollouts(ctx, m.client, ws); err != nil {
		return fail(err)
	}
	if err := m.WaitForCertificates(ctx, 0, nil); err != nil {
		return fail(err)
	}
	return m, ws, nil
}
