// The checks of category linkerd-trust-pki, the second half of the prerequisites (check --pre):
// the cert-manager objects of the Linkerd PKI, the trust anchor and identity issuer they hold,
// and the trust bundle holding the anchor.

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
)

// readyProblem says why a cert-manager Ready condition is not True for the object's generation.
func readyProblem(kind, ref string, generation int64, status cmmeta.ConditionStatus, observed int64, reason, message string, found bool) error {
	switch {
	case !found:
		return fmt.Errorf("%s %s has no Ready condition yet: is the cert-manager controller running?", kind, ref)
	case status != cmmeta.ConditionTrue:
		return fmt.Errorf("%s %s is not Ready: %s: %s", kind, ref, reason, message)
	case observed != 0 && observed < generation:
		return fmt.Errorf("%s %s: cert-manager has not observed generation %d yet", kind, ref, generation)
	}
	return nil
}

func notFound(kind, ref string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s not found", kind, ref)
	}
	return fmt.Errorf("reading %s %s: %w", kind, ref, err)
}

func issuerReady(kind, ref string, generation int64, conds []cmapi.IssuerCondition) error {
	for _, cond := range conds {
		if cond.Type == cmapi.IssuerConditionReady {
			return readyProblem(kind, ref, generation, cond.Status, cond.ObservedGeneration, cond.Reason, cond.Message, true)
		}
	}
	return readyProblem(kind, ref, generation, "", 0, "", "", false)
}

func (c *checks) rootIssuerReady(ctx context.Context) error {
	ns := c.cfg.CertManagerNamespace
	ref := ns + "/" + c.o.rootIssuer
	iss, err := c.cl.CertManager.CertmanagerV1().Issuers(ns).Get(ctx, c.o.rootIssuer, metav1.GetOptions{})
	if err != nil {
		return notFound("Issuer", ref, err)
	}
	return issuerReady("Issuer", ref, iss.Generation, iss.Status.Conditions)
}

func (c *checks) identityClusterIssuerReady(ctx context.Context) error {
	iss, err := c.cl.CertManager.CertmanagerV1().ClusterIssuers().Get(ctx, c.o.identityClusterIssuer, metav1.GetOptions{})
	if err != nil {
		return notFound("ClusterIssuer", c.o.identityClusterIssuer, err)
	}
	if iss.Spec.CA == nil {
		return fmt.Errorf("ClusterIssuer %s is not a CA issuer (spec.ca is not set)", iss.Name)
	}
	if iss.Spec.CA.SecretName != c.cfg.AnchorSecret {
		return fmt.Errorf("ClusterIssuer %s signs with Secret %s, not the trust anchor %s/%s",
			iss.Name, iss.Spec.CA.SecretName, c.cfg.CertManagerNamespace, c.cfg.AnchorSecret)
	}
	return issuerReady("ClusterIssuer", iss.Name, iss.Generation, iss.Status.Conditions)
}

func (c *checks) certificate(ctx context.Context, ns, name string) (*cmapi.Certificate, error) {
	crt, err := c.cl.CertManager.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, notFound("Certificate", ns+"/"+name, err)
	}
	return crt, nil
}

func certificateReady(crt *cmapi.Certificate) error {
	ref := crt.Namespace + "/" + crt.Name
	for _, cond := range crt.Status.Conditions {
		if cond.Type == cmapi.CertificateConditionReady {
			return readyProblem("Certificate", ref, crt.Generation, cond.Status, cond.ObservedGeneration, cond.Reason, cond.Message, true)
		}
	}
	return readyProblem("Certificate", ref, crt.Generation, "", 0, "", "", false)
}

func (c *checks) anchorCertificateReady(ctx context.Context) error {
	crt, err := c.certificate(ctx, c.cfg.CertManagerNamespace, c.o.anchorCertificate)
	if err != nil {
		return err
	}
	if !crt.Spec.IsCA {
		return fmt.Errorf("Certificate %s/%s does not set spec.isCA: true, so it cannot sign the identity issuer", crt.Namespace, crt.Name)
	}
	if crt.Spec.SecretName != c.cfg.AnchorSecret {
		return fmt.Errorf("Certificate %s/%s writes Secret %s, not %s (set --trust-anchor-secret)", crt.Namespace, crt.Name, crt.Spec.SecretName, c.cfg.AnchorSecret)
	}
	return certificateReady(crt)
}

func (c *checks) identityIssuerReady(ctx context.Context) error {
	crt, err := c.certificate(ctx, c.cfg.LinkerdNamespace, c.o.identityIssuerCert)
	if err != nil {
		return err
	}
	if crt.Spec.IssuerRef.Name != c.o.identityClusterIssuer || crt.Spec.IssuerRef.Kind != cmapi.ClusterIssuerKind {
		return fmt.Errorf("Certificate %s/%s is issued by %s %s, not ClusterIssuer %s",
			crt.Namespace, crt.Name, orDefault(crt.Spec.IssuerRef.Kind, cmapi.IssuerKind), crt.Spec.IssuerRef.Name, c.o.identityClusterIssuer)
	}
	if crt.Spec.SecretName != c.cfg.IssuerSecret {
		return fmt.Errorf("Certificate %s/%s writes Secret %s, not %s (set --identity-issuer-secret)", crt.Namespace, crt.Name, crt.Spec.SecretName, c.cfg.IssuerSecret)
	}
	return certificateReady(crt)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// usableAnchor returns the anchor, or an error naming the Secret and what is wrong with it.
func (c *checks) usableAnchor(ctx context.Context) (steps.Source, error) {
	a, err := c.anchor.get(ctx)
	if err != nil {
		return a, err
	}
	if !a.Usable() {
		return a, unusable(a, "trust-anchor Secret")
	}
	return a, nil
}

// unusable is the failure of a check that needs an unusable source: a warning when the user may
// not read its Secret and nothing else holds its certificate, an error otherwise.
func unusable(s steps.Source, kind string) error {
	err := errors.New(s.Problem(kind))
	if observe.Forbidden(s) {
		return warn(err)
	}
	return err
}

func (c *checks) anchorIsCA(ctx context.Context) error {
	a, err := c.usableAnchor(ctx)
	if err != nil {
		return err
	}
	if err := steps.CheckAnchor(a.Cert, c.now); err != nil {
		return fmt.Errorf("trust-anchor Secret %s: %w", a.Ref(), err)
	}
	return nil
}

func (c *checks) anchorRotationPolicy(ctx context.Context) error {
	crt, err := c.certificate(ctx, c.cfg.CertManagerNamespace, c.o.anchorCertificate)
	if err != nil {
		return err
	}
	if crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == cmapi.RotationPolicyNever {
		return fmt.Errorf("Certificate %s/%s has spec.privateKey.rotationPolicy: Never: a renewal keeps the old key, so it extends the anchor instead of rotating it; set rotationPolicy: Always",
			crt.Namespace, crt.Name)
	}
	return nil
}

func (c *checks) anchorExpiry(ctx context.Context) error {
	a, err := c.usableAnchor(ctx)
	if err != nil {
		return err
	}
	left := a.Cert.NotAfter.Sub(c.now)
	when := a.Cert.NotAfter.UTC().Format(time.RFC3339)
	switch {
	case left <= 0:
		return fmt.Errorf("trust anchor in Secret %s expired at %s", a.Ref(), when)
	case c.o.failWithin > 0 && left < time.Duration(c.o.failWithin):
		return fmt.Errorf("trust anchor in Secret %s expires at %s, in %s (less than --fail-within %s): rotate it now", a.Ref(), when, age(left), &c.o.failWithin)
	case left < time.Duration(c.o.expiryWarning):
		return warnf("trust anchor in Secret %s expires at %s, in %s (less than --expiry-warning %s): rotate it soon", a.Ref(), when, age(left), &c.o.expiryWarning)
	}
	return c.bridgesExpiry(a, "the trust anchor's chain")
}

// bridgesExpiry checks the certificates a Secret's tls.crt holds after its certificate: the
// bridges a cross-signed trust anchor carries to the anchors before it, which cert-manager's
// CA issuer appends to every identity issuer it signs, and Linkerd identity to every
// workload certificate (service.go Certify). A proxy that reaches its trust anchor only
// through a bridge rejects the chain once the bridge expired (rustls-webpki checks every
// presented intermediate's validity), and identity caps every certificate it issues at the
// earliest expiry of that chain (pkg/tls/ca.go findFirstExpiration).
func (c *checks) bridgesExpiry(s steps.Source, what string) error {
	for i, b := range s.Chain {
		left := b.NotAfter.Sub(c.now)
		desc := fmt.Sprintf("certificate %d of %s in Secret %s, %s", i+2, what, s.Ref(), describeAnchor(b, c.now))
		switch {
		case left <= 0:
			return fmt.Errorf("%s: proxies that reach their trust anchor only through it reject the chain", desc)
		case left < time.Duration(c.o.expiryWarning):
			return warnf("%s (less than --expiry-warning %s): identity issues no certificate past it; finish the rotation that needs it, or renew the identity issuer without it", desc, &c.o.expiryWarning)
		}
	}
	return nil
}

func (c *checks) issuerValidity(ctx context.Context) error {
	iss, err := c.issuer.get(ctx)
	if err != nil {
		return err
	}
	if !iss.Usable() {
		return unusable(iss, "identity-issuer Secret")
	}
	if c.now.After(iss.Cert.NotAfter) {
		return fmt.Errorf("identity issuer in Secret %s expired at %s", iss.Ref(), iss.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if c.now.Before(iss.Cert.NotBefore) {
		return fmt.Errorf("identity issuer in Secret %s is not valid before %s", iss.Ref(), iss.Cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if !iss.Cert.IsCA {
		return fmt.Errorf("identity issuer in Secret %s is not a CA certificate: it cannot sign workload certificates", iss.Ref())
	}
	if err := c.bridgesExpiry(iss, "the chain identity serves"); err != nil {
		return err
	}
	crt, err := c.cl.CertManager.CertmanagerV1().Certificates(c.cfg.LinkerdNamespace).Get(ctx, c.o.identityIssuerCert, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // the Certificate's own check reports it
	}
	if err != nil {
		return notFound("Certificate", c.cfg.LinkerdNamespace+"/"+c.o.identityIssuerCert, err)
	}
	if rt := crt.Status.RenewalTime; rt != nil && c.now.Sub(rt.Time) > c.o.issuerRenewalTolerance {
		return warnf("cert-manager should have renewed Certificate %s/%s at %s (%s ago); it expires at %s",
			crt.Namespace, crt.Name, rt.UTC().Format(time.RFC3339), age(c.now.Sub(rt.Time)), iss.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func (c *checks) issuerChains(ctx context.Context) error {
	iss, err := c.issuer.get(ctx)
	if err != nil {
		return err
	}
	if !iss.Usable() {
		return unusable(iss, "identity-issuer Secret")
	}
	b, err := c.bundle.get(ctx)
	if err != nil {
		return err
	}
	if !b.Found && c.o.pre {
		// Before the operator is installed: it will write the bundle from the trust anchor
		// alone (bundleHasAnchor), so that is the anchor the issuer must chain to.
		a, err := c.usableAnchor(ctx)
		if err != nil {
			return err
		}
		if !steps.SignedBy(iss.Cert, a.Cert) {
			return fmt.Errorf("identity issuer %s in Secret %s is not signed by the trust anchor %s of Secret %s: the bundle the operator writes would not verify its certificates",
				steps.ShortFingerprint(steps.Fingerprint(iss.Cert)), iss.Ref(), steps.ShortFingerprint(a.Fingerprint()), a.Ref())
		}
		return nil
	}
	if !b.Found {
		return fmt.Errorf("ConfigMap %s/%s not found", c.cfg.LinkerdNamespace, c.cfg.TrustRootsConfigMap)
	}
	for _, root := range b.Certs {
		if steps.SignedBy(iss.Cert, root) {
			return nil
		}
	}
	return fmt.Errorf("identity issuer %s in Secret %s is signed by none of the %d anchor(s) in ConfigMap %s/%s: proxies would reject its certificates",
		steps.ShortFingerprint(steps.Fingerprint(iss.Cert)), iss.Ref(), len(b.Certs), c.cfg.LinkerdNamespace, c.cfg.TrustRootsConfigMap)
}

func (c *checks) bundleHasAnchor(ctx context.Context) error {
	a, err := c.usableAnchor(ctx)
	if err != nil {
		// Without cert-manager's anchor, say what the mesh trusts instead, if anything.
		if b, berr := c.bundle.get(ctx); berr == nil {
			if note := c.handMadeNote(ctx, b, nil); note != "" {
				var w warningError
				if errors.As(err, &w) {
					return warnf("%v; %s", w.err, note)
				}
				return fmt.Errorf("%w; %s", err, note)
			}
		}
		return err
	}
	b, err := c.bundle.get(ctx)
	if err != nil {
		return err
	}
	ref := c.cfg.LinkerdNamespace + "/" + c.cfg.TrustRootsConfigMap
	if !b.Found && c.o.pre {
		// The operator creates the bundle when it first starts, from the trust anchor, before
		// Linkerd needs it (Linkerd's identity does not start without it): the order a GitOps
		// install syncs in. Not a failure of the prerequisites, but worth saying.
		return warnf("ConfigMap %s not found: the operator creates it from the trust anchor %s when it starts; to have it before, run `%s`",
			ref, steps.ShortFingerprint(a.Fingerprint()), ApplyBundleCommand)
	}
	if !b.Found {
		return fmt.Errorf("ConfigMap %s not found: create it with `%s`", ref, ApplyBundleCommand)
	}
	if len(b.Certs) == 0 {
		return fmt.Errorf("ConfigMap %s: key %s holds no PEM certificate", ref, steps.TrustRootsKey)
	}
	fp := a.Fingerprint()
	for _, root := range b.Certs {
		if steps.Fingerprint(root) == fp {
			return nil
		}
	}
	err = fmt.Errorf("ConfigMap %s does not contain the trust anchor %s of Secret %s (it holds %s)", ref, steps.ShortFingerprint(fp), a.Ref(), shortFingerprints(b))
	if note := c.handMadeNote(ctx, b, a.Cert); note != "" {
		err = fmt.Errorf("%w; %s", err, note)
	}
	return err
}

func shortFingerprints(b steps.Bundle) string {
	fps := make([]string, len(b.Certs))
	for i, c := range b.Certs {
		fps[i] = steps.ShortFingerprint(steps.Fingerprint(c))
	}
	return strings.Join(fps, ", ")
}
