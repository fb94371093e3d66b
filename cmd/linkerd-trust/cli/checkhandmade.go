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
// cert-manager's PKI is a rotation of its own.
const TakeoverDoc = "https://github.com/linkerd/trust-rotation/blob/main/docs/design/takeover.md"

// identitySchemeArg is the argument of Linkerd's identity container that names the layout of
// its issuer Secret (controller/cmd/identity/main.go): linkerd.io/tls reads crt.pem and key.pem,
// which Linkerd's chart renders from identity.issuer.tls; kubernetes.io/tls reads cert-manager's
// tls.crt and tls.key.
const identitySchemeArg = "-identity-scheme="

// handMadeNote says, when the trust bundle holds anchors other than cert-manager's (anchor, nil
// when it cannot be read), what they are and who writes the ConfigMap, and whether identity
// reads its issuer from Linkerd's own layout: the signs of a mesh installed with certificates
// made by hand, which the operator cannot adopt. It returns "" when every anchor is
// cert-manager's. It reads no Secret.
func (c *checks) handMadeNote(ctx context.Context, b steps.Bundle, anchor *x509.Certificate) string {
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
		if known[steps.Fingerprint(cert)] {
			continue
		}
		others = append(others, describeAnchor(cert, c.now))
	}
	if len(others) == 0 {
		return ""
	}
	// Linkerd's chart renders the ConfigMap (field manager helm) and, by default, the issuer in
	// its own layout: either says the anchors were handed to the chart, not made by cert-manager.
	owners := b.OtherOwners()
	scheme := c.identityScheme(ctx)
	handMade := scheme == "linkerd.io/tls"
	names := make([]string, len(owners))
	for i, o := range owners {
		names[i] = o.Manager
		handMade = handMade || o.Manager == "helm"
	}
	if anchor == nil && !handMade {
		return "" // nothing to compare with, and no sign of Linkerd's own certificates
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
		fmt.Fprintf(&note, "; identity runs with %s%s", identitySchemeArg, scheme)
		if scheme == "linkerd.io/tls" {
			note.WriteString(" (its issuer is the crt.pem Linkerd's chart renders, not cert-manager's)")
		}
	}
	if handMade {
		fmt.Fprintf(&note, ". They look like Linkerd's own certificates, handed to its chart: moving such a mesh onto cert-manager's is a takeover, not an adoption (%s)", TakeoverDoc)
	}
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
				if s, ok := strings.CutPrefix(a, identitySchemeArg); ok {
					return s
				}
			}
		}
	}
	return ""
}
