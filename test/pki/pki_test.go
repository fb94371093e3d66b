package pki_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"os"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/pki"
)

func TestMain(m *testing.M) {
	os.Exit(cluster.ForTest(m, cluster.Options{Nodes: 1}))
}

// install installs the PKI on the shared cluster. Install is idempotent, so every test may call
// it; tests renew certificates, so none assumes the exact certificates another test saw.
func install(t *testing.T) (*cluster.Cluster, *pki.PKI) {
	t.Helper()
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	p, err := pki.Install(t.Context(), c.Kube(), c.CertManager(), pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

// TestInstallIssuesLinkerdPKI checks the certificates cert-manager issued: an ECDSA P-256 CA
// anchor named root.linkerd.cluster.local, and an ECDSA P-256 CA identity issuer named
// identity.linkerd.cluster.local that chains to the anchor, in a kubernetes.io/tls Secret.
func TestInstallIssuesLinkerdPKI(t *testing.T) {
	c, p := install(t)
	ctx := t.Context()
	anchor, err := p.Anchor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := p.Issuer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkCA(t, anchor, "root.linkerd.cluster.local")
	checkCA(t, issuer, "identity.linkerd.cluster.local")
	if !bytes.Equal(anchor.RawSubject, anchor.RawIssuer) {
		t.Errorf("anchor is not self-signed: issuer %s", anchor.Issuer)
	}
	checkChains(t, issuer, anchor)

	secret, err := c.Kube().CoreV1().Secrets("linkerd").Get(ctx, "linkerd-identity-issuer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != "kubernetes.io/tls" || len(secret.Data["tls.key"]) == 0 {
		t.Errorf("identity issuer secret: type %q, %d bytes of tls.key", secret.Type, len(secret.Data["tls.key"]))
	}
	if lifetime := issuer.NotAfter.Sub(issuer.NotBefore); lifetime != 48*time.Hour {
		t.Errorf("identity issuer lifetime %s, want the default 48h", lifetime)
	}

	// The objects are the ones manifests/cert-manager/linkerd-pki.yaml makes, with the documented settings.
	crt, err := c.CertManager().CertmanagerV1().Certificates("cert-manager").Get(ctx, "linkerd-trust-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crt.Spec.PrivateKey.RotationPolicy != "Always" || crt.Spec.IssuerRef.Name != "linkerd-trust-root-issuer" {
		t.Errorf("anchor certificate spec: %+v", crt.Spec)
	}
	ci, err := c.CertManager().CertmanagerV1().ClusterIssuers().Get(ctx, "linkerd-identity-issuer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ci.Spec.CA == nil || ci.Spec.CA.SecretName != "linkerd-trust-anchor" {
		t.Errorf("ClusterIssuer spec: %+v", ci.Spec)
	}
}

// TestRenewAnchorMakesNewRoot checks that Renew (as cmctl renew) on the anchor makes cert-manager
// issue a genuinely new root: new certificate, new key (rotationPolicy Always); and that Renew
// leaves the condition cmctl leaves.
func TestRenewAnchorMakesNewRoot(t *testing.T) {
	_, p := install(t)
	ctx := t.Context()
	old, err := p.Anchor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := p.RenewAnchor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if steps.Fingerprint(renewed) == steps.Fingerprint(old) {
		t.Fatal("the anchor certificate did not change")
	}
	if renewed.PublicKey.(*ecdsa.PublicKey).Equal(old.PublicKey) {
		t.Error("the renewed anchor has the old key; rotationPolicy Always must make a new one")
	}
	checkCA(t, renewed, "root.linkerd.cluster.local")
}

// TestRenewConditionMatchesCmctl checks the status Renew writes before cert-manager acts on it.
func TestRenewConditionMatchesCmctl(t *testing.T) {
	c, p := install(t)
	ctx := t.Context()
	certs := c.CertManager().CertmanagerV1().Certificates(p.LinkerdNamespace)
	before, err := certs.Get(ctx, p.IdentityIssuer, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := p.Issuer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Watch from the Certificate's current version so the Issuing condition is seen even if
	// cert-manager clears it quickly.
	w, err := certs.Watch(ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + p.IdentityIssuer,
		ResourceVersion: before.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := pki.Renew(ctx, c.CertManager(), p.LinkerdNamespace, p.IdentityIssuer); err != nil {
		t.Fatal(err)
	}
	found := false
	for ev := range w.ResultChan() {
		obj, ok := ev.Object.(*cmapi.Certificate)
		if !ok {
			continue
		}
		for _, cond := range obj.Status.Conditions {
			if cond.Type == cmapi.CertificateConditionIssuing && cond.Status == cmmeta.ConditionTrue {
				if cond.Reason != "ManuallyTriggered" || cond.Message != "Certificate re-issuance manually triggered" || cond.ObservedGeneration != obj.Generation {
					t.Errorf("Issuing condition %+v, want reason ManuallyTriggered as cmctl sets it", cond)
				}
				found = true
			}
		}
		if found {
			break
		}
	}
	if !found {
		t.Fatal("never observed the Issuing=True condition")
	}
	if _, err := pki.WaitRenewed(ctx, c.Kube(), c.CertManager(), p.LinkerdNamespace, p.IdentityIssuer, steps.Fingerprint(old), time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestRenewIssuerChainsToCurrentAnchor follows the rotation's cert-manager steps: after the
// anchor is renewed, the identity issuer still chains to the old anchor (cert-manager does not
// re-issue it on its own); renewing the issuer makes it chain to the new anchor only.
func TestRenewIssuerChainsToCurrentAnchor(t *testing.T) {
	c, p := install(t)
	ctx := t.Context()
	oldAnchor, err := p.Anchor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newAnchor, err := p.RenewAnchor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := p.Issuer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkChains(t, issuer, oldAnchor)

	issuer, err = p.RenewIssuer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkChains(t, issuer, newAnchor)
	if _, err := issuer.Verify(x509.VerifyOptions{Roots: pool(oldAnchor), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("the renewed issuer still verifies against the old anchor")
	}
	secret, err := c.Kube().CoreV1().Secrets(p.LinkerdNamespace).Get(ctx, p.IdentityIssuer, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caCerts, err := steps.ParseCertificates(secret.Data["ca.crt"])
	if err != nil || !caCerts[0].Equal(newAnchor) {
		t.Errorf("ca.crt of the renewed issuer secret is not the new anchor (%v)", err)
	}
}

func checkCA(t *testing.T, cert *x509.Certificate, cn string) {
	t.Helper()
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("%s: IsCA=%v, key usage %b: not a CA", cn, cert.IsCA, cert.KeyUsage)
	}
	if cert.Subject.CommonName != cn {
		t.Errorf("common name %q, want %q", cert.Subject.CommonName, cn)
	}
	key, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Errorf("%s: key %T, want ECDSA P-256", cn, cert.PublicKey)
	}
}

func checkChains(t *testing.T, cert, root *x509.Certificate) {
	t.Helper()
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool(root), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		t.Errorf("%s does not chain to %s (%s…): %v", cert.Subject.CommonName, root.Subject.CommonName, steps.Fingerprint(root)[:12], err)
	}
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
