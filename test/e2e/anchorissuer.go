package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// AnchorManifest is the shipped cert-manager manifest whose trust anchor Certificate a strategy
// needs: the self-signed anchor of linkerd-pki.yaml for Standard, the anchor the CA issuer signs
// over its own Secret for CrossSigned (docs/cross-signed-rotation.md).
func AnchorManifest(strategy v1alpha1.RotationStrategy) string {
	name := "linkerd-pki.yaml"
	if strategy == v1alpha1.StrategyCrossSigned {
		name = "linkerd-pki-cross-signed.yaml"
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "manifests", "cert-manager", name)
}

// RenewForStrategy starts a rotation that runs with the strategy, as a user of the guide would:
// spec.strategy is set first (a rotation records it when it starts), then, when the trust
// anchor's Certificate is already issued as the strategy needs, the anchor is renewed (cmctl
// renew); otherwise its Certificate is applied from the strategy's manifest, which re-issues
// the anchor at once (a changed issuerRef). It returns the new anchor.
func (e *Env) RenewForStrategy(strategy v1alpha1.RotationStrategy) *x509.Certificate {
	e.T.Helper()
	if err := e.PatchSpec(e.Ctx, fmt.Sprintf(`{"spec":{"strategy":%q}}`, strategy)); err != nil {
		e.T.Fatal(err)
	}
	want := anchorCertificateOf(e, AnchorManifest(strategy))
	crt, err := e.Cluster.CertManager().CertmanagerV1().Certificates(want.Namespace).Get(e.Ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	if sameIssuer(crt, want) {
		return e.Renew(want.Namespace, want.Name)
	}
	old := e.SecretCert(want.Namespace, want.Name)
	e.ApplyAnchorCertificate(AnchorManifest(strategy))
	return e.WaitAnchorRenewed(old)
}

// AnchorIssuedFor reports the strategy the trust anchor's Certificate is issued for today:
// CrossSigned when it names the CA issuer of linkerd-pki-cross-signed.yaml, Standard otherwise.
func (e *Env) AnchorIssuedFor() v1alpha1.RotationStrategy {
	e.T.Helper()
	want := anchorCertificateOf(e, AnchorManifest(v1alpha1.StrategyCrossSigned))
	crt, err := e.Cluster.CertManager().CertmanagerV1().Certificates(want.Namespace).Get(e.Ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	if sameIssuer(crt, want) {
		return v1alpha1.StrategyCrossSigned
	}
	return v1alpha1.StrategyStandard
}

func sameIssuer(a, b *cmapi.Certificate) bool {
	return a.Spec.IssuerRef.Name == b.Spec.IssuerRef.Name && a.Spec.IssuerRef.Kind == b.Spec.IssuerRef.Kind
}

// ApplyAnchorCertificate applies the trust anchor's Certificate of a shipped manifest, as
// `kubectl apply` does: a changed spec.issuerRef makes cert-manager re-issue the anchor (its
// Secret's issuer annotations no longer match).
func (e *Env) ApplyAnchorCertificate(path string) {
	t, ctx := e.T, e.Ctx
	t.Helper()
	want := anchorCertificateOf(e, path)
	certs := e.Cluster.CertManager().CertmanagerV1().Certificates(want.Namespace)
	crt, err := certs.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crt.Spec = want.Spec
	if _, err := certs.Update(ctx, crt, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// anchorCertificateOf reads the trust anchor's Certificate from a shipped manifest.
func anchorCertificateOf(e *Env, path string) *cmapi.Certificate {
	e.T.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.T.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var crt cmapi.Certificate
		if err := yaml.Unmarshal([]byte(doc), &crt); err == nil && crt.Kind == "Certificate" && crt.Name == pki.DefaultTrustAnchor {
			return &crt
		}
	}
	e.T.Fatalf("%s has no Certificate %s", path, pki.DefaultTrustAnchor)
	return nil
}

// WaitAnchorRenewed waits for cert-manager to replace the trust anchor and returns the new one.
func (e *Env) WaitAnchorRenewed(old *x509.Certificate) *x509.Certificate {
	e.T.Helper()
	if _, err := pki.WaitRenewed(e.Ctx, e.Cluster.Kube(), e.Cluster.CertManager(), "cert-manager", pki.DefaultTrustAnchor, steps.Fingerprint(old), 2*time.Minute); err != nil {
		e.T.Fatal(err)
	}
	return e.SecretCert("cert-manager", pki.DefaultTrustAnchor)
}

// PatchSpec merge-patches the TrustAnchorRotation, as kubectl patch --type=merge does.
func (e *Env) PatchSpec(ctx context.Context, patch string) error {
	dyn, err := dynamic.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	gvr := v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource)
	_, err = dyn.Resource(gvr).Patch(ctx, steps.DefaultRotationName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patching TrustAnchorRotation %s with %s: %w", steps.DefaultRotationName, patch, err)
	}
	return nil
}
