package steps

import (
	"crypto/x509"
	"fmt"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sort"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// State is a snapshot of everything the rotation steps decide on. It is plain data: the
// operator builds it from informer caches, the CLI from one round of reads, and tests by hand.
type State struct {
	Config Config
	Now    time.Time

	// Anchor is the current trust anchor, from the cert-manager Secret.
	Anchor Source
	// Previous is the operator-managed copy of the previous anchor.
	Previous Source
	// Issuer is the identity issuer identity signs with: the first certificate of its Secret's
	// tls.crt, or of crt.pem while identity runs with the chart's scheme linkerd.io/tls
	// (IssuerKey).
	Issuer Source
	// StagedIssuer is cert-manager's issuer (tls.crt of the same Secret) while identity reads the
	// chart's crt.pem instead: what a takeover switches identity to (SchemeSwitch). Not found
	// under any other scheme.
	StagedIssuer Source
	// Bundle is the linkerd-identity-trust-roots ConfigMap.
	Bundle Bundle
	// InFlight are anchors a rotation was moving to when the anchor was renewed again
	// (status.inFlightAnchors): the bundle keeps them until the previous anchor is retired.
	InFlight []*x509.Certificate
	// Rotation is the fingerprint of the anchor the rotation in progress moves to
	// (status.checkpoint.rotation), "" when Synced or unknown: a rotation towards an anchor that
	// is neither the current nor the previous one was superseded by a newer renewal.
	Rotation string
	// Retiring is the fingerprint of the anchor the rotation in progress moves to
	// (status.checkpoint.rotation) once it has reached retire-previous-anchor, "" before that
	// step, when Synced, or when unknown (see RetiringTo). When the trust anchor is renewed again
	// from that step on, the round still finishes on that anchor (see FinishingOn).
	Retiring string
	// Strategy is the strategy of the rotation in progress (status.checkpoint.strategy), ""
	// when none is (see CrossSigned).
	Strategy v1alpha1.RotationStrategy
	// StandInCrossSigned: the anchor is a plan's in-memory stand-in for a renewal
	// (--assume-anchor-renewed), made without the previous anchor's key, and is taken to be
	// signed by it, as cert-manager signs the renewed anchor under spec.strategy CrossSigned.
	StandInCrossSigned bool
	// ControlPlane holds the control-plane Deployments by name.
	ControlPlane map[string]Deployment
	// TrustBundle counts meshed non-control-plane pods on the DESIRED bundle's hash.
	TrustBundle Convergence
	// Certificates counts meshed pods whose live certificate chain verifies to CertificateRoot:
	// the trust anchor of the active issuer, whichever issuer under it signed the certificate.
	Certificates Convergence
	// LiveChains are the distinct issuer chains the probed meshed pods present (the chain above
	// the leaf, the leaf's issuer first), each with how many pods present it: a bundle the
	// rotation writes must keep an anchor each of them chains to (see KeptAnchorProblem). Empty
	// when nothing was probed. Read them with liveChains: the operator loads them on demand.
	LiveChains []LiveChain
	// loadLiveChains, when set, fills LiveChains the first time a decision reads them: grouping
	// every pod's chain is a walk of the mesh, which only a bundle about to be written needs,
	// not every reconcile.
	loadLiveChains func() []LiveChain

	// Spec is the TrustAnchorRotation's spec: the refresh interval and the automations.
	Spec v1alpha1.TrustAnchorRotationSpec
	// SpecErrors are what the operator cannot use in the spec (SpecErrors): while there is one,
	// it acts on nothing and reports them (condition SpecInvalid).
	SpecErrors field.ErrorList
	// PhaseSince is when the rotation entered its current phase (status.lastPhaseTransitionTime),
	// zero when unknown.
	PhaseSince time.Time
	// RotationStart is when the rotation in progress started (status.checkpoint.startTime), zero
	// when unknown or Synced.
	RotationStart time.Time
	// Workloads are the workloads owning meshed non-control-plane pods, by "namespace/Kind/name",
	// with what automatic restarts need. nil when the operator has no view of them (automatic
	// restarts off, or its caches not ready: WorkloadsProblem says why).
	Workloads        map[string]*Workload
	WorkloadsProblem string
	// IssuerCertificate is the identity issuer's cert-manager Certificate, for automatic renewal.
	IssuerCertificate IssuerCertificate

	// Remotes are the linked clusters (see remote.go), in name order; none for a single cluster.
	Remotes []Remote
	// RemoteStaleAfter is how old a remote's last read may be (DefaultRemoteStaleAfter when 0).
	RemoteStaleAfter time.Duration

	// Deadline holds what the next rotation's deadline reads besides the certificates.
	Deadline DeadlineInputs

	// IssuerObserved is the issuer the status last named active, and when the operator first saw
	// it in the Secret (see IssuerObservedAt).
	IssuerObserved IssuerObservation
	// StaleLeaves are the probed certificates issued after identity should have loaded the
	// issuer in the Secret, signed by another issuer (see StaleIssuer); none when the probes
	// read none, and in the CLI, which reads the condition instead.
	StaleLeaves []StaleLeaves
	// StaleLeavesPartial: the operator has not probed every pod yet since it started, so
	// StaleLeaves may lack what the previous leader saw; StaleReported is the message of
	// condition IdentityIssuerStale when the status holds it True (see StaleIssuerCarried).
	StaleLeavesPartial bool
	StaleReported      string
	// ExpiringLeaves are the live pods whose last probe read a workload certificate their proxy
	// did not renew (LeafExpiring), summarised; ExpiringLeavesPartial: the operator has not
	// probed every pod yet since it started (condition WorkloadCertificatesExpiring then keeps
	// what the previous leader left). Zero in the CLI, which reads the condition instead.
	ExpiringLeaves        ExpiringLeaves
	ExpiringLeavesPartial bool
}

// LiveChain is an issuer chain meshed pods present, as a probe of their admin port read it.
type LiveChain struct {
	// Certs are the certificates above the leaf, the leaf's issuer first.
	Certs []*x509.Certificate
	// Pods is how many probed pods present it, and Example one of them ("namespace/name", the
	// first in name order, so that messages naming it stay stable).
	Pods    int
	Example string
}

// Source is a certificate read from a Secret.
type Source struct {
	Namespace, Name string
	// Found is false when the object does not exist.
	Found bool
	// Cert is the certificate, when the object holds a valid one.
	Cert *x509.Certificate
	// Chain is every certificate of tls.crt after Cert, in order: the intermediates
	// cert-manager's CA issuer appends (for the identity issuer, what Linkerd identity hands
	// every proxy after its leaf; for a cross-signed trust anchor, the bridges it carries).
	Chain []*x509.Certificate
	// Err says what is wrong with the object's content, when it exists but is unusable.
	Err error
	// Helm is what the object's annotations say of the Helm release that rendered it.
	Helm HelmRender
	// ChartIssuer: the Secret also holds crt.pem, the issuer Linkerd's chart renders (see
	// ChartIssuerLeft).
	ChartIssuer bool
}

// Ref is namespace/name.
func (s Source) Ref() string { return s.Namespace + "/" + s.Name }

// Usable reports whether the source holds a certificate.
func (s Source) Usable() bool { return s.Found && s.Err == nil && s.Cert != nil }

// Fingerprint of the source's certificate, or "".
func (s Source) Fingerprint() string {
	if !s.Usable() {
		return ""
	}
	return Fingerprint(s.Cert)
}

// Problem describes why the source is unusable, naming the object.
func (s Source) Problem(kind string) string {
	switch {
	case !s.Found:
		return fmt.Sprintf("%s %s not found", kind, s.Ref())
	case s.Err != nil:
		return fmt.Sprintf("%s %s: %v", kind, s.Ref(), s.Err)
	case s.Cert == nil:
		return fmt.Sprintf("%s %s holds no certificate", kind, s.Ref())
	}
	return ""
}

// Bundle is the trust-roots ConfigMap.
type Bundle struct {
	Found bool
	Data  string
	// Certs are the certificates in Data (nil when it does not parse).
	Certs []*x509.Certificate
	// Owners are the field managers that own data[ca-bundle.crt] (from managedFields), the
	// latest writer first: who wrote the bundle there is.
	Owners []FieldOwner
	// Helm is what the ConfigMap's annotations say of the Helm release that rendered it.
	Helm HelmRender
}

// FieldOwner is a field manager that owns a field, from an object's managedFields.
type FieldOwner struct {
	// Manager is the field manager: linkerd-trust-rotation, helm, argocd-controller,
	// kubectl-edit, trust-manager...
	Manager string
	// Operation is Apply (server-side apply) or Update.
	Operation string
	// Time is when the manager last changed a field it owns, zero when unknown.
	Time time.Time
}

// String renders "helm (Update at 2026-06-01T12:00:00Z)".
func (o FieldOwner) String() string {
	if o.Time.IsZero() {
		return fmt.Sprintf("%q (%s)", o.Manager, o.Operation)
	}
	return fmt.Sprintf("%q (%s at %s)", o.Manager, o.Operation, o.Time.UTC().Format(time.RFC3339))
}

// OtherOwners are the owners of the bundle besides the operator.
func (b Bundle) OtherOwners() []FieldOwner {
	var out []FieldOwner
	for _, o := range b.Owners {
		if o.Manager != FieldManager {
			out = append(out, o)
		}
	}
	return out
}

// Deployment is what the steps need of a control-plane Deployment.
type Deployment struct {
	Namespace, Name string
	Found           bool
	// RestartedAt is the pod template's kubectl.kubernetes.io/restartedAt annotation.
	RestartedAt string
	// RolledOut is true when the Deployment's latest template is fully rolled out: observed,
	// every replica updated and available, and no replica of an older template left — the
	// same test as `kubectl rollout status`.
	RolledOut bool
	// Progress says what the rollout waits for, when it is not rolled out.
	Progress string
	// Replicas is the desired number of replicas.
	Replicas int32
	// Pods are the names of the Deployment's pods that are alive, and RunningPods how many of
	// them run (from the meshed-pod index: control-plane pods are meshed).
	Pods        []string
	RunningPods int
	// Members are the same pods, sorted by name, with when each started and from which restart
	// of the template.
	Members []ControlPlanePod
	// IssuerScheme is the -identity-scheme argument of the pod template's containers, "" when
	// none has it (only identity's does).
	IssuerScheme string
}

// ControlPlanePod is an alive pod of a control-plane Deployment.
type ControlPlanePod struct {
	Name string
	// Started is when its containers last started (its creation while none runs): when it last
	// read the trust roots and the issuer.
	Started time.Time
	// RestartedAt is the pod's kubectl.kubernetes.io/restartedAt annotation: the restart of the
	// Deployment's pod template it was created from ("" when none).
	RestartedAt string
	// Terminating is true once the pod is being deleted.
	Terminating bool
}

// Convergence counts the pods of a group that reached a target, with the first few that did not.
type Convergence struct {
	Converged, Target int
	// Behind lists workloads with pods that have not converged, most pods first (the first few).
	Behind []WorkloadCount
	// BehindWorkloads is how many workloads have pods that have not converged, in all.
	BehindWorkloads int
	// NotProbed is how many target pods that have not converged were not probed yet: their
	// live certificate is unread (workload certificates only).
	NotProbed int
	// Pods lists the first few pods that have not converged, with why: first those counted in
	// Rejected, then those of the workloads in Behind.
	Pods []PodProblem
	// Rejected counts the pods whose live certificate chain was read and rejected: its leaf
	// names another identity than the pod's, or the server on the pod's address did not prove it
	// holds the leaf's key. Such pods are behind, whatever their chain.
	Rejected int
}

// Done reports whether every target pod converged.
func (c Convergence) Done() bool { return c.Converged >= c.Target }

// WorkloadCount is a workload and how many of its pods have not converged.
type WorkloadCount struct {
	// Workload is "namespace/Kind/name", e.g. "emojivoto/Deployment/web".
	Workload string
	Pods     int
}

// PodProblem is a pod that has not converged and why.
type PodProblem struct {
	Namespace, Name, Reason string
}

// SortWorkloads orders workloads by pods behind, most first, then by name: stable messages.
func SortWorkloads(ws []WorkloadCount) {
	sort.Slice(ws, func(i, j int) bool {
		if ws[i].Pods != ws[j].Pods {
			return ws[i].Pods > ws[j].Pods
		}
		return ws[i].Workload < ws[j].Workload
	})
}

// describeBehind renders "ns/Deployment/a (3 pods), ns/Deployment/b (1 pod) and 4 more".
func (c Convergence) describeBehind(limit int) string {
	var parts []string
	for i, w := range c.Behind {
		if i == limit {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d %s)", w.Workload, w.Pods, Plural(w.Pods, "pod", "pods")))
	}
	total := max(c.BehindWorkloads, len(c.Behind))
	if shown := len(parts); total > shown {
		parts = append(parts, fmt.Sprintf("and %d more", total-shown))
	}
	return strings.Join(parts, ", ")
}

// Plural is one when n is 1, many otherwise.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// after is the earliest moment of ts after Now, zero when none is: what a decision taken on this
// snapshot names as its RecheckAt when it changes at one of them with nothing else changing (a
// maintenance window opening, a fallback or a stalled threshold falling due, a certificate
// becoming valid or expiring). The State itself records nothing: it is read, never changed.
func (s *State) after(ts ...time.Time) time.Time {
	var first time.Time
	for _, t := range ts {
		if t.After(s.Now) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

// LoadLiveChainsOnDemand makes load fill LiveChains the first time a decision reads them.
func (s *State) LoadLiveChainsOnDemand(load func() []LiveChain) { s.loadLiveChains = load }

// liveChains is LiveChains, loaded on demand (LoadLiveChainsOnDemand).
func (s *State) liveChains() []LiveChain {
	if s.loadLiveChains != nil {
		s.LiveChains, s.loadLiveChains = s.loadLiveChains(), nil
	}
	return s.LiveChains
}
