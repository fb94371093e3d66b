package observe

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The operator's reading of the cluster into a State. Its informers (their lists, watches,
// transforms and RBAC belong to the operator) hold the objects; a snapshot reads them through
// Caches with the converters Read uses for the CLI's GETs (SourceFromSecret,
// BundleFromConfigMap, DeploymentFrom), counts the trust-bundle convergence on the same
// podindex.Index, and takes the live certificates from the probe.CertTracker.

// Caches are the operator's informer caches of the PKI objects and the control plane, as a
// snapshot reads them: each getter returns the cached object, nil when there is none.
type Caches interface {
	// AnchorSecret is the trust anchor's Secret (Config.CertManagerNamespace/AnchorSecret).
	AnchorSecret() *corev1.Secret
	// PreviousAnchorSecret is Config.LinkerdNamespace/PreviousAnchorSecret.
	PreviousAnchorSecret() *corev1.Secret
	// IssuerSecret is the identity issuer's Secret (Config.LinkerdNamespace/IssuerSecret).
	IssuerSecret() *corev1.Secret
	// TrustRoots is the trust bundle's ConfigMap (Config.LinkerdNamespace/TrustRootsConfigMap).
	TrustRoots() *corev1.ConfigMap
	// ControlPlaneDeployment is the control-plane Deployment Config.LinkerdNamespace/name.
	ControlPlaneDeployment(name string) *appsv1.Deployment
}

// Snapshotter builds the operator's State from its caches, keeping what it parsed of the
// Secrets and the bundle until they change (parsedSources).
type Snapshotter struct {
	Config steps.Config
	// Steps are the rotation's steps, which the checkpoint's step is looked up in.
	Steps  *steps.Ordered
	Caches Caches
	// Index is the pod informer's store; Certs probes the pods it holds.
	Index *podindex.Index
	Certs *probe.CertTracker
	// IssuerReloadTolerance is how long identity may sign with the previous issuer after the
	// issuer Secret changed (steps.DefaultIssuerReloadTolerance when zero).
	IssuerReloadTolerance time.Duration

	// parsed keeps what snapshot parsed of the Secrets and the bundle until they change.
	parsed parsedSources
}

// Snapshot builds the steps' State from the informer caches and the TrustAnchorRotation's
// status, at the checkpoint's step. The spec is in it before the bundle convergence is counted:
// the desired bundle depends on spec.strategy when no rotation is under way yet.
func (c *Snapshotter) Snapshot(now time.Time, step string, tar *v1alpha1.TrustAnchorRotation) (*steps.State, error) {
	status := &tar.Status
	cfg := c.Config
	s := &steps.State{
		Config:       cfg,
		Now:          now,
		Anchor:       c.parsed.anchor.source(cfg.CertManagerNamespace, cfg.AnchorSecret, c.Caches.AnchorSecret()),
		Previous:     c.parsed.previous.source(cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, c.Caches.PreviousAnchorSecret()),
		Issuer:       c.parsed.issuer.source(cfg.LinkerdNamespace, cfg.IssuerSecret, c.Caches.IssuerSecret()),
		ControlPlane: map[string]steps.Deployment{},
		Spec:         tar.Spec,
		SpecErrors:   steps.SpecErrors(tar),
	}
	if err := s.FromStatus(c.Steps, status); err != nil {
		return nil, err
	}
	cm := c.Caches.TrustRoots()
	s.Bundle = c.parsed.bundle.get(cm, func() steps.Bundle { return BundleFromConfigMap(cm) })
	for _, name := range cfg.ControlPlane() {
		s.ControlPlane[name] = DeploymentFrom(cfg.LinkerdNamespace, name, c.Caches.ControlPlaneDeployment(name))
	}
	if key := steps.IssuerKey(s.IdentityScheme()); key != steps.CertificateKey {
		// Identity signs with the issuer Linkerd's chart rendered; cert-manager's is staged.
		s.StagedIssuer = s.Issuer
		s.Issuer = c.parsed.chartIssuer.sourceKey(cfg.LinkerdNamespace, cfg.IssuerSecret, c.Caches.IssuerSecret(), key)
	}
	c.watchIssuer(s, now)
	c.Index.FillControlPlane(s)
	s.TrustBundle = c.Index.TrustBundle(s.BundleHashes()...)
	c.Certs.SetActive(s.CertificateRoot(), steps.UrgentCertificates(c.Steps, s, step))
	s.Certificates = c.Certs.Certificates()
	s.ExpiringLeaves, s.ExpiringLeavesPartial = c.Certs.ExpiringLeaves(), s.Certificates.NotProbed > 0
	s.LoadLiveChainsOnDemand(c.Certs.LiveChains)
	FillDeadline(s, c.Index, c.Certs)
	return s, nil
}

// watchIssuer has the tracker watch for certificates signed by another issuer than the Secret's
// once identity should have reloaded it, and reads those it found (steps.State.StaleIssuer).
func (c *Snapshotter) watchIssuer(s *steps.State, now time.Time) {
	at := s.IssuerObservedAt(now)
	if !s.Issuer.Usable() || at.IsZero() {
		c.Certs.WatchIssuer("", time.Time{})
		return
	}
	tolerance := c.IssuerReloadTolerance
	if tolerance <= 0 {
		tolerance = steps.DefaultIssuerReloadTolerance
	}
	c.Certs.WatchIssuer(s.Issuer.Fingerprint(), at.Add(tolerance))
	s.StaleLeaves = c.Certs.StaleLeaves()
	s.StaleLeavesPartial = !c.Certs.StaleLeavesComplete()
}
