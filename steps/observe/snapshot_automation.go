package observe

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// What the operator's snapshot adds for the opt-in automations (automatic restarts, automatic
// issuer renewal), read from the informers the operator starts once the spec enables them.

// AutomationCaches are the operator's caches of what the automations read, and its memory of
// its own writes to workloads that those caches may not show yet.
type AutomationCaches interface {
	WorkloadObjects
	// IssuerCertificate is the identity issuer's Certificate namespace/name (nil: not cached),
	// or why it cannot be read ("" when it can).
	IssuerCertificate(namespace, name string) (*cmapi.Certificate, string)
	// WorkloadsProblem is why the workload caches cannot be read yet, "" once they can.
	WorkloadsProblem() string
	// RefreshOverridden are the keys ("namespace/Kind/name") of the workloads whose pod
	// template carries the refresh override.
	RefreshOverridden() []string
	// RestartMarked are the keys of the workloads carrying the restart token, as restartedAt or
	// evicted-for: in the cache, or written by the operator and not cached yet.
	RestartMarked(token string) []string
	// InScope reports whether automatic restarts may restart the workloads of the namespace.
	InScope(namespace string) bool
	// Overlay makes a workload read from a stale cache show the operator's own latest write.
	Overlay(w *steps.Workload)
	// StatusSeen reports whether the cache shows another status of the workload obj than the
	// one recorded when the operator evicted some of its pods (true when it evicted none).
	StatusSeen(obj any) bool
}

// FillAutomations adds to the State what the automations the spec enables need. all is true
// outside an idle step: automatic restarts then look at every meshed workload.
func FillAutomations(s *steps.State, caches AutomationCaches, tar *v1alpha1.TrustAnchorRotation, step string, all bool, index *podindex.Index) {
	FromRotation(s, tar)
	if tar.Spec.IdentityIssuerRenewal == v1alpha1.Automatic {
		fillCertificate(s, caches)
	}
	if tar.Spec.DataPlaneRestart.Policy == v1alpha1.Automatic {
		token := ""
		if cp := tar.Status.Checkpoint; cp != nil && cp.Step == step {
			token = cp.Token
		}
		FillWorkloads(s, caches, all, index, token)
	}
}

func fillCertificate(s *steps.State, caches AutomationCaches) {
	ns, name := s.Config.LinkerdNamespace, s.Config.IssuerCertificate
	crt, problem := caches.IssuerCertificate(ns, name)
	s.IssuerCertificate = IssuerCertificateFrom(ns, name, crt)
	s.IssuerCertificate.Err = problem
}

// FillWorkloads adds the workloads a restart step needs: those with meshed pods, those carrying
// the refresh override, and those the step's act (token) restarted or evicted. The last come
// from their own marks, not from their pods: between an evicted pod's removal and its
// replacement's arrival in the pod cache a workload may have no pod at all, and it must still
// count against the restart budget.
func FillWorkloads(s *steps.State, caches AutomationCaches, all bool, index *podindex.Index, token string) {
	if why := caches.WorkloadsProblem(); why != "" {
		s.WorkloadsProblem = why
		return
	}
	s.Workloads = map[string]*steps.Workload{}
	get := func(key string) *steps.Workload { return WorkloadOf(s, key) }
	// The workloads carrying the refresh override, at every step: the override is in effect.
	for _, key := range caches.RefreshOverridden() {
		get(key)
	}
	if all && token != "" {
		for _, key := range caches.RestartMarked(token) {
			get(key)
		}
	}
	if all {
		AddMeshedWorkloads(s, index)
	}
	for _, w := range s.Workloads {
		describeCached(s, caches, w)
	}
}

// describeCached fills a workload from its object, its namespace and the PodDisruptionBudgets,
// then shows the operator's own writes the cache may not show yet.
func describeCached(s *steps.State, caches AutomationCaches, w *steps.Workload) {
	obj := DescribeWorkload(s, caches, w, caches.InScope(w.Namespace))
	if obj == nil {
		return
	}
	caches.Overlay(w)
	if !caches.StatusSeen(obj) {
		w.Settling = "waiting for its status to show the eviction"
	}
}
