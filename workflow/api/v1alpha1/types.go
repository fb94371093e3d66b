package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is the high-level state of a rotation, as the reference documents it.
// +kubebuilder:validation:Enum=Synced;RefreshingControlPlane;PropagatingTrustRoots;WaitingForRemoteClusters;WaitingForIdentityRotation;RenewingWorkloadCerts;RemovingOldTrustRoots
type Phase string

// The phases, in the order a rotation passes through them. RefreshingControlPlane fires both
// when the bundle expands and when it is reduced.
const (
	PhaseSynced                     Phase = "Synced"
	PhaseRefreshingControlPlane     Phase = "RefreshingControlPlane"
	PhasePropagatingTrustRoots      Phase = "PropagatingTrustRoots"
	PhaseWaitingForRemoteClusters   Phase = "WaitingForRemoteClusters"
	PhaseWaitingForIdentityRotation Phase = "WaitingForIdentityRotation"
	PhaseRenewingWorkloadCerts      Phase = "RenewingWorkloadCerts"
	PhaseRemovingOldTrustRoots      Phase = "RemovingOldTrustRoots"
)

// Phases lists every phase, in rotation order. Metrics export one series per entry.
var Phases = []Phase{
	PhaseSynced,
	PhaseRefreshingControlPlane,
	PhasePropagatingTrustRoots,
	PhaseWaitingForRemoteClusters,
	PhaseWaitingForIdentityRotation,
	PhaseRenewingWorkloadCerts,
	PhaseRemovingOldTrustRoots,
}

// ConvergenceState is the aggregate state of a convergence group.
// +kubebuilder:validation:Enum=Converging;Converged
type ConvergenceState string

const (
	Converging ConvergenceState = "Converging"
	Converged  ConvergenceState = "Converged"
)

// SourceKind is the kind of object a trust-anchor source is read from.
// +kubebuilder:validation:Enum=secret;configMap;inline
type SourceKind string

const (
	SourceKindSecret    SourceKind = "secret"
	SourceKindConfigMap SourceKind = "configMap"
	SourceKindInline    SourceKind = "inline"
)

// Condition types and reasons set by the operator.
const (
	// ConditionOutOfOrderIssuerRotation is True when the identity issuer reached the new trust
	// anchor before the expanded trust bundle had converged. It is harmless — identity verifies a
	// hot-reloaded issuer against the roots it loaded at start-up, and the operator restarts it
	// only after the data plane trusts the new anchor — but worth knowing.
	ConditionOutOfOrderIssuerRotation = "OutOfOrderIssuerRotation"

	ReasonIssuerRotationInOrder    = "IssuerRotationInOrder"
	ReasonIssuerRotatedOutOfOrder  = "IssuerRotatedBeforeTrustBundleConverged"
	MessageIssuerRotationInOrder   = "identity issuer rotation is not ahead of trust-bundle convergence"
	MessageIssuerRotatedOutOfOrder = "identity issuer was renewed onto the new trust anchor before the expanded trust bundle converged; linkerd-identity keeps the previous issuer until it is restarted after convergence"

	// ConditionIdentityRestartedEarly is True while linkerd-identity pods that started after the
	// rotation expanded the trust bundle run before the data plane converged on it, with the
	// identity issuer already signed by the new trust anchor: someone else restarted identity (a
	// node drain, an eviction, an OOM kill, `kubectl rollout restart`), and it may sign
	// new-anchor certificates that the pods not yet on the expanded bundle do not trust. The
	// message names the pods; the rotation goes on, probing urgently and, with automatic
	// data-plane restarts, restarting the workloads behind first. It is False once the data plane
	// converged or the rotation moved past restart-identity; the operator also emits a Warning
	// Event with the condition's type as its reason.
	ConditionIdentityRestartedEarly = "IdentityRestartedEarly"

	ReasonIdentityRestartedEarly     = "IdentityRestartedBeforeDataPlaneConverged"
	ReasonIdentityNotRestartedEarly  = "IdentityNotRestartedEarly"
	MessageIdentityNotRestartedEarly = "no identity pod runs that started after the trust bundle was expanded while the data plane trusts the old anchor alone and the identity issuer is on the new one"

	// ConditionIdentityIssuerStale is True while, between rotations, linkerd-identity signs
	// workload certificates with an issuer other than the one the issuer Secret holds: the
	// probes read certificates issued after the kubelet should have refreshed identity's issuer
	// volume, signed by another issuer, from a time at which a running identity pod was already
	// up. Identity missed the reload of its issuer (linkerd2 #15109), and every certificate it
	// signs expires with the stale issuer. The message names both issuers, since when, and the
	// pods; the operator also emits a Warning Event with the condition's type as its reason, and
	// restarts identity under spec.staleIssuerRestart Automatic. False during a rotation.
	ConditionIdentityIssuerStale = "IdentityIssuerStale"

	ReasonIdentityIssuerStale     = "IdentitySignsWithStaleIssuer"
	ReasonIdentityIssuerCurrent   = "IdentitySignsWithCurrentIssuer"
	ReasonIdentityIssuerRotating  = "RotationInProgress"
	MessageIdentityIssuerCurrent  = "no workload certificate issued since the identity issuer was last renewed was signed by another issuer"
	MessageIdentityIssuerRotating = "a rotation is in progress: its steps restart linkerd-identity onto the issuer"

	// ConditionWorkloadCertificatesExpiring is True while live meshed pods present a workload
	// certificate with less than 9 % of its lifetime left, read by the operator's probes:
	// their proxies did not renew it at 70 % of its lifetime nor at the retry after (linkerd2-proxy
	// retries at 70 % of what is left), so they cannot reach linkerd-identity, and every peer
	// refuses them once it expires. The message says how many, the soonest expiry and the pod
	// presenting it; the operator also emits a Warning Event with the condition's type as its
	// reason. Whatever the phase: a proxy renews its certificate during a rotation too.
	ConditionWorkloadCertificatesExpiring = "WorkloadCertificatesExpiring"

	ReasonWorkloadCertificatesNotRenewed = "ProxiesDidNotRenew"
	ReasonWorkloadCertificatesRenewed    = "WorkloadCertificatesRenewed"
	MessageWorkloadCertificatesRenewed   = "no meshed pod presents a workload certificate its proxy should have renewed"
)

// The kstatus conditions (sigs.k8s.io/cli-utils/pkg/kstatus), which kubectl wait, Argo CD, Flux
// and kstatus read without knowing the phases:
//
//   - Ready is True when the rotation is Synced and nothing blocks the operator (bootstrap done).
//   - Reconciling is True while the operator works towards that: a rotation in progress (the
//     reason is the phase), bootstrap (Bootstrapping), or a Synced rotation the operator must
//     act on or is blocked on (the reason is the workflow's: TrustAnchorUnavailable, ...).
//   - Stalled is True when the rotation has waited in one phase longer than spec.stalledAfter
//     allows; the reason is what it waits on (WaitingForIssuerRenewal, TrustBundleConverging,
//     ...) and the message the blocking message.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"

	// ReasonSynced: no rotation in progress and nothing to do (Ready=True, Reconciling=False).
	ReasonSynced = "Synced"
	// ReasonBootstrapping: the operator creates linkerd-previous-anchor and
	// linkerd-identity-trust-roots (Reconciling=True, Ready=False).
	ReasonBootstrapping = "Bootstrapping"
	// ReasonNotStalled: Stalled=False.
	ReasonNotStalled = "NotStalled"
)

// ConditionIgnored is True on a TrustAnchorRotation the operator does not drive: it drives only
// the object named by its --rotation-name flag ("cluster").
const (
	ConditionIgnored    = "Ignored"
	ReasonNotDriven     = "NotDrivenByOperator"
	MessageNotDrivenFmt = "the trust-rotation operator drives only TrustAnchorRotation %q (its --rotation-name); this object is ignored"
)

// ConditionSpecInvalid is True while the spec holds a value the operator cannot use: one that
// does not decode (an object stored under an older CRD) or that the schema cannot check (an
// unknown time zone, a label selector that does not parse). The operator then acts on nothing,
// as if suspended, and reports the fields (Ready=False and Stalled=True, reason SpecInvalid),
// until the spec is fixed.
const (
	ConditionSpecInvalid = "SpecInvalid"
	ReasonSpecInvalid    = "SpecInvalid"
	ReasonSpecValid      = "SpecValid"
)

// TrustAnchorRotation drives and reports the rotation of a Linkerd mesh's trust anchor. It is
// cluster-scoped; the operator acts on the object named in its --rotation-name flag ("cluster").
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=tar
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Bundle",type=integer,JSONPath=`.status.trustBundle.convergedPods`,description="Pods converged on the desired trust bundle"
// +kubebuilder:printcolumn:name="Bundle Target",type=integer,JSONPath=`.status.trustBundle.targetPods`,description="Pods that must converge on the desired trust bundle"
// +kubebuilder:printcolumn:name="Certs",type=integer,JSONPath=`.status.workloadCertificates.convergedPods`,description="Pods whose live certificate chains to the active issuer's trust anchor"
// +kubebuilder:printcolumn:name="Certs Target",type=integer,JSONPath=`.status.workloadCertificates.targetPods`,description="Meshed pods whose live certificate must chain to the active issuer's trust anchor"
// +kubebuilder:printcolumn:name="Blocking",type=string,JSONPath=`.status.blockingMessage`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrustAnchorRotation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec TrustAnchorRotationSpec `json:"spec,omitempty"`
	// +optional
	Status TrustAnchorRotationStatus `json:"status,omitempty"`
}

// TrustAnchorRotationList is a list of TrustAnchorRotation.
// +kubebuilder:object:root=true
type TrustAnchorRotationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrustAnchorRotation `json:"items"`
}
