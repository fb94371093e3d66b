// This file holds the spec: what a user asks of rotations.

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrustAnchorRotationSpec is the desired behaviour of trust-anchor rotations.
type TrustAnchorRotationSpec struct {
	// WorkloadCertificateRefreshInterval is the interval to configure temporarily for workload
	// certificate refreshes while the rotation accelerates certificate renewal
	// (RenewingWorkloadCerts). A Go duration of at least 10s, such as 5m.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="must be at least 10s: proxies refresh no faster than LINKERD2_PROXY_IDENTITY_MIN_REFRESH"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="must be at most 24h: Linkerd's workload certificates live 24h by default, so a longer interval accelerates nothing"
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
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (a year): the restart it leaves to churn must fall within the trust anchor's life"
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

	// StaleIssuerRestart says who restarts linkerd-identity when, between rotations, it signs
	// workload certificates with an issuer the issuer Secret no longer holds (condition
	// IdentityIssuerStale): it missed the reload of its issuer, and every certificate it signs
	// expires with that issuer. Manual (the default): the operator reports it, and the user
	// restarts identity (kubectl rollout restart). Automatic: the operator restarts identity
	// once per stale issuer, and only when the issuer in the Secret chains to an anchor of the
	// trust bundle identity loads at start. It has no effect during a rotation, whose steps
	// restart identity themselves.
	// +kubebuilder:default=Manual
	// +optional
	StaleIssuerRestart RenewalPolicy `json:"staleIssuerRestart,omitempty"`

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
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (a year)"
	// +optional
	ExpectedRotationDuration *metav1.Duration `json:"expectedRotationDuration,omitempty"`

	// RotationDeadlineMargin is how long before the trust anchor expires a rotation must have
	// finished: status.nextRotation's deadline keeps it free. A Go duration, such as 168h.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('87600h')",message="must be at most 87600h (ten years, the longest trust anchor lifetime in use)"
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
	// Takeover lets the operator move a mesh that runs on certificates made by hand — an anchor
	// and an identity issuer handed to Linkerd's chart, as Linkerd's documentation installs them
	// — onto cert-manager's trust anchor: a rotation whose previous anchors are the ones the
	// trust-roots ConfigMap holds, with the user's helm upgrades as waits whose blocking message
	// prints each command (docs/adopting.md). Without it the operator writes nothing on such a
	// mesh and says what it found (reason TakeoverNotRequested). `linkerd trust takeover` sets
	// it. It has no effect on a mesh that already trusts cert-manager's anchor.
	// +optional
	Takeover bool `json:"takeover,omitempty"`
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
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (a year)"
	// +optional
	Default *metav1.Duration `json:"default,omitempty"`

	// IdentityIssuerRenewal applies in WaitingForIdentityRotation, which waits for the identity
	// issuer to be renewed onto the new trust anchor: with spec.identityIssuerRenewal Manual, a
	// person runs cmctl renew.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('8760h')",message="must be at most 8760h (a year)"
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
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`

	// MaxConcurrentPerNamespace is how many workloads may be restarting at once in one
	// namespace.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
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
