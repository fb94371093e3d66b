package observe

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/predicate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// PKIReader reads the certificates of the Linkerd PKI for the CLI's read-only commands from
// objects that hold no private key, so that no key crosses the wire and a user who may not read
// Secrets can run them:
//
//   - the trust anchor and the identity issuer from their cert-manager Certificate's current
//     CertificateRequest: the one the Certificate controls whose cert-manager.io/certificate-revision
//     annotation equals the Certificate's status.revision, found as cert-manager's own controllers
//     find it (internal/controller/certificates/policies DataForCertificate). Its
//     status.certificate is what cert-manager wrote into the Secret's tls.crt;
//   - the previous anchor from the trust bundle: the certificate whose fingerprint the
//     TrustAnchorRotation's status.previousAnchorFingerprint names (the operator keeps it in the
//     bundle for as long as it differs from the anchor).
//
// Only where none of these holds the certificate (a Secret cert-manager adopted without issuing,
// a CertificateRequest deleted, no TrustAnchorRotation yet) is the Secret read; a Forbidden
// answer then makes a Source that is not usable, whose Err says why (see Forbidden), rather than
// an error. The operator, which writes the previous anchor and needs the Secrets anyway, reads
// them through its informers.
type PKIReader struct {
	Kube        kube.Interface
	CertManager kube.CertManager
	Config      steps.Config
}

// Anchor reads the trust anchor (Certificate Config.AnchorCertificate, Secret Config.AnchorSecret,
// in the cert-manager namespace).
func (r PKIReader) Anchor(ctx context.Context) (steps.Source, error) {
	c := r.Config
	return r.issued(ctx, c.CertManagerNamespace, c.AnchorCertificate, c.AnchorSecret)
}

// Issuer reads the identity issuer (Certificate Config.IssuerCertificate, Secret
// Config.IssuerSecret, in the Linkerd namespace).
func (r PKIReader) Issuer(ctx context.Context) (steps.Source, error) {
	c := r.Config
	return r.issued(ctx, c.LinkerdNamespace, c.IssuerCertificate, c.IssuerSecret)
}

// Previous reads the previous anchor: the certificate of bundle that status (nil when there is
// no TrustAnchorRotation) names, else the previous-anchor Secret, which holds no key either.
func (r PKIReader) Previous(ctx context.Context, bundle steps.Bundle, status *v1alpha1.TrustAnchorRotationStatus) (steps.Source, error) {
	ns, name := r.Config.LinkerdNamespace, r.Config.PreviousAnchorSecret
	why := "there is no TrustAnchorRotation status naming the previous anchor"
	if status != nil && status.PreviousAnchorFingerprint != "" {
		fp := status.PreviousAnchorFingerprint
		for _, c := range bundle.Certs {
			if steps.Fingerprint(c) == fp {
				return steps.Source{Namespace: ns, Name: name, Found: true, Cert: c}, nil
			}
		}
		why = fmt.Sprintf("the trust bundle %s/%s does not hold the previous anchor %.12s the TrustAnchorRotation names",
			r.Config.LinkerdNamespace, r.Config.TrustRootsConfigMap, fp)
	}
	return r.secret(ctx, ns, name, why)
}

// issued reads the certificate cert-manager issued for Certificate certName into Secret
// secretName, from the Certificate's current CertificateRequest, or else from the Secret.
func (r PKIReader) issued(ctx context.Context, ns, certName, secretName string) (steps.Source, error) {
	src, why, err := r.fromRequest(ctx, ns, certName, secretName)
	if err != nil || why == "" {
		return src, err
	}
	return r.secret(ctx, ns, secretName, why)
}

// fromRequest returns the Source read from the current CertificateRequest, or why there is none
// to read it from.
func (r PKIReader) fromRequest(ctx context.Context, ns, certName, secretName string) (steps.Source, string, error) {
	src := steps.Source{Namespace: ns, Name: secretName}
	ref := ns + "/" + certName
	crt, err := r.CertManager.CertmanagerV1().Certificates(ns).Get(ctx, certName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return src, fmt.Sprintf("there is no Certificate %s", ref), nil
	case apierrors.IsForbidden(err):
		return src, fmt.Sprintf("reading Certificate %s is forbidden", ref), nil
	case err != nil:
		return src, "", fmt.Errorf("reading Certificate %s: %w", ref, err)
	}
	if crt.Spec.SecretName != secretName {
		return src, fmt.Sprintf("Certificate %s writes Secret %s, not %s", ref, crt.Spec.SecretName, secretName), nil
	}
	if crt.Status.Revision == nil {
		return src, fmt.Sprintf("Certificate %s has issued no CertificateRequest (status.revision is not set)", ref), nil
	}
	rev := *crt.Status.Revision
	current := predicate.Funcs[*cmapi.CertificateRequest]{
		predicate.ResourceOwnedBy[*cmapi.CertificateRequest](crt),
		predicate.CertificateRequestRevision(rev),
	}
	var found []*cmapi.CertificateRequest
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := r.CertManager.CertmanagerV1().CertificateRequests(ns).List(ctx, opts)
		if apierrors.IsForbidden(err) {
			return src, fmt.Sprintf("listing the CertificateRequests in namespace %s is forbidden", ns), nil
		}
		if err != nil {
			return src, "", fmt.Errorf("listing the CertificateRequests of Certificate %s: %w", ref, err)
		}
		for i := range list.Items {
			if current.Evaluate(&list.Items[i]) {
				found = append(found, &list.Items[i])
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	switch {
	case len(found) == 0:
		return src, fmt.Sprintf("no CertificateRequest of Certificate %s has its revision %d", ref, rev), nil
	case len(found) > 1:
		return src, fmt.Sprintf("%d CertificateRequests of Certificate %s have its revision %d", len(found), ref, rev), nil
	}
	req := found[0]
	reqRef := fmt.Sprintf("CertificateRequest %s/%s", req.Namespace, req.Name)
	if len(req.Status.Certificate) == 0 {
		return src, reqRef + " holds no certificate", nil
	}
	src.Found = true
	certs, err := steps.ParseCertificates(req.Status.Certificate)
	if err != nil {
		src.Err = fmt.Errorf("%s status.certificate: %w", reqRef, err)
		return src, "", nil
	}
	// cert-manager copies the validity of the Secret's certificate into the Certificate's
	// status: when it does not describe this request's certificate, the Secret holds another
	// (an issuance is under way, or the Secret was written outside cert-manager).
	if na := crt.Status.NotAfter; na != nil && na.Unix() != certs[0].NotAfter.Unix() {
		return steps.Source{Namespace: ns, Name: secretName},
			fmt.Sprintf("Certificate %s status.notAfter %s does not describe the certificate of %s", ref, na.UTC().Format(time.RFC3339), reqRef), nil
	}
	src.Cert, src.Chain = certs[0], certs[1:]
	return src, "", nil
}

// SecretKey reads the certificate of a Secret's key: the issuer Linkerd's chart renders
// (crt.pem), which no cert-manager object holds.
func (r PKIReader) SecretKey(ctx context.Context, ns, name, key string) (steps.Source, error) {
	return r.secretKey(ctx, ns, name, key, "Linkerd's chart renders the identity issuer into the Secret alone")
}

// secret reads a Secret's certificate because of why (nothing else holds it). A missing Secret
// is a Source that is not Found; a forbidden one a Source whose Err says so (see Forbidden).
func (r PKIReader) secret(ctx context.Context, ns, name, why string) (steps.Source, error) {
	return r.secretKey(ctx, ns, name, steps.CertificateKey, why)
}

func (r PKIReader) secretKey(ctx context.Context, ns, name, key, why string) (steps.Source, error) {
	sec, err := r.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return SourceFromSecretKey(ns, name, nil, key), nil
	case apierrors.IsForbidden(err):
		return steps.Source{Namespace: ns, Name: name, Found: true,
			Err: fmt.Errorf("%s, and reading the Secret is forbidden: %w", why, err)}, nil
	case err != nil:
		return steps.Source{}, fmt.Errorf("reading Secret %s/%s (%s): %w", ns, name, why, err)
	}
	return SourceFromSecretKey(ns, name, sec, key), nil
}

// Forbidden reports whether a Source is unknown because reading its Secret was forbidden: a
// read-only command reports it as a warning, not a failure.
func Forbidden(s steps.Source) bool { return s.Err != nil && apierrors.IsForbidden(s.Err) }
