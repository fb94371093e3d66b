// This file holds the status: what the operator observed and did, written by the operator.

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

	// ActiveIssuerObservedTime is when the operator first observed the identity issuer named by
	// activeIssuerFingerprint in the issuer Secret: identity must sign with it from then on,
	// once the kubelet has refreshed its volume (condition IdentityIssuerStale).
	// +optional
	ActiveIssuerObservedTime *metav1.Time `json:"activeIssuerObservedTime,omitempty"`

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
	// the desired trust bundle (annotation linkerd.io/trust-root-sha256). In a cross-signed
	// rotation away from an expired anchor, pods injected with that anchor alone count too: they
	// verify the new issuer's chain through the renewed anchor, which the expired one signed.
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

// NextRotation is the deadline of the next rotation and what it is computed from:
// deadline = min(anchorNotAfter, bridgeNotAfter) - margin - rotationDuration (see
// "Next-rotation deadline" in docs/reference.md).
type NextRotation struct {
	// Deadline is the latest moment the next rotation can start.
	Deadline metav1.Time `json:"deadline"`
	// AnchorNotAfter is when the current trust anchor expires.
	AnchorNotAfter metav1.Time `json:"anchorNotAfter"`
	// BridgeNotAfter is set when a bridge certificate of cross-signed rotations, carried in the
	// trust anchor's or the identity issuer's Secret, expires before the trust anchor: when
	// it expires. Linkerd identity caps every workload certificate at it, so the deadline counts
	// from it, and the next rotation must go back to a self-signed trust anchor (Standard) for
	// the issuer's chain to drop it.
	// +optional
	BridgeNotAfter *metav1.Time `json:"bridgeNotAfter,omitempty"`
	// RotationDuration is how long the next rotation is taken to last: the longest of the
	// expected duration and the least a rotation takes by the certificates' lifetimes.
	// +kubebuilder:validation:Type=string
	RotationDuration metav1.Duration `json:"rotationDuration"`
	// Margin is spec.rotationDeadlineMargin, defaulted.
	// +kubebuilder:validation:Type=string
	Margin metav1.Duration `json:"margin"`
	// Basis says, for people, which bridge certificate limits the deadline, if one does, and
	// where RotationDuration comes from.
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
