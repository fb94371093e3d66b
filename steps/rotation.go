package steps

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

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

// DesiredBundle is the bundle the rotation wants now: the current anchor, any in-flight
// anchors (a rotation superseded by a newer renewal), and the previous anchor. It is the
// expanded bundle while a rotation is under way, and the current anchor alone once the
// previous anchor is retired — or was renewed with the same key. Empty when the anchor is
// unusable.
func (s *State) DesiredBundle() string {
	if !s.Anchor.Usable() {
		return ""
	}
	if a := s.FinishingOn(); a != nil {
		return RenderBundle(a)
	}
	if !s.Rotating() {
		return RenderBundle(s.Anchor.Cert)
	}
	anchors := append([]*x509.Certificate{s.Anchor.Cert}, s.InFlight...)
	return RenderBundle(append(anchors, s.Previous.Cert)...)
}

// Rotating reports whether a rotation is under way: the anchor differs from the previous one,
// and not merely by a renewal that kept its key and subject (see SameKey).
func (s *State) Rotating() bool {
	return s.Anchor.Usable() && s.Previous.Usable() && s.Anchor.Fingerprint() != s.Previous.Fingerprint() &&
		!SameKey(s.Anchor.Cert, s.Previous.Cert)
}

// FinishingOn returns the anchor the rotation in progress finishes on when the trust anchor
// was renewed again after retire-previous-anchor wrote it into linkerd-previous-anchor: the
// round's anchor (State.Retiring), which the previous-anchor Secret now holds, while the
// current anchor is a newer one. nil otherwise: before that step, or when the anchor was not
// renewed again (the round then finishes on the current anchor).
//
// The round goes on reducing to that anchor alone — the bundle it was reducing to, the one
// every live certificate chains to — and restarts the control plane onto it; the next round
// then starts at detect-anchor-rotation (see Supersede) and is the first to write a bundle with
// the newer anchor. Reducing to the current anchor and the retired one instead, the next
// round's expanded bundle, would restart identity onto roots that hold the newer anchor before
// any data-plane pod trusts it: identity would then accept a newer-anchor issuer (cert-manager's
// own renewal is enough) while the data plane trusts only the older ones.
func (s *State) FinishingOn() *x509.Certificate {
	if s.Retiring == "" || !s.Anchor.Usable() || !s.Previous.Usable() ||
		s.Previous.Fingerprint() != s.Retiring || s.Anchor.Fingerprint() == s.Retiring {
		return nil
	}
	return s.Previous.Cert
}

// RenewedInPlace reports whether the anchor was renewed with the same key and subject as the
// previous anchor (cert-manager rotationPolicy Never): no rotation is needed, the previous
// anchor and the bundle are updated in place.
func (s *State) RenewedInPlace() bool {
	return s.Anchor.Usable() && s.Previous.Usable() && s.Anchor.Fingerprint() != s.Previous.Fingerprint() &&
		SameKey(s.Anchor.Cert, s.Previous.Cert)
}

// signedByKept reports whether c is signed by the previous anchor or an in-flight one.
func (s *State) signedByKept(c *x509.Certificate) bool {
	if s.Previous.Usable() && SignedBy(c, s.Previous.Cert) {
		return true
	}
	for _, a := range s.InFlight {
		if SignedBy(c, a) {
			return true
		}
	}
	return false
}

// IssuerOnCurrentAnchor reports whether the identity issuer is signed by the current anchor.
func (s *State) IssuerOnCurrentAnchor() bool {
	return s.Anchor.Usable() && s.Issuer.Usable() && SignedBy(s.Issuer.Cert, s.Anchor.Cert)
}

// anchorProblem is a Wait decision when the anchor cannot be used, or nil.
func anchorProblem(s *State) *workflow.Decision {
	if !s.Anchor.Usable() {
		d := workflow.Waiting("TrustAnchorUnavailable", s.Anchor.Problem("trust anchor Secret"))
		return &d
	}
	// The verdict changes when the anchor becomes valid, and when it expires.
	s.RecheckAt(s.Anchor.Cert.NotBefore)
	s.RecheckAt(s.Anchor.Cert.NotAfter.Add(time.Second))
	if err := CheckAnchor(s.Anchor.Cert, s.Now); err != nil {
		d := workflow.Waiting("TrustAnchorInvalid", fmt.Sprintf("trust anchor Secret %s: %v", s.Anchor.Ref(), err))
		return &d
	}
	return nil
}

// --- bootstrap -------------------------------------------------------------------------------

// bootstrapPrevious chooses the certificate to create linkerd-previous-anchor from when it is
// missing: the anchor the existing bundle trusts besides the current one, so that an anchor
// renewed while the operator was away (or a deleted previous-anchor) is never dropped; or the
// current anchor on a fresh install. ok is false when the bundle is ambiguous.
func bootstrapPrevious(s *State) (cert *x509.Certificate, ok bool) {
	skip := map[string]bool{s.Anchor.Fingerprint(): true}
	for _, a := range s.InFlight {
		skip[Fingerprint(a)] = true // kept in the bundle in their own right
	}
	var others []*x509.Certificate
	for _, c := range s.Bundle.Certs {
		if !skip[Fingerprint(c)] {
			others = append(others, c)
		}
	}
	switch len(others) {
	case 0:
		return s.Anchor.Cert, true
	case 1:
		return others[0], true
	}
	return nil, false
}

func observeBootstrap(s *State, _ string) workflow.Decision {
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if !s.Previous.Found {
		if _, ok := bootstrapPrevious(s); !ok {
			return workflow.Waiting("AmbiguousTrustBundle", fmt.Sprintf(
				"Secret %s is missing and ConfigMap %s/%s trusts %d anchors besides the current one; recreate %s with the anchor to keep",
				s.Previous.Ref(), s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, len(s.Bundle.Certs)-1, s.Previous.Ref()))
		}
		return workflow.ActNeeded("PreviousAnchorMissing", fmt.Sprintf("Secret %s is missing", s.Previous.Ref()))
	}
	if !s.Previous.Usable() {
		return workflow.Waiting("PreviousAnchorInvalid", s.Previous.Problem("previous-anchor Secret")+"; fix or delete it")
	}
	if !s.Bundle.Found {
		return workflow.ActNeeded("TrustRootsMissing", fmt.Sprintf("ConfigMap %s/%s is missing", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	return workflow.Completed("Bootstrapped", "previous anchor and trust bundle exist")
}

func actBootstrap(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		if !s.Previous.Found {
			prev, ok := bootstrapPrevious(s)
			if !ok {
				return fmt.Errorf("cannot choose a previous anchor from ConfigMap %s", s.Config.TrustRootsConfigMap)
			}
			// The bundle is created on the next pass, from the previous anchor just written.
			return w.WritePreviousAnchor(ctx, prev)
		}
		return w.WriteTrustRoots(ctx, s.DesiredBundle())
	}
}

func describeBootstrap(s *State) []string {
	var out []string
	if !s.Previous.Found {
		if prev, ok := bootstrapPrevious(s); ok {
			out = append(out, fmt.Sprintf("create Secret %s with certificate %s (no key)", s.Previous.Ref(), Fingerprint(prev)))
		}
	}
	if !s.Bundle.Found && s.Anchor.Usable() {
		out = append(out, fmt.Sprintf("create ConfigMap %s/%s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	return out
}

// --- trust bundle -----------------------------------------------------------------------------

func observeDetect(s *State, _ string) workflow.Decision {
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if d := previousProblem(s); d != nil {
		return *d
	}
	if s.Rotating() {
		return workflow.Completed("TrustAnchorRenewed", fmt.Sprintf("trust anchor %s differs from the previous anchor %s", ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint())))
	}
	if s.RenewedInPlace() {
		return workflow.ActNeeded("TrustAnchorRenewedSameKey", fmt.Sprintf(
			"trust anchor %s was renewed with the key and subject of %s (rotationPolicy Never): no rotation needed; updating Secret %s and ConfigMap %s/%s in place",
			ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint()), s.Previous.Ref(), s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	if s.Bundle.Data != s.DesiredBundle() {
		if lost := droppedSigner(s); lost != nil {
			return workflow.Waiting("TrustBundleDriftKept", fmt.Sprintf(
				"ConfigMap %s/%s was edited by hand and trusts anchor %s, which signs the identity issuer in Secret %s; restoring the rendered bundle would drop it: renew the issuer from %s, or restore the ConfigMap",
				s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, ShortFingerprint(Fingerprint(lost)), s.Issuer.Ref(), s.Anchor.Ref()))
		}
		if d := KeptAnchorProblem(s, s.DesiredBundle()); d != nil {
			return *d
		}
		return workflow.ActNeeded("TrustBundleDrifted", fmt.Sprintf("ConfigMap %s/%s does not hold the rendered trust bundle (changed by %s)",
			s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, describeWriters(s.Bundle)))
	}
	// Synced: nothing to wait for, so no blocking message.
	return workflow.Waiting("TrustAnchorUnchanged", "")
}

// previousProblem is a Wait decision when the previous-anchor Secret is missing or unusable
// outside bootstrap, or nil. Writing the bundle then would drop the previous anchor; the
// operator recreates the Secret from the bundle (RecreatePrevious) before the steps run.
func previousProblem(s *State) *workflow.Decision {
	if s.Previous.Usable() {
		return nil
	}
	d := workflow.Waiting("PreviousAnchorUnavailable", s.Previous.Problem("previous-anchor Secret")+
		"; the trust bundle is left as it is until it is recreated from the bundle")
	return &d
}

// droppedSigner returns the anchor of the current bundle that signs the identity issuer when
// the desired bundle does not hold it (a hand edit added it), or nil.
func droppedSigner(s *State) *x509.Certificate {
	if !s.Issuer.Usable() || SignedBy(s.Issuer.Cert, s.Anchor.Cert) || s.Rotating() && s.signedByKept(s.Issuer.Cert) {
		return nil
	}
	for _, c := range s.Bundle.Certs {
		if SignedBy(s.Issuer.Cert, c) {
			return c
		}
	}
	return nil
}

func actDetect(w Writer) func(context.Context, *State, string) error {
	write := actWriteDesiredBundle(w)
	return func(ctx context.Context, s *State, token string) error {
		if s.RenewedInPlace() {
			// The previous anchor first: the bundle then renders from the renewed anchor alone.
			if err := w.WritePreviousAnchor(ctx, s.Anchor.Cert); err != nil {
				return err
			}
		}
		return write(ctx, s, token)
	}
}

func observeBundleWritten(s *State, _ string) workflow.Decision {
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if d := previousProblem(s); d != nil {
		return *d
	}
	if s.Bundle.Data != s.DesiredBundle() {
		if d := KeptAnchorProblem(s, s.DesiredBundle()); d != nil {
			return *d
		}
		return workflow.ActNeeded("TrustBundleOutdated", fmt.Sprintf("ConfigMap %s/%s does not hold the desired bundle yet", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	return workflow.Completed("TrustBundleWritten", fmt.Sprintf("ConfigMap %s/%s holds %s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, describeAnchors(s)))
}

func actWriteDesiredBundle(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		bundle := s.DesiredBundle()
		if bundle == "" {
			return fmt.Errorf("refusing to write an empty trust bundle to ConfigMap %s/%s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
		}
		if d := KeptAnchorProblem(s, bundle); d != nil {
			return fmt.Errorf("%s", d.Message)
		}
		return w.WriteTrustRoots(ctx, bundle)
	}
}

func describeBundleWrite(s *State) []string {
	return []string{fmt.Sprintf("write ConfigMap %s/%s: %s -> %s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap,
		fingerprints(s.Bundle.Certs), describeAnchors(s))}
}

func describeAnchors(s *State) string {
	if a := s.FinishingOn(); a != nil {
		return fmt.Sprintf("[%s] (the trust anchor was renewed again, to %s: the next rotation adds it)", ShortFingerprint(Fingerprint(a)), ShortFingerprint(s.Anchor.Fingerprint()))
	}
	if !s.Rotating() {
		return fmt.Sprintf("[%s]", ShortFingerprint(s.Anchor.Fingerprint()))
	}
	inFlight := ""
	for _, a := range s.InFlight {
		inFlight += fmt.Sprintf(", %s (in flight)", ShortFingerprint(Fingerprint(a)))
	}
	return fmt.Sprintf("[%s (new)%s, %s (previous)]", ShortFingerprint(s.Anchor.Fingerprint()), inFlight, ShortFingerprint(s.Previous.Fingerprint()))
}

func fingerprints(certs []*x509.Certificate) string {
	var fps []string
	for _, c := range certs {
		fps = append(fps, ShortFingerprint(Fingerprint(c)))
	}
	return "[" + strings.Join(fps, ", ") + "]"
}

func observePropagated(which string) func(*State, string) workflow.Decision {
	return func(s *State, _ string) workflow.Decision {
		c := s.TrustBundle
		if c.Done() {
			return workflow.Completed("TrustBundleConverged", fmt.Sprintf("%d of %d meshed pod(s) run with the %s trust bundle", c.Converged, c.Target, which))
		}
		msg := fmt.Sprintf("Waiting for %d pod(s) to converge on the %s trust bundle", c.Target-c.Converged, which)
		if len(c.Behind) > 0 {
			msg += "; restart: " + c.describeBehind(5)
		}
		return workflow.Waiting("TrustBundleConverging", msg)
	}
}

// --- issuer and certificates -------------------------------------------------------------------

func observeIssuerOnNewAnchor(s *State, _ string) workflow.Decision {
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if !s.Issuer.Usable() {
		return workflow.Waiting("IssuerUnavailable", s.Issuer.Problem("identity issuer Secret"))
	}
	if s.IssuerOnCurrentAnchor() {
		return workflow.Completed("IssuerRenewed", fmt.Sprintf("identity issuer %s is signed by the new trust anchor", ShortFingerprint(s.Issuer.Fingerprint())))
	}
	if s.Previous.Usable() && !s.signedByKept(s.Issuer.Cert) {
		return workflow.Waiting("IssuerUnrelated", fmt.Sprintf(
			"identity issuer in Secret %s is signed by neither the new trust anchor %s nor the previous one %s; renew it from the ClusterIssuer backed by %s",
			s.Issuer.Ref(), ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Previous.Fingerprint()), s.Anchor.Ref()))
	}
	return workflow.Waiting(ReasonWaitingForIssuerRenewal, fmt.Sprintf(
		"Waiting for the identity issuer to be renewed onto the new trust anchor: cmctl renew -n %s %s",
		s.Issuer.Namespace, s.Issuer.Name))
}

func observeCertificatesRenewed(s *State, _ string) workflow.Decision {
	if !s.IssuerOnCurrentAnchor() {
		// cert-manager renewed the anchor again, or the issuer went back: not safe to go on.
		return workflow.Waiting(ReasonIssuerNotOnCurrentAnchor, fmt.Sprintf("identity issuer in Secret %s is not signed by the current trust anchor %s", s.Issuer.Ref(), ShortFingerprint(s.Anchor.Fingerprint())))
	}
	c := s.Certificates
	if c.Done() {
		return workflow.Completed("WorkloadCertificatesRenewed", fmt.Sprintf("%d of %d meshed pod(s) present certificates that chain to the new trust anchor %s",
			c.Converged, c.Target, ShortFingerprint(s.Anchor.Fingerprint())))
	}
	msg := certificatesBehind(s)
	if len(c.Behind) > 0 {
		msg += "; restart or wait for: " + c.describeBehind(5)
	}
	if len(c.Pods) > 0 {
		p := c.Pods[0]
		msg += fmt.Sprintf("; e.g. pod %s/%s: %s", p.Namespace, p.Name, p.Reason)
	}
	return workflow.Waiting("WorkloadCertificatesRenewing", msg)
}

// certificatesBehind says how many pods the certificate convergence waits for, and on what.
// Any issuer the new anchor signs will do: a renewal of the issuer during the step (cert-manager's
// own schedule) leaves the pods on the previous one converged.
func certificatesBehind(s *State) string {
	c := s.Certificates
	return fmt.Sprintf("Waiting for %d pod(s) to present a certificate that chains to the new trust anchor %s (identity issuer now %s)",
		c.Target-c.Converged, ShortFingerprint(s.Anchor.Fingerprint()), ShortFingerprint(s.Issuer.Fingerprint()))
}

// --- previous anchor ---------------------------------------------------------------------------

func observeRetired(s *State, _ string) workflow.Decision {
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if s.Previous.Fingerprint() == s.Anchor.Fingerprint() {
		return workflow.Completed("PreviousAnchorRetired", fmt.Sprintf("Secret %s holds the current anchor %s", s.Previous.Ref(), ShortFingerprint(s.Anchor.Fingerprint())))
	}
	if a := s.FinishingOn(); a != nil {
		// Retired, then the anchor was renewed again: writing the newer anchor now would drop
		// the one every live certificate chains to from the reduced bundle.
		return workflow.Completed("PreviousAnchorRetired", fmt.Sprintf("Secret %s holds the anchor %s this rotation moved to (the trust anchor was renewed again since, to %s: the next rotation starts once this one is done)",
			s.Previous.Ref(), ShortFingerprint(Fingerprint(a)), ShortFingerprint(s.Anchor.Fingerprint())))
	}
	return workflow.ActNeeded("PreviousAnchorOutdated", fmt.Sprintf("Secret %s still holds the old anchor %s", s.Previous.Ref(), ShortFingerprint(s.Previous.Fingerprint())))
}

func actRetire(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error { return w.WritePreviousAnchor(ctx, s.Anchor.Cert) }
}

func describeRetire(s *State) []string {
	return []string{fmt.Sprintf("write Secret %s: certificate %s -> %s (no key)", s.Previous.Ref(), ShortFingerprint(s.Previous.Fingerprint()), ShortFingerprint(s.Anchor.Fingerprint()))}
}

// --- control-plane restarts --------------------------------------------------------------------

// A restart set picks control-plane Deployments from the config, in restart order.
type restartSet func(Config) []string

func identityOnly(c Config) []string { return []string{c.IdentityDeployment} }
func destinationAndInjector(c Config) []string {
	return []string{c.DestinationDeploy, c.ProxyInjectorDeploy}
}
func wholeControlPlane(c Config) []string { return c.ControlPlane() }

// observeRestart is done when every Deployment of the set carries this pass's token in its
// restartedAt annotation and is rolled out. The token tells this pass's restart from any older
// one, so an operator restarted mid-step never restarts the control plane twice.
func observeRestart(set restartSet) func(*State, string) workflow.Decision {
	return func(s *State, token string) workflow.Decision {
		names := set(s.Config)
		for _, n := range names {
			if d, ok := s.ControlPlane[n]; !ok || !d.Found {
				return workflow.Waiting("ControlPlaneMissing", fmt.Sprintf("Deployment %s/%s not found", s.Config.LinkerdNamespace, n))
			}
		}
		var pending []string
		for _, n := range names {
			if token == "" || s.ControlPlane[n].RestartedAt != token {
				pending = append(pending, n)
			}
		}
		if len(pending) > 0 {
			return workflow.ActNeeded("RestartNeeded", "restart Deployment(s) "+strings.Join(pending, ", "))
		}
		for _, n := range names {
			if d := s.ControlPlane[n]; !d.RolledOut {
				return workflow.Waiting("ControlPlaneRollingOut", fmt.Sprintf("Waiting for the rollout of Deployment %s/%s: %s", d.Namespace, d.Name, d.Progress))
			}
		}
		return workflow.Completed("ControlPlaneRestarted", "restarted and rolled out: "+strings.Join(names, ", "))
	}
}

func actRestart(w Writer, set restartSet) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, token string) error {
		for _, n := range set(s.Config) {
			if s.ControlPlane[n].RestartedAt == token {
				continue
			}
			if err := w.RestartDeployment(ctx, s.Config.LinkerdNamespace, n, token); err != nil {
				return err
			}
		}
		return nil
	}
}

func describeRestart(set restartSet) func(*State) []string {
	return func(s *State) []string {
		var out []string
		for _, n := range set(s.Config) {
			out = append(out, fmt.Sprintf("restart Deployment %s/%s", s.Config.LinkerdNamespace, n))
		}
		return out
	}
}
