package cli

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// crossSignedManifest is where the cert-manager setup of spec.strategy CrossSigned ships.
const crossSignedManifest = "manifests/cert-manager/linkerd-pki-cross-signed.yaml"

// strategyPrerequisites checks what spec.strategy CrossSigned needs of cert-manager: the trust
// anchor's Certificate issued by a CA issuer over the anchor's own Secret, so that each renewal
// is signed by the anchor it replaces, with a new key; and, in a cross-signed rotation whose
// restart is left to churn, that every bridge the anchor's and the identity issuer's Secrets
// carry — the anchor so issued, and the older ones cert-manager keeps in its chain — outlives
// status.restartDeadline (steps.BridgeExpiryProblem). The standard strategy needs nothing more
// than the other checks ask.
func (c *checks) strategyPrerequisites(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	if cp := tar.Status.Checkpoint; cp != nil && cp.Rotation != "" && tar.Status.RestartDeadline != nil {
		anchor, err := c.usableAnchor(ctx)
		if err != nil {
			return err
		}
		s := &steps.State{Spec: tar.Spec, Now: c.now, Anchor: anchor}
		if err := s.FromStatus(steps.Facts(), &tar.Status); err != nil {
			return fmt.Errorf("TrustAnchorRotation %s: %w", tar.Name, err)
		}
		// The identity issuer's chain carries the older bridges; the previous anchor says which
		// of them the pods not restarted yet verify through. Either unreadable, the check is
		// made on what the anchor's Secret carries.
		if iss, err := c.issuer.get(ctx); err == nil && iss.Usable() {
			s.Issuer = iss
		}
		if bundle, err := c.bundle.get(ctx); err == nil {
			if prev, err := c.cl.pkiReader(c.cfg).Previous(ctx, bundle, &tar.Status); err == nil && prev.Usable() {
				s.Previous = prev
			}
		}
		if p := steps.BridgeExpiryProblem(s, tar.Status.RestartDeadline); p != "" {
			return fmt.Errorf("TrustAnchorRotation %s: %s", tar.Name, p)
		}
	}
	if steps.StrategyOf(tar.Spec) != v1alpha1.StrategyCrossSigned {
		return nil
	}
	crt, err := c.certificate(ctx, c.cfg.CertManagerNamespace, c.o.anchorCertificate)
	if err != nil {
		return err
	}
	ref := crt.Namespace + "/" + crt.Name
	if crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == cmapi.RotationPolicyNever {
		return fmt.Errorf("TrustAnchorRotation %s has spec.strategy CrossSigned but Certificate %s has spec.privateKey.rotationPolicy: Never: its renewals keep the key and rotate nothing; set rotationPolicy: Always (%s)",
			tar.Name, ref, crossSignedManifest)
	}
	kind, name := orDefault(crt.Spec.IssuerRef.Kind, cmapi.IssuerKind), crt.Spec.IssuerRef.Name
	ca, err := caIssuerOf(ctx, c.cl, crt.Namespace, crt.Spec.IssuerRef)
	if err != nil {
		return err
	}
	if ca == nil && kind != cmapi.ClusterIssuerKind && kind != cmapi.IssuerKind {
		return fmt.Errorf("TrustAnchorRotation %s has spec.strategy CrossSigned but Certificate %s is issued by %s %s, which is not a cert-manager CA issuer (%s)",
			tar.Name, ref, kind, name, crossSignedManifest)
	}
	if ca == nil || ca.SecretName != crt.Spec.SecretName {
		what := "is not a CA issuer"
		if ca != nil {
			what = fmt.Sprintf("signs with Secret %s", ca.SecretName)
		}
		return fmt.Errorf("TrustAnchorRotation %s has spec.strategy CrossSigned but Certificate %s is issued by %s %s, which %s, not with the anchor's own Secret %s: "+
			"its renewals would not be signed by the anchor they replace, and the operator would start no rotation; point spec.issuerRef at the CA issuer over %s (%s)",
			tar.Name, ref, kind, name, what, crt.Spec.SecretName, crt.Spec.SecretName, crossSignedManifest)
	}
	return nil
}

// caIssuerOf returns the CA configuration of the cert-manager issuer a Certificate in namespace ns
// names (an Issuer is read there, a ClusterIssuer cluster-wide); nil for an issuer of another
// type, or of a kind cert-manager does not ship.
func caIssuerOf(ctx context.Context, cl *Clients, ns string, ref cmmeta.IssuerReference) (*cmapi.CAIssuer, error) {
	switch orDefault(ref.Kind, cmapi.IssuerKind) {
	case cmapi.ClusterIssuerKind:
		iss, err := cl.CertManager.CertmanagerV1().ClusterIssuers().Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, notFound("ClusterIssuer", ref.Name, err)
		}
		return iss.Spec.CA, nil
	case cmapi.IssuerKind:
		iss, err := cl.CertManager.CertmanagerV1().Issuers(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, notFound("Issuer", ns+"/"+ref.Name, err)
		}
		return iss.Spec.CA, nil
	}
	return nil, nil
}

// strategyLine explains the cross-signed strategy where the rotation stands: the standard one is
// the default and needs no line.
func strategyLine(in *inspection) string {
	const how = "the new anchor, signed by the previous one, is in the identity issuer's chain and leads pods that trust only the previous anchor to the new issuer; " +
		"the trust bundle keeps the previous anchor until every proxy refreshed onto the new issuer by itself, then holds the new anchor alone, and the data plane restarts once, onto it"
	if in.Phase == string(v1alpha1.PhaseSynced) {
		return "CrossSigned (spec.strategy, for the next rotation): " + how
	}
	return "CrossSigned (this rotation's, status.checkpoint.strategy): " + how
}

// restartDeadlineLine is inspect's line on status.restartDeadline.
func restartDeadlineLine(d *v1alpha1.RestartDeadline, now time.Time) string {
	when := d.Deadline.UTC().Format(time.RFC3339)
	if now.After(d.Deadline.Time) {
		return fmt.Sprintf("%s, passed %s ago: restart the workloads whose pods are listed below (the restart was left to natural churn for spec.naturalChurnPeriod %s)",
			when, age(now.Sub(d.Deadline.Time)), steps.CompactDuration(d.ChurnPeriod.Duration))
	}
	return fmt.Sprintf("%s (in %s): until then the one restart onto the new anchor is left to natural churn (spec.naturalChurnPeriod %s)",
		when, age(d.Deadline.Sub(now)), steps.CompactDuration(d.ChurnPeriod.Duration))
}
