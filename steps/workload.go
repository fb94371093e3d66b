package steps

import (
	"strings"
	"time"
)

// EvictedForAnnotation is set on a workload's metadata (not its pod template) to the token of
// the step that evicts its pods: the record that the workload is being restarted by eviction.
const EvictedForAnnotation = "trust.linkerd.io/evicted-for"

// WorkloadRef names a workload: "namespace/Kind/name".
type WorkloadRef struct{ Namespace, Kind, Name string }

func (w WorkloadRef) String() string { return w.Namespace + "/" + w.Kind + "/" + w.Name }

// ParseWorkload parses "namespace/Kind/name".
func ParseWorkload(key string) (WorkloadRef, bool) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return WorkloadRef{}, false
	}
	return WorkloadRef{parts[0], parts[1], parts[2]}, true
}

// Restartable reports whether the operator can restart the workload: Deployments (and through
// them their ReplicaSets' pods), StatefulSets and DaemonSets.
func (w WorkloadRef) Restartable() bool {
	switch w.Kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		return true
	}
	return false
}

// Workload is what automatic restarts need of a workload that owns meshed pods.
type Workload struct {
	WorkloadRef
	// Found is false when the workload object is not in the operator's cache.
	Found bool
	// OutOfScope is true when the workload is in a namespace where the operator may not restart
	// workloads (it runs with --restart-namespaces, which does not list it): it is not watched,
	// and the user restarts it.
	OutOfScope bool
	// Selected is true when the spec's namespace and workload selectors select it.
	Selected bool
	// RestartedAt is the pod template's kubectl.kubernetes.io/restartedAt.
	RestartedAt string
	// EvictedFor is the workload's trust.linkerd.io/evicted-for annotation.
	EvictedFor string
	// AdditionalEnv is the pod template's config.linkerd.io/proxy-additional-env ("" when absent).
	AdditionalEnv string
	// RefreshOverride is the pod template's trust.linkerd.io/refresh-override ("" when absent).
	RefreshOverride string
	// RolledOut is true when the workload's latest template is fully rolled out and available.
	RolledOut bool
	// Progress says what the rollout waits for, when it is not rolled out.
	Progress string
	// Failed says why the rollout failed (progress deadline exceeded), when it did.
	Failed string
	// NoRollout says why a change of its pod template does not replace its pods ("" when it
	// does): a StatefulSet or DaemonSet with updateStrategy OnDelete, or a StatefulSet whose
	// rolling update has a partition (pods below it stay on their revision). Such a workload is
	// restarted by eviction whatever spec.dataPlaneRestart.method says, as the pods a template
	// change would never replace are exactly what a rotation needs replaced.
	NoRollout string
	// Settling says, after the operator evicted pods of the workload, that its controller's
	// status has not changed since: the cached status predates the eviction, so RolledOut says
	// nothing about it yet ("" once the status moved, or when nothing was evicted).
	Settling string
	// BundleBehind are the names of its alive, not terminating, pods that were not injected with
	// the desired trust bundle.
	BundleBehind []string
	// Pods are the names of its alive, not terminating, meshed pods, and Created when each was
	// created.
	Pods    []string
	Created map[string]time.Time
	// Running counts its running, not terminating, pods, Terminating its terminating ones, and
	// Replicas is how many it wants.
	Running, Terminating int
	Replicas             int32
	// PDB names the PodDisruptionBudget covering its pods that allows the fewest disruptions,
	// and DisruptionsAllowed what it allows; PDB is "" when none covers them.
	PDB                string
	DisruptionsAllowed int32
}
