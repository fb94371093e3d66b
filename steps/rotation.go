package steps

import (
	"context"
	"crypto/x509"
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
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
func Rotation(w Writer) []workflow.Step[*State] {
	all := rotation(w)
	for i, st := range all {
		if bundleSteps[st.Name] {
			// Every step that relies on the trust bundle checks it first (see CheckBundle).
			all[i].Observe = guardBundle(st.Name, st.Observe)
		}
	}
	return all
}

// PlanAhead returns the steps of Rotation without the trust-bundle check, for a plan's view of
// the steps after the next one: the rotation reaches them only once the steps before are done,
// and the check then applies to the bundle those leave (expand-trust-bundle writes it), not to
// the bundle of today's snapshot.
func PlanAhead(w Writer) []workflow.Step[*State] { return rotation(w) }

func rotation(w Writer) []workflow.Step[*State] {
	p := func(ph v1alpha1.Phase) string { return string(ph) }
	return []workflow.Step[*State]{
		{
			Name: StepBootstrap, Phase: p(v1alpha1.PhaseSynced),
			Doc:     "Create linkerd-previous-anchor and linkerd-identity-trust-roots when they are missing.",
			Observe: observeBootstrap, Act: actBootstrap(w), Describe: describeBootstrap,
		},
		{
			Name: StepDetectAnchorRotation, Phase: p(v1alpha1.PhaseSynced),
			Doc:     "Wait for cert-manager to renew the trust anchor; keep the trust bundle as rendered meanwhile.",
			Observe: observeDetect, Act: actDetect(w), Describe: describeBundleWrite,
		},
		{
			Name: StepExpandTrustBundle, Phase: p(v1alpha1.PhaseRefreshingControlPlane),
			Doc:     "Write the expanded trust bundle: the new anchor and the previous one.",
			Observe: observeBundleWritten, Act: actWriteDesiredBundle(w), Describe: describeBundleWrite,
		},
		{
			Name: StepRefreshControlPlane, Phase: p(v1alpha1.PhaseRefreshingControlPlane),
			Doc:     "Restart linkerd-destination and linkerd-proxy-injector so the injector stamps the expanded bundle on new pods (identity is left alone: see restart-identity).",
			Observe: observeRestart(destinationAndInjector), Act: actRestart(w, destinationAndInjector), Describe: describeRestart(destinationAndInjector),
		},
		{
			Name: StepPropagateTrustRoots, Phase: p(v1alpha1.PhasePropagatingTrustRoots),
			Doc:     "Wait until every meshed pod was injected with the expanded bundle (restart your workloads).",
			Observe: observeBundleRestarts(propagate, "expanded"), Act: actRestarts(w, propagate), Describe: describeRestarts(propagate),
		},
		{
			// Passes at once without linked clusters: a single-cluster rotation never shows it.
			Name: StepWaitForRemoteTrustRoots, Phase: p(v1alpha1.PhaseWaitingForRemoteClusters),
			Doc:     "Wait until every linked cluster's data plane runs with a trust bundle holding the new anchor; passes at once without linked clusters.",
			Observe: observeRemotes(GateTrustRoots), Describe: describeRemotes(GateTrustRoots),
		},
		{
			Name: StepRestartIdentity, Phase: p(v1alpha1.PhasePropagatingTrustRoots),
			Doc: "Restart linkerd-identity now that every pod trusts the new anchor: it loads the expanded roots, so it will accept the renewed issuer; " +
				"with the issuer renewed already, identity is scaled to 0 and back instead, so that no old identity pod runs beside a new one, and issues no certificate meanwhile while those it issued stay valid.",
			Observe: observeRestartIdentity, Act: actRestartIdentity(w), Describe: describeRestartIdentity, Token: restartIdentityToken,
		},
		{
			Name: StepWaitForIdentityIssuer, Phase: p(v1alpha1.PhaseWaitingForIdentityRotation),
			Doc:     "Wait for the identity issuer to be renewed onto the new anchor (cmctl renew -n linkerd linkerd-identity-issuer).",
			Observe: observeIssuerRenewal, Act: actRenewIssuer(w), Describe: describeRenewIssuer, Token: issuerRenewalToken,
		},
		{
			// Still WaitingForIdentityRotation: RenewingWorkloadCerts tells users to restart their
			// workloads, which is only useful once every identity replica signs with the new issuer
			// (a replica may not have hot-reloaded it yet).
			Name: StepRestartIdentityOnNewIssuer, Phase: p(v1alpha1.PhaseWaitingForIdentityRotation),
			Doc:     "Restart linkerd-identity so that every identity replica signs with the new issuer, its own proxy included.",
			Observe: observeRestart(identityOnly), Act: actRestart(w, identityOnly), Describe: describeRestart(identityOnly),
		},
		{
			Name: StepRefreshControlPlaneCerts, Phase: p(v1alpha1.PhaseRenewingWorkloadCerts),
			Doc:     "Restart linkerd-destination and linkerd-proxy-injector so their proxies hold certificates from the new issuer.",
			Observe: observeRestart(destinationAndInjector), Act: actRestart(w, destinationAndInjector), Describe: describeRestart(destinationAndInjector),
		},
		{
			Name: StepRenewWorkloadCertificates, Phase: p(v1alpha1.PhaseRenewingWorkloadCerts),
			Doc:     "Wait until every meshed pod presents a certificate that chains to the new anchor, from the new issuer or a later renewal of it (restart workloads, or let proxies refresh).",
			Observe: observeCertificateRestarts, Act: actRestarts(w, renew), Describe: describeRestarts(renew),
		},
		{
			Name: StepWaitForRemoteCertificates, Phase: p(v1alpha1.PhaseWaitingForRemoteClusters),
			Doc:     "Wait until every linked cluster's meshed pods present certificates on the new anchor's path; passes at once without linked clusters.",
			Observe: observeRemotes(GateCertificates), Describe: describeRemotes(GateCertificates),
		},
		{
			Name: StepRetirePreviousAnchor, Phase: p(v1alpha1.PhaseRefreshingControlPlane),
			Doc:     "Copy the current anchor's certificate into linkerd-previous-anchor, retiring the old anchor.",
			Observe: observeRetired, Act: actRetire(w), Describe: describeRetire,
		},
		{
			Name: StepReduceTrustBundle, Phase: p(v1alpha1.PhaseRefreshingControlPlane),
			Doc:     "Write the reduced trust bundle: the new anchor alone.",
			Observe: observeBundleWritten, Act: actWriteDesiredBundle(w), Describe: describeBundleWrite,
		},
		{
			Name: StepRefreshControlPlaneReduced, Phase: p(v1alpha1.PhaseRefreshingControlPlane),
			Doc:     "Restart the whole control plane onto the reduced bundle, identity first.",
			Observe: observeRestart(wholeControlPlane), Act: actRestart(w, wholeControlPlane), Describe: describeRestart(wholeControlPlane),
		},
		{
			Name: StepRemoveOldTrustRoots, Phase: p(v1alpha1.PhaseRemovingOldTrustRoots),
			Doc:     "Wait until every meshed pod was injected with the reduced bundle (restart your workloads).",
			Observe: observeBundleRestarts(reduce, "reduced"), Act: actRestarts(w, reduce), Describe: describeRestarts(reduce),
		},
	}
}

// userSteps are the steps that wait for the user unless the spec automates them.
var userSteps = map[string]bool{StepPropagateTrustRoots: true, StepWaitForIdentityIssuer: true, StepRenewWorkloadCertificates: true, StepRemoveOldTrustRoots: true}

// WaitsForUser reports whether the step waits for the user (restarts, the issuer renewal) unless
// spec.dataPlaneRestart or spec.identityIssuerRenewal automates it.
func WaitsForUser(step string) bool { return userSteps[step] }

// AutomatedBy says what the operator does at a step that waits for the user (WaitsForUser) when
// the spec automates the user's part, or "" when the user does it.
func AutomatedBy(step string, spec v1alpha1.TrustAnchorRotationSpec) string {
	switch {
	case step == StepWaitForIdentityIssuer && spec.IdentityIssuerRenewal == v1alpha1.Automatic:
		return "the operator renews the identity issuer, as cmctl renew does (spec.identityIssuerRenewal: Automatic)"
	case step == StepWaitForIdentityIssuer || !userSteps[step] || spec.DataPlaneRestart.Policy != v1alpha1.Automatic:
		return ""
	}
	method := spec.DataPlaneRestart.Method
	if method == "" {
		method = v1alpha1.RolloutRestart
	}
	what := "restarts the workloads whose pods are behind"
	if step == StepRenewWorkloadCertificates && method != v1alpha1.Evict {
		what = "restarts the workloads whose proxies have not refreshed onto the new anchor's issuer within twice the refresh interval"
	}
	return fmt.Sprintf("the operator %s (spec.dataPlaneRestart: Automatic, %s)", what, method)
}
