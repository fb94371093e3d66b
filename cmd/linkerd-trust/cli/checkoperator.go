// The checks of category linkerd-trust-operator, the rotation itself: the TrustAnchorRotation
// CRD and object, the operator's Deployment and leader Lease, a rotation waiting too long, and
// who owns the trust bundle. The deadline and strategy checks are in deadline.go and strategy.go.

package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/cmd/internal/version"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func (c *checks) rotationCRD(ctx context.Context) error {
	missing, err := c.missingResources(ctx, v1alpha1.SchemeGroupVersion.String(), v1alpha1.Resource)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("the API does not serve %s %s: install the trust-rotation-operator-crds chart (CustomResourceDefinition %s.%s)",
			v1alpha1.SchemeGroupVersion, v1alpha1.Resource, v1alpha1.Resource, v1alpha1.GroupName)
	}
	return nil
}

// notInstalled reports whether the API serves no TrustAnchorRotation: the operator's CRD, and so
// any TrustAnchorRotation, is not installed. An API that cannot be asked is not taken for one
// without the extension: the checks then say what fails.
func (c *checks) notInstalled(ctx context.Context) bool {
	missing, err := c.missingResources(ctx, v1alpha1.SchemeGroupVersion.String(), v1alpha1.Resource)
	return err == nil && len(missing) > 0
}

func (c *checks) rotationExists(ctx context.Context) error {
	_, err := c.rotation.get(ctx)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("TrustAnchorRotation %s not found: the operator chart creates it, and the operator creates it at start-up", c.o.kube.RotationName)
	}
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	return nil
}

// rotationSpecValid fails on what the operator cannot use in the spec (steps.SpecErrors): a field
// that does not decode, an unknown time zone. It judges the spec itself, as the operator does,
// so it fails before the operator has reported it, or without one running.
func (c *checks) rotationSpecValid(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	if errs := steps.SpecErrors(tar); len(errs) > 0 {
		return fmt.Errorf("TrustAnchorRotation %s: %s; the operator acts on nothing until it is fixed (kubectl edit tar %s)",
			tar.Name, steps.SpecErrorsMessage(errs), tar.Name)
	}
	return nil
}

func (c *checks) operatorAvailable(ctx context.Context) error {
	ns, name := c.o.operatorNamespace, c.o.operatorDeployment
	d, err := c.cl.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return notFound("Deployment", ns+"/"+name, err)
	}
	if ok, why := deploymentAvailable(d); !ok {
		return fmt.Errorf("Deployment %s/%s is not available: %s", ns, name, why)
	}
	return nil
}

// clientVersion is this CLI's version; tests replace it.
var clientVersion = version.String

// devBuild reports whether v is the version of a binary built from a checkout, not a release
// (version.String: "dev", "dev-<revision>", or "unknown").
func devBuild(v string) bool { return strings.HasPrefix(v, "dev") || v == "unknown" }

// operatorVersionMatches warns, as linkerd check does of its control plane, when the operator's
// version (its Deployment's app.kubernetes.io/version) is not the CLI's: the CLI reads the
// operator's status and runs the same steps, so a CLI of another version may plan or judge
// differently. A CLI built from a checkout has no release to compare with, and passes.
func (c *checks) operatorVersionMatches(ctx context.Context) error {
	ns, name := c.o.operatorNamespace, c.o.operatorDeployment
	d, err := c.cl.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return notFound("Deployment", ns+"/"+name, err)
	}
	operator, client := d.Labels[versionLabel], clientVersion()
	switch {
	case devBuild(client):
		return nil // built from a checkout: no release to compare with
	case operator == "":
		return fmt.Errorf("Deployment %s/%s has no %s label: its version is unknown", ns, name, versionLabel)
	case operator != client:
		return fmt.Errorf("the operator (Deployment %s/%s) is %s, this CLI %s: install the CLI of the operator's version", ns, name, operator, client)
	}
	return nil
}

func (c *checks) operatorLeaseFresh(ctx context.Context) error {
	ns, name := c.o.operatorNamespace, c.o.operatorLease
	l, err := c.cl.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return notFound("Lease", ns+"/"+name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return fmt.Errorf("Lease %s/%s has no holder: no operator replica leads", ns, name)
	}
	if l.Spec.RenewTime == nil {
		return fmt.Errorf("Lease %s/%s held by %s was never renewed", ns, name, *l.Spec.HolderIdentity)
	}
	if since := c.now.Sub(l.Spec.RenewTime.Time); since > c.o.leaseStaleAfter {
		return fmt.Errorf("Lease %s/%s held by %s was last renewed %s ago (more than --lease-stale-after %s): the leader is stuck or gone",
			ns, name, *l.Spec.HolderIdentity, age(since), c.o.leaseStaleAfter)
	}
	return nil
}

func (c *checks) rotationNotBlocked(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	st := tar.Status
	if st.BlockingMessage == "" || st.LastPhaseTransitionTime == nil {
		return nil
	}
	since := c.now.Sub(st.LastPhaseTransitionTime.Time)
	if since <= time.Duration(c.o.blockedWarning) {
		return nil
	}
	return fmt.Errorf("TrustAnchorRotation %s has been in phase %s for %s (more than --blocked-warning %s): %s",
		tar.Name, orDefault(string(st.Phase), string(v1alpha1.PhaseSynced)), age(since), &c.o.blockedWarning, st.BlockingMessage)
}

// identityIssuerCurrent fails while condition IdentityIssuerStale is True: identity signs, between
// rotations, with an issuer the Secret no longer holds (the operator reads it from the
// certificates it probes, which a single run of the CLI cannot tell apart from a reload still
// due).
func (c *checks) identityIssuerCurrent(ctx context.Context) error {
	return c.conditionFalse(ctx, v1alpha1.ConditionIdentityIssuerStale)
}

// workloadCertificatesRenewed fails while condition WorkloadCertificatesExpiring is True: pods
// present a certificate their proxies did not renew, read by the operator's probes, which re-read
// each pod once its proxy should have renewed (a single run of the CLI reads each pod once, and
// cannot tell a proxy that missed its renewal from one about to make it).
func (c *checks) workloadCertificatesRenewed(ctx context.Context) error {
	return c.conditionFalse(ctx, v1alpha1.ConditionWorkloadCertificatesExpiring)
}

// conditionFalse fails with the condition's message while the TrustAnchorRotation holds it True.
func (c *checks) conditionFalse(ctx context.Context, typ string) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	cond := meta.FindStatusCondition(tar.Status.Conditions, typ)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return nil
	}
	return fmt.Errorf("TrustAnchorRotation %s: %s", tar.Name, cond.Message)
}

// bundleOwnedByOperator warns when a field manager other than the operator owns the bundle's
// ca-bundle.crt (managedFields): a Helm release, an Argo CD application or trust-manager that
// writes it again — an upgrade, a self-heal — reverts the bundle under a rotation.
func (c *checks) bundleOwnedByOperator(ctx context.Context) error {
	b, err := c.bundle.get(ctx)
	if err != nil {
		return err
	}
	if !b.Found {
		return nil // bundleHasAnchor says so
	}
	others := b.OtherOwners()
	if len(others) == 0 {
		return nil
	}
	names := make([]string, len(others))
	for i, o := range others {
		names[i] = o.String()
	}
	return fmt.Errorf("ConfigMap %s/%s: key %s is also owned by field manager(s) %s: a later write of theirs (a Helm upgrade, an Argo CD sync or self-heal, trust-manager) reverts the trust bundle, mid-rotation too; stop them writing it, then hand it to %q with 'linkerd trust bundle --adopt'",
		c.cfg.LinkerdNamespace, c.cfg.TrustRootsConfigMap, steps.TrustRootsKey, strings.Join(names, ", "), steps.FieldManager)
}
