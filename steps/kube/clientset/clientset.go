// Package clientset serves package kube's interfaces from client-go's and cert-manager's
// generated Clientsets, for programs that hold those anyway (the CLI, the tests, and their
// fakes). The operator does not import it: it would bring back every API group's registration
// that package kube exists to avoid.
package clientset

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmv1 "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/typed/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/kubernetes"
	typedappsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedpolicyv1 "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/steps/kube"
)

// Kube serves kube.Interface from a Kubernetes Clientset.
func Kube(cs kubernetes.Interface) kube.Interface { return clients{cs} }

// CertManager serves kube.CertManager from a cert-manager Clientset; nil stays nil.
func CertManager(cs cmclient.Interface) kube.CertManager {
	if cs == nil {
		return nil
	}
	return certManager{cs}
}

type clients struct{ cs kubernetes.Interface }

func (c clients) CoreV1() kube.CoreV1     { return core{c.cs.CoreV1()} }
func (c clients) AppsV1() kube.AppsV1     { return apps{c.cs.AppsV1()} }
func (c clients) PolicyV1() kube.PolicyV1 { return policy{c.cs.PolicyV1()} }
func (c clients) CoordinationV1() kube.CoordinationV1 {
	return coordination{c.cs}
}

type core struct{ g typedcorev1.CoreV1Interface }

func (g core) RESTClient() rest.Interface                                 { return g.g.RESTClient() }
func (g core) Pods(ns string) kube.Resource[*corev1.Pod, *corev1.PodList] { return g.g.Pods(ns) }
func (g core) ConfigMaps(ns string) kube.Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return g.g.ConfigMaps(ns)
}
func (g core) Secrets(ns string) kube.Resource[*corev1.Secret, *corev1.SecretList] {
	return g.g.Secrets(ns)
}
func (g core) Namespaces() kube.Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return g.g.Namespaces()
}
func (g core) Events(ns string) kube.Resource[*corev1.Event, *corev1.EventList] {
	return g.g.Events(ns)
}

type apps struct{ g typedappsv1.AppsV1Interface }

func (g apps) RESTClient() rest.Interface { return g.g.RESTClient() }
func (g apps) Deployments(ns string) kube.Resource[*appsv1.Deployment, *appsv1.DeploymentList] {
	return g.g.Deployments(ns)
}
func (g apps) StatefulSets(ns string) kube.Resource[*appsv1.StatefulSet, *appsv1.StatefulSetList] {
	return g.g.StatefulSets(ns)
}
func (g apps) DaemonSets(ns string) kube.Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return g.g.DaemonSets(ns)
}

type policy struct {
	g typedpolicyv1.PolicyV1Interface
}

func (g policy) PodDisruptionBudgets(ns string) kube.Resource[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList] {
	return g.g.PodDisruptionBudgets(ns)
}
func (g policy) Evictions(ns string) kube.Evictions { return g.g.Evictions(ns) }

type coordination struct{ cs kubernetes.Interface }

func (g coordination) Leases(ns string) kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return g.cs.CoordinationV1().Leases(ns)
}

type certManager struct{ cs cmclient.Interface }

func (c certManager) CertmanagerV1() kube.CertmanagerV1 { return certManagerV1{c.cs.CertmanagerV1()} }

type certManagerV1 struct{ g cmv1.CertmanagerV1Interface }

func (g certManagerV1) Certificates(ns string) kube.StatusResource[*cmapi.Certificate, *cmapi.CertificateList] {
	return g.g.Certificates(ns)
}
func (g certManagerV1) CertificateRequests(ns string) kube.Resource[*cmapi.CertificateRequest, *cmapi.CertificateRequestList] {
	return g.g.CertificateRequests(ns)
}
func (g certManagerV1) Issuers(ns string) kube.Resource[*cmapi.Issuer, *cmapi.IssuerList] {
	return g.g.Issuers(ns)
}
func (g certManagerV1) ClusterIssuers() kube.Resource[*cmapi.ClusterIssuer, *cmapi.ClusterIssuerList] {
	return g.g.ClusterIssuers()
}
