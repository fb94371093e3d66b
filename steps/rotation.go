package steps

import (
	"context"
	"crypto/x509"
)

// Writer is every write the rotation makes. The operator's writes go to the apiserver; a dry
// run records them instead. Each is idempotent: writing what is already there changes nothing.
type Writer interface {
	// WritePreviousAnchor creates or updates the previous-anchor Secret with the certificate
	// only: a private key is never copied.
	WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error
	// WriteTrustRoots creates or updates the trust-roots ConfigMap's ca-bundle.crt.
	WriteTrustRoots(ctx context.Context, bundle string) error
	// RestartDeployment sets the pod-template annotation kubectl.kubernetes.io/restartedAt to
	// token, as `kubectl rollout restart` does; a no-op when it already has that value.
	RestartDeployment(ctx context.Context, namespace, name, token string) error
	// DeletePods deletes the named pods (a pod already gone is fine), for their controller to
	// replace them all at once rather than one by one.
	DeletePods(ctx context.Context, namespace string, names []string) error
	// ScaleDeployment sets a Deployment's replicas through its scale subresource, as `kubectl
	// scale` does; a no-op when it already has them.
	ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error
	// RestartWorkload restarts a Deployment, StatefulSet or DaemonSet as `kubectl rollout
	// restart` does (pod-template restartedAt = token) and, in the same patch, sets the given
	// pod-template annotations (a nil value removes one). A no-op when already so.
	RestartWorkload(ctx context.Context, w WorkloadRef, token string, annotations map[string]*string) error
	// AnnotateWorkload sets annotations on a workload's own metadata (no rollout).
	AnnotateWorkload(ctx context.Context, w WorkloadRef, annotations map[string]string) error
	// EvictPods evicts pods through the Eviction API (policy/v1). A pod a PodDisruptionBudget
	// does not let go now (429) is skipped, and a pod already gone is fine: neither is an error.
	// w is the workload whose pods they are (its namespace is theirs): the operator tracks
	// whether the workload's status has shown the disruption yet. It returns how many
	// evictions the apiserver accepted.
	EvictPods(ctx context.Context, w WorkloadRef, names []string) (evicted int, err error)
	// RenewCertificate triggers the re-issuance of a cert-manager Certificate as `cmctl renew`
	// does: condition Issuing=True, reason ManuallyTriggered, through the status subresource.
	RenewCertificate(ctx context.Context, namespace, name string) error
}

// Step names: public API (checkpoints, plans, events). Never rename one.
const (
	StepBootstrap                  = "bootstrap"
	StepDetectAnchorRotation       = "detect-anchor-rotation"
	StepExpandTrustBundle          = "expand-trust-bundle"
	StepRefreshControlPlane        = "refresh-control-plane"
	StepPropagateTrustRoots        = "propagate-trust-roots"
	StepWaitForRemoteTrustRoots    = "wait-for-remote-trust-roots"
	StepRestartIdentity            = "restart-identity"
	StepWaitForIdentityIssuer      = "wait-for-identity-issuer"
	StepRestartIdentityOnNewIssuer = "restart-identity-on-new-issuer"
	StepRefreshControlPlaneCerts   = "refresh-control-plane-certificates"
	StepRenewWorkloadCertificates  = "renew-workload-certificates"
	StepWaitForRemoteCertificates  = "wait-for-remote-certificates"
	StepRetirePreviousAnchor       = "retire-previous-anchor"
	StepReduceTrustBundle          = "reduce-trust-bundle"
	StepRefreshControlPlaneReduced = "refresh-control-plane-reduced"
	StepRemoveOldTrustRoots        = "remove-old-trust-roots"
)

// Rotation returns the single-cluster rotation: the ordered steps the operator runs and the
// CLI plans. The safety rule behind the order: linkerd-identity must never load a new-anchor
// issuer while some meshed pod does not yet trust the new anchor. Identity verifies a
// hot-reloaded issuer against the roots it loaded at start-up, so it is restarted only once the
// data plane has converged on the expanded bundle (restart-identity); until then a renewal of
// the issuer, early or on cert-manager's own schedule, is skipped by identity and harmless.
// Identity's own pods are meshed pods too: see restart-identity for how an old identity pod,
// which trusts only the old anchor, never runs beside one that signs with the new issuer.
//
// Every step that relies on the trust bundle checks it first (see CheckBundle).
func Rotation(w Writer) []Step { return guarded(rotation(w)) }

func rotation(w Writer) []Step { return rotationStages(w).Steps() }

// rotationStages is the rotation as nested stages (stage.go): what holds at each step follows
// from the stages it is in. A new step goes into the stage whose facts hold at it.
func rotationStages(w Writer) Stage {
	return Stage{Name: "rotation", Parts: []part{
		// At rest: the first setup, then the watch for a renewed anchor.
		Stage{Name: "at-rest", Parts: []part{bootstrapStep(w), detectAnchorRotationStep(w)}},
		// The expansion: every pod comes to trust both anchors, identity last, while the
		// issuer stays on the previous anchor.
		Stage{Name: "expand", Holds: Position{BeforeIssuerSwitch: true}, Parts: []part{
			// The bundle spreads while identity waits; the recovery from an expired anchor
			// renews the issuer and restarts identity out of this order.
			Stage{Name: "spread", Holds: Position{IdentityMustWait: true}, Parts: []part{
				outOfOrder{renewIssuerFirstStep(w)},
				expandTrustBundleStep(w),
				outOfOrder{restartIdentityFirstStep(w)},
				refreshControlPlaneStep(w),
				propagateTrustRootsStep(w),
			}},
			// Every pod trusts both anchors; identity loads them.
			Stage{Name: "load", Holds: Position{NeedsExpandedPods: true}, Parts: []part{
				waitForRemoteTrustRootsStep(),
				restartIdentityStep(w),
			}},
		}},
		// The issuer switch: every pod moves onto the new issuer while all still trust both.
		Stage{Name: "switch-issuer", Holds: Position{NeedsExpandedPods: true}, Parts: []part{
			waitForIdentityIssuerStep(w),
			Stage{Name: "move", Holds: Position{UrgentProbes: true}, Parts: []part{
				restartIdentityOnNewIssuerStep(w),
				refreshControlPlaneCertsStep(w),
				renewWorkloadCertificatesStep(w),
			}},
			waitForRemoteCertificatesStep(),
		}},
		// The reduction: the previous anchor leaves the bundle and the pods' roots.
		Stage{Name: "retire", Holds: Position{Retiring: true}, Parts: []part{
			// Retired, and still in every pod's roots.
			Stage{Name: "release", Holds: Position{NeedsExpandedPods: true}, Parts: []part{retirePreviousAnchorStep(w)}},
			Stage{Name: "reduce", Parts: []part{
				reduceTrustBundleStep(w),
				refreshControlPlaneReducedStep(w),
				removeOldTrustRootsStep(w),
			}},
		}},
	}}
}
