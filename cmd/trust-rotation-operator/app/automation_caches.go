package app

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
)

// The automation's getters: observe.FillAutomations reads the automation's informers through
// them (observe.AutomationCaches), the informers' lifecycle staying here.
var _ observe.AutomationCaches = (*automation)(nil)

// Workload, Namespace and PodDisruptionBudgets read the informers' caches (observe.WorkloadObjects).

func (a *automation) Workload(ref steps.WorkloadRef) any {
	l := a.informerFor(ref.Kind)
	if l == nil {
		return nil
	}
	return l.get(ref.Namespace, ref.Name)
}

func (a *automation) Namespace(name string) *corev1.Namespace {
	if a.namespaces == nil {
		return nil
	}
	obj := a.namespaces.get("", name)
	if obj == nil {
		return nil
	}
	return obj.(*corev1.Namespace)
}

func (a *automation) PodDisruptionBudgets(namespace string) []*policyv1.PodDisruptionBudget {
	if a.pdbs == nil {
		return nil
	}
	var out []*policyv1.PodDisruptionBudget
	for _, o := range a.pdbs.byIndex(cache.NamespaceIndex, namespace) {
		out = append(out, o.(*policyv1.PodDisruptionBudget))
	}
	return out
}

// IssuerCertificate reads the identity issuer's Certificate from its informer, or says why it
// cannot: no cert-manager client, or an informer that has not synced (or cannot list).
func (a *automation) IssuerCertificate(namespace, name string) (*cmapi.Certificate, string) {
	if a.certificate == nil {
		return nil, "no cert-manager client"
	}
	if ok, why := a.certificate.ready(); !ok {
		return nil, why
	}
	if obj := a.certificate.get(namespace, name); obj != nil {
		return obj.(*cmapi.Certificate), ""
	}
	return nil, ""
}

// WorkloadsProblem is why the first workload informer that is not ready is not.
func (a *automation) WorkloadsProblem() string {
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets, a.namespaces, a.pdbs} {
		if l == nil {
			continue
		}
		if ok, why := l.ready(); !ok {
			return why
		}
	}
	return ""
}

// RefreshOverridden reads the workloads carrying the refresh override off overrideIndex.
func (a *automation) RefreshOverridden() []string {
	var keys []string
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets} {
		for _, obj := range l.byIndex(overrideIndex, "yes") {
			keys = append(keys, observe.WorkloadKey(obj))
		}
	}
	return keys
}

// RestartMarked reads the workloads carrying token off restartMarkIndex, and adds those the
// operator marked with it whose marks the cache may not show yet (written).
func (a *automation) RestartMarked(token string) []string {
	var keys []string
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets} {
		for _, obj := range l.byIndex(restartMarkIndex, token) {
			keys = append(keys, observe.WorkloadKey(obj))
		}
	}
	a.mu.Lock()
	for key, m := range a.written {
		if m.restartedAt == token || m.evictedFor == token {
			keys = append(keys, key)
		}
	}
	a.mu.Unlock()
	return keys
}
