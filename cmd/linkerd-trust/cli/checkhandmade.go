package cli

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TakeoverDoc is where a mesh on Linkerd's own certificates is sent: moving it onto
// cert-manager's PKI is a rotation of its own, the takeover.
const TakeoverDoc = "https://github.com/linkerd/trust-rotation/blob/main/docs/adopting.md#from-linkerds-own-certificates"

// handMadeNote says, when the trust bundle holds anchors other than cert-manager's (anchor, nil
// when it cannot be read) and Linkerd's chart wrote it or identity reads its issuer in Linkerd's
// own layout — the signs of a mesh installed with certificates made by hand, which the operator
// cannot adopt — what those anchors are, who writes the ConfigMap and what issuer identity
// serves. It returns "" otherwise.
func (c *checks) handMadeNote(ctx context.Context, b steps.Bundle, anchor *x509.Certificate) string {
	// Linkerd's chart renders the ConfigMap (field manager helm) and, by default, the issuer in
	// its own layout: either says anchors were handed to the chart. Without either sign the
	// note is not made, and nothing more is read.
	owners := b.OtherOwners()
	scheme := c.identityScheme(ctx)
	handMade := scheme == steps.SchemeLinkerd
	names := make([]string, len(owners))
	for i, o := range owners {
		names[i] = o.Manager
		handMade = handMade || o.Manager == "helm"
	}
	if !handMade {
		return ""
	}
	// cert-manager's own anchors: the current one, and the previous one a rotation keeps.
	known := map[string]bool{}
	if anchor != nil {
		known[steps.Fingerprint(anchor)] = true
	}
	var status *v1alpha1.TrustAnchorRotationStatus
	if tar, err := c.rotation.get(ctx); err == nil && tar != nil {
		status = &tar.Status
	}
	if prev, err := c.cl.pkiReader(c.cfg).Previous(ctx, b, status); err == nil && prev.Usable() {
		known[steps.Fingerprint(prev.Cert)] = true
	}
	var others []string
	for _, cert := range b.Certs {
		if !known[steps.Fingerprint(cert)] {
			others = append(others, describeAnchor(cert, c.now))
		}
	}
	if len(others) == 0 {
		return ""
	}
	var note strings.Builder
	what := "anchors cert-manager does not issue"
	if anchor == nil {
		what = "anchors"
	}
	fmt.Fprintf(&note, "the mesh trusts %s: %s", what, strings.Join(others, "; "))
	if len(names) > 0 {
		fmt.Fprintf(&note, ", written by %s", strings.Join(names, ", "))
	}
	if scheme != "" {
		fmt.Fprintf(&note, "; identity runs with %s%s", steps.IdentitySchemeArg, scheme)
		if scheme == steps.SchemeLinkerd {
			note.WriteString(" (its issuer is the crt.pem Linkerd's chart renders, not cert-manager's")
			if issuer := c.chartIssuer(ctx); issuer != nil {
				fmt.Fprintf(&note, ": %s", describeAnchor(issuer, c.now))
			}
			note.WriteString(")")
		}
	}
	fmt.Fprintf(&note, ". They look like Linkerd's own certificates, handed to its chart: moving such a mesh onto cert-manager's is a takeover, not an adoption: %s takeover (%s)", binary, TakeoverDoc)
	return note.String()
}

// describeAnchor names a certificate as a user finds it again: its subject, fingerprint, whether
// it signed itself, and when it expires.
func describeAnchor(cert *x509.Certificate, now time.Time) string {
	kind := "signed by " + cert.Issuer.CommonName
	if steps.SignedBy(cert, cert) {
		kind = "self-signed"
	}
	left := cert.NotAfter.Sub(now)
	expiry := fmt.Sprintf("expires %s, in %s", cert.NotAfter.UTC().Format(time.DateOnly), age(left))
	if left <= 0 {
		expiry = fmt.Sprintf("EXPIRED %s, %s ago", cert.NotAfter.UTC().Format(time.DateOnly), age(-left))
	}
	return fmt.Sprintf("CN=%s (%s, %s, %s)", cert.Subject.CommonName, steps.ShortFingerprint(steps.Fingerprint(cert)), kind, expiry)
}

// identityScheme returns the issuer scheme Linkerd's identity Deployment runs with, "" when it
// cannot be read (no Deployment, or no right to list it: the chart's preflight hook may list
// Deployments in the Linkerd namespace).
func (c *checks) identityScheme(ctx context.Context) string {
	list, err := c.cl.Kube.AppsV1().Deployments(c.cfg.LinkerdNamespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + c.cfg.IdentityDeployment})
	if err != nil {
		return ""
	}
	for _, d := range list.Items {
		if d.Name != c.cfg.IdentityDeployment {
			continue
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			for _, a := range ctr.Args {
				if s, ok := strings.CutPrefix(a, steps.IdentitySchemeArg); ok {
					return s
				}
			}
		}
	}
	return ""
}

// chartIssuer is the identity issuer Linkerd's chart rendered (crt.pem of the issuer Secret,
// scheme linkerd.io/tls), nil when it cannot be read. Only its certificate is parsed; the key
// the Secret holds beside it is neither used nor shown.
func (c *checks) chartIssuer(ctx context.Context) *x509.Certificate {
	sec, err := c.cl.Kube.CoreV1().Secrets(c.cfg.LinkerdNamespace).Get(ctx, c.cfg.IssuerSecret, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	certs, err := steps.ParseCertificates(sec.Data[steps.ChartIssuerKey])
	if err != nil || len(certs) == 0 {
		return nil
	}
	return certs[0]
}
