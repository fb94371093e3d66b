package steps

// Decision reasons that code besides the step giving them matches on: a step that builds on
// another's decision, or the operator naming the Event of an act. The values are user-visible —
// the conditions' reasons, plans, logs — and others' programs may match on them: never change them.
const (
	// ReasonWaitingForIssuerRenewal: wait-for-identity-issuer waits for the identity issuer to
	// be renewed onto the new trust anchor (by the user, unless the operator renews it itself).
	ReasonWaitingForIssuerRenewal = "WaitingForIssuerRenewal"
	// ReasonIssuerNotOnCurrentAnchor: renew-workload-certificates waits because the identity
	// issuer is no longer signed by the current trust anchor (the anchor was renewed again).
	ReasonIssuerNotOnCurrentAnchor = "IssuerNotOnCurrentAnchor"
	// ReasonRestartingWorkloads: a step acts to restart workloads itself
	// (spec.dataPlaneRestart.policy Automatic).
	ReasonRestartingWorkloads = "RestartingWorkloads"
	// ReasonRenewingIdentityIssuer: wait-for-identity-issuer acts to trigger the issuer's
	// renewal itself (spec.identityIssuerRenewal Automatic).
	ReasonRenewingIdentityIssuer = "RenewingIdentityIssuer"
	// ReasonStepStartedOver: a step that restarts pods jumps back to its own start, with a
	// fresh token, because the trust bundle changed under it (BundleDrift.StartOver).
	ReasonStepStartedOver = "StepStartedOver"
)
