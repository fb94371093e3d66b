package pki

import (
	"context"
	"crypto/x509"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// SecretCertificates returns the certificates in tls.crt of the Secret namespace/name (leaf
// first).
func (p *PKI) SecretCertificates(ctx context.Context, namespace, name string) ([]*x509.Certificate, error) {
	s, err := p.kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", namespace, name, err)
	}
	certs, err := steps.ParseCertificates(s.Data["tls.crt"])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: tls.crt: %w", namespace, name, err)
	}
	return certs, nil
}

// Anchor returns the current trust anchor: tls.crt of the anchor Secret.
func (p *PKI) Anchor(ctx context.Context) (*x509.Certificate, error) {
	certs, err := p.SecretCertificates(ctx, p.CertManagerNamespace, p.TrustAnchor)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// Issuer returns the current identity issuer certificate: tls.crt of the issuer Secret.
func (p *PKI) Issuer(ctx context.Context) (*x509.Certificate, error) {
	certs, err := p.SecretCertificates(ctx, p.LinkerdNamespace, p.IdentityIssuer)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// RenewAnchor renews the trust anchor like `cmctl renew -n cert-manager linkerd-trust-anchor`
// and waits for the new anchor, which it returns. The identity issuer is not re-issued by this:
// it keeps chaining to the old anchor until it is renewed itself.
func (p *PKI) RenewAnchor(ctx context.Context) (*x509.Certificate, error) {
	return p.renew(ctx, p.CertManagerNamespace, p.TrustAnchor)
}

// RenewIssuer renews the identity issuer like `cmctl renew -n linkerd linkerd-identity-issuer`
// and waits for the new issuer certificate, which it returns; it is signed by the current anchor.
func (p *PKI) RenewIssuer(ctx context.Context) (*x509.Certificate, error) {
	return p.renew(ctx, p.LinkerdNamespace, p.IdentityIssuer)
}

func (p *PKI) renew(ctx context.Context, namespace, name string) (*x509.Certificate, error) {
	certs, err := p.SecretCertificates(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	if err := Renew(ctx, p.cm, namespace, name); err != nil {
		return nil, err
	}
	if _, err := WaitRenewed(ctx, p.kube, p.cm, namespace, name, steps.Fingerprint(certs[0]), p.Timeout); err != nil {
		return nil, err
	}
	certs, err = p.SecretCertificates(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}
