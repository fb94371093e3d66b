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

// TrustAnchorRotationSpec is the desired behaviour of trust-anchor rotations.
type TrustAnchorRotationSpec struct {
	// WorkloadCertificateRefreshInterval is the interval to configure temporarily for workload
	// certificate refreshes while the rotation accelerates certificate renewal
	// (RenewingWorkloadCerts). A Go duration of at least 10s, such as 5m.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="must be at least 10s: proxies refresh no faster than LINKERD2_PROXY_IDENTITY_MIN_REFRESH"
	// +optional
	WorkloadCertificateRefreshInterval *metav1.Duration `json:"workloadCertificateRefreshInterval,omitempty"`

	// Strategy is how a rotation moves the mesh onto a new trust anchor. Standard (the default)
	// expands the trust bundle first and restarts the data plane twice: onto the expanded bundle,
	// then onto the new anchor alone. CrossSigned needs the renewed anchor to be signed by the
	// previous one (cert-manager's CA issuer over the anchor's own Secret: see
	// manifests/cert-manager/linkerd-pki-cross-signed.yaml): the identity issuer's chain then
	// carries the bridge to the old anchor, proxies move onto the new issuer by their own
	// certificate refresh, and the data plane restarts once, onto the new anchor alone.
	// +kubebuilder:default=Standard
	// +kubebuilder:validation:Enum=Standard;CrossSigned
	// +optional
	Strategy RotationStrategy `json:"strategy,omitempty"`

	// NaturalChurnPeriod is how long a CrossSigned rotation with spec.dataPlaneRestart.policy
	// Manual leaves its one data-plane restart to the cluster's own churn (deploys, scaling,
	// node drains) once the trust bundle holds the new anchor alone: status.restartDeadline is
	// then, and alert TrustRotationRestartDeadlinePassed fires past it. A Go duration, such as
	// 168h.
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	NaturalChurnPeriod *metav1.Duration `json:"naturalChurnPeriod,omitempty"`

	// DataPlaneRestart configures the restarts of meshed workloads a rotation needs: by the
	// user (Manual, the default: the blocking message names the workloads to restart) or by
	// the operator (Automatic), within a budget and maintenance windows.
	// +kubebuilder:default={}
	// +optional
	DataPlaneRestart DataPlaneRestart `json:"dataPlaneRestart,omitempty"`

	// IdentityIssuerRenewal says who renews the identity issuer onto the new trust anchor once
	// the expanded trust bundle has converged everywhere: the user (Manual, the default:
	// cmctl renew) or the operator (Automatic), which triggers the renewal exactly as cmctl
	// renew does and records it in an Event.
	// +kubebuilder:default=Manual
	// +optional
	IdentityIssuerRenewal RenewalPolicy `json:"identityIssuerRenewal,omitempty"`

	// StalledAfter is how long the rotation may wait in one phase before the operator reports it
	// stalled (condition Stalled=True): blocked on something that needs a person.
	// +kubebuilder:default={}
	// +optional
	StalledAfter StalledAfter `json:"stalledAfter,omitempty"`

	// RemoteClusters are clusters linked to this mesh by other means than a Linkerd
	// multicluster Link, which share its trust anchor. The operator also discovers every Link
	// (links.multicluster.linkerd.io) in its multicluster namespace (--multicluster-namespace,
	// default linkerd-multicluster). A multicluster rotation waits in WaitingForRemoteClusters
	// until every linked cluster reports its data plane ready for the next step: see
	// status.remoteClusters.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	RemoteClusters []RemoteCluster `json:"remoteClusters,omitempty"`

	// ExpectedRotationDuration is how long a rotation is taken to last, from its start to its
	// final restart, until the history holds a completed one: the operator then uses the
	// longest completed rotation it recorded. It sets status.nextRotation's deadline. A Go
	// duration, such as 72h.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	ExpectedRotationDuration *metav1.Duration `json:"expectedRotationDuration,omitempty"`

	// RotationDeadlineMargin is how long before the trust anchor expires a rotation must have
	// finished: status.nextRotation's deadline keeps it free. A Go duration, such as 168h.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	RotationDeadlineMargin *metav1.Duration `json:"rotationDeadlineMargin,omitempty"`

	// HistoryLimit is how many rotations status.history keeps, the latest first.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +optional
	HistoryLimit *int32 `json:"historyLimit,omitempty"`
	// Suspend stops every act of the operator while true — no write to the cluster but this
	// object's status — as Flux's suspend and a CronJob's do, for an incident or a change
	// freeze. The operator keeps observing, probing and reporting: condition Suspended=True and
	// the blocking message say what it would do next. `linkerd trust rotate --suspend` and
	// `--resume` set it.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// RemoteCluster is a linked cluster named in the spec: how to read its TrustAnchorRotation.
type RemoteCluster struct {
	// Name of the cluster, as status.remoteClusters, messages, metrics and events name it. A
	// Link of the same name (its spec.targetClusterName) is the same cluster: the spec wins.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// KubeconfigSecret is the Secret, in the operator's multicluster namespace, holding a
	// kubeconfig for the remote cluster (as Linkerd multicluster's cluster-credentials-<link>
	// does), allowed to get and watch the remote TrustAnchorRotation.
	KubeconfigSecret SecretKeyRef `json:"kubeconfigSecret"`

	// RotationName is the name of the remote cluster's TrustAnchorRotation. Default cluster.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RotationName string `json:"rotationName,omitempty"`
}

// SecretKeyRef names a key of a Secret in the operator's multicluster namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key of the Secret's data holding the kubeconfig. Default kubeconfig.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// StalledAfter holds the thresholds of the Stalled condition: how long the rotation may wait in
// one phase (or, when Synced, be blocked) before it counts as stalled. Go durations, such as 90m.
type StalledAfter struct {
	// Default applies to every phase but WaitingForIdentityRotation.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	// +optional
	Default *metav1.Duration `json:"default,omitempty"`

	// IdentityIssuerRenewal applies in WaitingForIdentityRotation, which waits for the identity
	// issuer to be renewed onto the new trust anchor: with spec.identityIssuerRenewal Manual, a
	// person runs cmctl renew.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	// +optional
	IdentityIssuerRenewal *metav1.Duration `json:"identityIssuerRenewal,omitempty"`
}

// RotationStrategy is how a rotation moves the mesh onto a new trust anchor (spec.strategy).
type RotationStrategy string

const (
	// StrategyStandard: expand the bundle, restart, switch the issuer, reduce, restart.
	StrategyStandard RotationStrategy = "Standard"
	// StrategyCrossSigned: the new anchor is signed by the old one and bridges the old roots to
	// the new issuer; one restart, onto the new anchor alone.
	StrategyCrossSigned RotationStrategy = "CrossSigned"
)

// RenewalPolicy says whether the operator acts by itself.
// +kubebuilder:validation:Enum=Manual;Automatic
type RenewalPolicy string

const (
	Manual    RenewalPolicy = "Manual"
	Automatic RenewalPolicy = "Automatic"
)

// RestartMethod is how the operator restarts a workload.
// +kubebuilder:validation:Enum=RolloutRestart;Evict
type RestartMethod string

const (
	// RolloutRestart sets the pod-template annotation kubectl.kubernetes.io/restartedAt, as
	// kubectl rollout restart does: the workload's controller replaces its pods by its own
	// update strategy.
	RolloutRestart RestartMethod = "RolloutRestart"
	// Evict evicts the workload's pods that have not converged through the Eviction API
	// (policy/v1), which respects PodDisruptionBudgets.
	Evict RestartMethod = "Evict"
)

// DataPlaneRestart configures automatic restarts of meshed workloads. The operator restarts
// the owners of the pods that have not converged (Deployments, StatefulSets, DaemonSets;
// ReplicaSets through their Deployment), waits for each rollout by observing it, and never
// deletes a pod without a restartable owner: it names it in the blocking message.
type DataPlaneRestart struct {
	// Policy is Manual (the user restarts workloads) or Automatic (the operator does).
	// +kubebuilder:default=Manual
	// +optional
	Policy RenewalPolicy `json:"policy,omitempty"`

	// Method is RolloutRestart (the pod-template annotation, as kubectl rollout restart) or
	// Evict (the Eviction API, which respects PodDisruptionBudgets).
	// +kubebuilder:default=RolloutRestart
	// +optional
	Method RestartMethod `json:"method,omitempty"`

	// NamespaceSelector selects the namespaces whose workloads the operator restarts. Empty:
	// every namespace but the Linkerd control plane's.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// WorkloadSelector selects, by their labels, the workloads (Deployments, StatefulSets,
	// DaemonSets) the operator restarts. Empty: every meshed workload.
	// +optional
	WorkloadSelector *metav1.LabelSelector `json:"workloadSelector,omitempty"`

	// MaxConcurrent is how many workloads may be restarting at once, cluster-wide.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`

	// MaxConcurrentPerNamespace is how many workloads may be restarting at once in one
	// namespace.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConcurrentPerNamespace int32 `json:"maxConcurrentPerNamespace,omitempty"`

	// MaintenanceWindows, when set, are the only times an automatic restart may start (one
	// already started runs to its end). Empty: any time.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
}

// Weekday is a day of the week, abbreviated.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// MaintenanceWindow is a daily time range, on some days of the week, in a time zone. A window
// whose end is not after its start ends on the next day (22:00 to 02:00).
type MaintenanceWindow struct {
	// Days the window opens on (the day it starts). Empty: every day.
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +optional
	Days []Weekday `json:"days,omitempty"`

	// Start is when the window opens, HH:MM (24-hour clock).
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`

	// End is when the window closes, HH:MM (24-hour clock).
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	End string `json:"end"`

	// TimeZone is an IANA time zone name, such as Europe/Paris. Default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// TrustAnchorRotationStatus is the observed state of the rotation, written by the operator.
type TrustAnchorRotationStatus struct {
	// Phase is the current high-level phase of the rotation workflow.
	// +kubebuilder:default=Synced
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// BlockingMessage says why the rotation is waiting, if it is: what it waits for, with counts
	// and the first few objects concerned.
	// +optional
	BlockingMessage string `json:"blockingMessage,omitempty"`

	// ActiveIssuerFingerprint is the fingerprint (lowercase hex SHA-256 of the DER) of the
	// identity issuer certificate currently observed as active, for information: workload
	// certificates converge on its trust anchor, not on this one issuer.
	// +optional
	ActiveIssuerFingerprint string `json:"activeIssuerFingerprint,omitempty"`

	// PreviousAnchorFingerprint is the fingerprint of the certificate in the operator-managed
	// linkerd-previous-anchor Secret, which keeps the old anchor trusted during a rotation.
	// +optional
	PreviousAnchorFingerprint string `json:"previousAnchorFingerprint,omitempty"`

	// LastPhaseTransitionTime is when the rotation last entered its current phase.
	// +optional
	LastPhaseTransitionTime *metav1.Time `json:"lastPhaseTransitionTime,omitempty"`

	// WorkloadCertificateRefreshInterval is the accelerated workload certificate refresh
	// interval currently being enforced, if any.
	// +kubebuilder:validation:Type=string
	// +optional
	WorkloadCertificateRefreshInterval *metav1.Duration `json:"workloadCertificateRefreshInterval,omitempty"`

	// TrustBundle reports the meshed non-control-plane pods whose proxies were injected with
	// the desired trust bundle (annotation linkerd.io/trust-root-sha256).
	// +optional
	TrustBundle *ConvergenceStatus `json:"trustBundle,omitempty"`

	// WorkloadCertificates reports the meshed pods whose live certificate chain, read from the
	// proxy's admin port, verifies to the active issuer's trust anchor (the new anchor once the
	// issuer is renewed onto it), whichever issuer under that anchor signed it.
	// +optional
	WorkloadCertificates *ConvergenceStatus `json:"workloadCertificates,omitempty"`

	// SourceFingerprints are the fingerprints observed for the configured trust-anchor sources.
	// +listType=atomic
	// +optional
	SourceFingerprints []SourceFingerprint `json:"sourceFingerprints,omitempty"`

	// InFlightAnchors are the PEM certificates of trust anchors that a rotation was moving to
	// when cert-manager renewed the anchor again, before that rotation finished. Some live
	// certificate may still chain to them, so the trust bundle keeps them, between the current
	// anchor and the previous one, until the restarted rotation retires the previous anchor.
	// +listType=atomic
	// +optional
	InFlightAnchors []string `json:"inFlightAnchors,omitempty"`

	// RemoteClusters report the linked clusters a multicluster rotation waits for, as this
	// operator last observed their TrustAnchorRotation: discovered from Links and listed in
	// spec.remoteClusters. Empty for a single cluster.
	// +listType=map
	// +listMapKey=name
	// +optional
	RemoteClusters []RemoteClusterStatus `json:"remoteClusters,omitempty"`

	// Conditions describe the rotation the way kstatus does (Ready, Reconciling, Stalled) and
	// notable rotation states, such as OutOfOrderIssuerRotation.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the metadata.generation of the spec the operator last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Checkpoint is where the operator's workflow stands. The operator writes it before and
	// after every act, so that a restarted operator resumes at the same step and repeats an
	// interrupted act with the same idempotency token (a no-op when it had already happened).
	// +optional
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`

	// NextRotation is the latest moment the next rotation can start and still finish, its final
	// restart included, before the current trust anchor expires, with what it is computed from.
	// Absent while the trust anchor is unusable.
	// +optional
	NextRotation *NextRotation `json:"nextRotation,omitempty"`

	// RestartDeadline is when the data plane should have restarted onto the new anchor alone, in
	// a CrossSigned rotation that leaves its one restart to natural churn
	// (spec.dataPlaneRestart.policy Manual): set in phase RemovingOldTrustRoots, absent otherwise.
	// +optional
	RestartDeadline *RestartDeadline `json:"restartDeadline,omitempty"`

	// History holds the latest rotations, the latest first (at most spec.historyLimit): the one
	// in progress, if any, then the finished ones. An entry is opened and closed in the same
	// status write that moves the checkpoint, so an operator that stops anywhere neither loses
	// nor repeats one.
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	History []RotationRecord `json:"history,omitempty"`
	// ActFailure is the operator's last failed act, as long as it stands: cleared by the next
	// act that succeeds and when the workflow leaves the step. Condition ActFailed says the same.
	// +optional
	ActFailure *ActFailure `json:"actFailure,omitempty"`
}

// ConvergenceStatus reports progress for a group of pods.
type ConvergenceStatus struct {
	// Status is the aggregate state of the group.
	Status ConvergenceState `json:"status"`
	// ConvergedPods is the number of target pods currently observed to have converged.
	// +kubebuilder:validation:Minimum=0
	ConvergedPods int32 `json:"convergedPods"`
	// TargetPods is the number of pods in the group.
	// +kubebuilder:validation:Minimum=0
	TargetPods int32 `json:"targetPods"`
	// Anchors are the fingerprints of the trust anchors the group converges on: for the trust
	// bundle, the anchors of the desired bundle (the one in force once written); for workload
	// certificates, the anchor their chains must verify to. Linked clusters read them to know
	// what a converged count means.
	// +listType=atomic
	// +optional
	Anchors []string `json:"anchors,omitempty"`
	// NotProbedPods is how many of the target pods that have not converged the operator has not
	// probed yet (workload certificates only): pods just started, by a restart for instance,
	// whose live certificate is still unread. They are neither converged nor behind.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NotProbedPods int32 `json:"notProbedPods,omitempty"`
}

// RemoteClusterStatus is what the operator last observed of a linked cluster.
type RemoteClusterStatus struct {
	// Name of the cluster.
	Name string `json:"name"`
	// Source says where the cluster was found: Link <namespace>/<name> or spec.remoteClusters.
	// +optional
	Source string `json:"source,omitempty"`
	// Phase of the remote cluster's rotation.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Rotation is the remote rotation's id: the fingerprint of the anchor it rotates to.
	// +optional
	Rotation string `json:"rotation,omitempty"`
	// Anchors are the fingerprints of the anchors the remote data plane trusts (its desired
	// trust bundle's).
	// +listType=atomic
	// +optional
	Anchors []string `json:"anchors,omitempty"`
	// TrustBundle is the remote cluster's trust-bundle convergence.
	// +optional
	TrustBundle *ConvergenceStatus `json:"trustBundle,omitempty"`
	// WorkloadCertificates is the remote cluster's workload-certificate convergence.
	// +optional
	WorkloadCertificates *ConvergenceStatus `json:"workloadCertificates,omitempty"`
	// LastObserved is when the operator last read the remote TrustAnchorRotation.
	// +optional
	LastObserved *metav1.Time `json:"lastObserved,omitempty"`
	// BlockingReason is why the cluster holds the rotation at a remote gate, when it does: a
	// CamelCase reason (RemoteUnreachable, RemoteTrustBundleConverging, ...).
	// +optional
	BlockingReason string `json:"blockingReason,omitempty"`
	// BlockingMessage says it for people, naming the cluster.
	// +optional
	BlockingMessage string `json:"blockingMessage,omitempty"`
}

// SourceFingerprint is the fingerprint observed for one configured trust-anchor source.
type SourceFingerprint struct {
	// Fingerprint of the certificate currently loaded from the source.
	Fingerprint string `json:"fingerprint"`
	// Kind of object providing the certificate material.
	// +kubebuilder:default=secret
	// +optional
	Kind SourceKind `json:"kind,omitempty"`
	// Name of the referenced Secret or ConfigMap, when applicable.
	// +optional
	Name string `json:"name,omitempty"`
	// Namespace of the referenced Secret or ConfigMap, when applicable.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// Checkpoint is the workflow engine's resumable position.
type Checkpoint struct {
	// Step is the stable kebab-case name of the step the workflow is at.
	Step string `json:"step"`

	// Token is the idempotency token of the step's act, written here before the act runs. An
	// act stamps its writes with it (for example the restartedAt annotation of a rollout
	// restart), so running it again after a crash changes nothing that already happened.
	// +optional
	Token string `json:"token,omitempty"`

	// Acts counts the acts the step has run under its token, for observability and tests.
	// +optional
	Acts int32 `json:"acts,omitempty"`

	// Rotation identifies the rotation in progress: the fingerprint of the trust anchor it
	// rotates to. Empty when Synced.
	// +optional
	Rotation string `json:"rotation,omitempty"`

	// Strategy is the strategy of the rotation in progress (spec.strategy when it started): a
	// rotation finishes the way it started, whatever spec.strategy says since. Empty when
	// Synced, and in a checkpoint written before strategies existed: Standard.
	// +optional
	Strategy RotationStrategy `json:"strategy,omitempty"`

	// StartTime is when the rotation in progress started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
}

// TrustAnchorRotationList is a list of TrustAnchorRotation.
// +kubebuilder:object:root=true
type TrustAnchorRotationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrustAnchorRotation `json:"items"`
}

// NextRotation is the deadline of the next rotation and what it is computed from:
// deadline = anchorNotAfter - margin - rotationDuration (see "Next-rotation
// deadline" in docs/reference.md).
type NextRotation struct {
	// Deadline is the latest moment the next rotation can start.
	Deadline metav1.Time `json:"deadline"`
	// AnchorNotAfter is when the current trust anchor expires.
	AnchorNotAfter metav1.Time `json:"anchorNotAfter"`
	// RotationDuration is how long the next rotation is taken to last: the longest of the
	// expected duration and the least a rotation takes by the certificates' lifetimes.
	// +kubebuilder:validation:Type=string
	RotationDuration metav1.Duration `json:"rotationDuration"`
	// Margin is spec.rotationDeadlineMargin, defaulted.
	// +kubebuilder:validation:Type=string
	Margin metav1.Duration `json:"margin"`
	// Basis says where RotationDuration comes from, for people.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Basis string `json:"basis,omitempty"`
}

// RestartDeadline is the deadline of a data-plane restart left to natural churn.
type RestartDeadline struct {
	// Deadline is when every meshed pod should run with the trust bundle of the new anchor.
	Deadline metav1.Time `json:"deadline"`
	// Since is when the trust bundle was reduced to the new anchor and the churn started to
	// count (status.lastPhaseTransitionTime of phase RemovingOldTrustRoots).
	Since metav1.Time `json:"since"`
	// ChurnPeriod is spec.naturalChurnPeriod, defaulted.
	// +kubebuilder:validation:Type=string
	ChurnPeriod metav1.Duration `json:"churnPeriod"`
}

// RotationOutcome is how a recorded rotation ended.
// +kubebuilder:validation:Enum=InProgress;Completed;Superseded
type RotationOutcome string

const (
	// RotationInProgress: the rotation has not finished.
	RotationInProgress RotationOutcome = "InProgress"
	// RotationCompleted: the rotation went through its last step.
	RotationCompleted RotationOutcome = "Completed"
	// RotationSuperseded: the trust anchor was renewed again before the rotation finished; a new
	// rotation, towards the newer anchor, took over.
	RotationSuperseded RotationOutcome = "Superseded"
)

// RestartActor says who restarted pods during a rotation.
// +kubebuilder:validation:Enum=Operator;User
type RestartActor string

const (
	RestartedByOperator RestartActor = "Operator"
	RestartedByUser     RestartActor = "User"
)

// RotationRecord is one rotation of status.history.
type RotationRecord struct {
	// Rotation is the rotation's id: the fingerprint of the trust anchor it rotated to.
	// +kubebuilder:validation:MaxLength=64
	Rotation string `json:"rotation"`
	// From is the fingerprint of the trust anchor it rotated from, when known.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	From string `json:"from,omitempty"`
	// StartTime is when the rotation started (status.checkpoint.startTime).
	StartTime metav1.Time `json:"startTime"`
	// FinishTime is when it finished; absent while in progress.
	// +optional
	FinishTime *metav1.Time `json:"finishTime,omitempty"`
	// Outcome is how it ended, or InProgress.
	Outcome RotationOutcome `json:"outcome"`
	// Phases are the phases it went through, in order, with how long it spent in each: they add
	// up to finishTime - startTime. The last one is still open while in progress.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Phases []PhaseDuration `json:"phases,omitempty"`
	// Restarts are the restarts the rotation waited on, by step, and who did them.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Restarts []RestartRecord `json:"restarts,omitempty"`
	// Faults are the reasons of what went wrong on the way (BundleDrifted, RotationSuperseded,
	// IssuerRotatedBeforeTrustBundleConverged, IdentityRestartedBeforeDataPlaneConverged, ...),
	// each once, in the order first seen.
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	Faults []string `json:"faults,omitempty"`
}

// PhaseDuration is the time a rotation spent in one phase, one visit.
type PhaseDuration struct {
	Phase Phase `json:"phase"`
	// +kubebuilder:validation:Type=string
	Duration metav1.Duration `json:"duration"`
}

// RestartRecord is a step's restarts: by the operator (its acts, counted once per idempotency
// token) or by the user (the step waited on a restart the user made).
type RestartRecord struct {
	// +kubebuilder:validation:MaxLength=63
	Step string       `json:"step"`
	By   RestartActor `json:"by"`
	// Acts counts the operator's restart acts at the step; 0 for the user's.
	// +optional
	Acts int32 `json:"acts,omitempty"`
}

// Condition types and reasons of act failures (status.actFailure) and of spec.suspend.
const (
	// ConditionActFailed is True while the last act of the workflow's current step failed: a
	// write the operator made was refused (RBAC, an admission webhook or policy, a conflict).
	// The reason is the apiserver's (Forbidden, Invalid, Conflict, ...; ActError when the error
	// carries none), the message names the step, the write, the object and the error. It is
	// False once an act of the step succeeds or the workflow leaves the step. A failure that
	// lasts longer than spec.stalledAfter also makes Stalled True.
	ConditionActFailed = "ActFailed"
	// ReasonActFailed is Ready's and Reconciling's reason while ActFailed is True.
	ReasonActFailed = "ActFailed"
	// ReasonActError is ActFailed's reason for an error that carries no apiserver reason.
	ReasonActError = "ActError"
	// ReasonActSucceeded: ActFailed=False after an act of the failed step succeeded.
	ReasonActSucceeded = "ActSucceeded"
	// ReasonStepLeft: ActFailed=False after the workflow left the step whose act failed.
	ReasonStepLeft = "StepLeft"

	// ConditionSuspended is True while spec.suspend holds every act; the message says what the
	// operator would do next. False (reason Resumed) once spec.suspend is cleared.
	ConditionSuspended = "Suspended"
	ReasonSuspended    = "Suspended"
	ReasonResumed      = "Resumed"
)

// ActFailure is an act of the operator that failed: which step, the apiserver's reason and
// error, and since when the step's acts have failed in a row.
type ActFailure struct {
	// Step is the workflow step whose act failed.
	Step string `json:"step"`
	// Reason is the apiserver's reason for the error (Forbidden, Invalid, Conflict, ...), or
	// ActError when the error carries none.
	Reason string `json:"reason"`
	// Message is the error: the write, the object and what the apiserver said.
	Message string `json:"message"`
	// Since is when the step's acts began to fail, without an act succeeding since.
	Since metav1.Time `json:"since"`
}
