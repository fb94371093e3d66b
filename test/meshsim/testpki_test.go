package meshsim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
)

// testPKI installs the Linkerd PKI of manifests/cert-manager/linkerd-pki.yaml through the real cert-manager. It is a
// stand-in until test/cluster ships its PKI helpers; it follows the same contract (names, isCA,
// ECDSA, rotationPolicy Always, cmctl-style renew).
type testPKI struct {
	kube kubernetes.Interface
	cm   cmclient.Interface
}

func installPKI(t *testing.T, ctx context.Context, kube kubernetes.Interface, cm cmclient.Interface) *testPKI {
	t.Helper()
	p := &testPKI{kube: kube, cm: cm}
	for _, ns := range []string{"cert-manager", "linkerd"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := cm.CertmanagerV1().Issuers("cert-manager").Create(ctx, &cmv1.Issuer{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-trust-root-issuer", Namespace: "cert-manager"},
		Spec:       cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{SelfSigned: &cmv1.SelfSignedIssuer{}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cm.CertmanagerV1().Certificates("cert-manager").Create(ctx, &cmv1.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-trust-anchor", Namespace: "cert-manager"},
		Spec: cmv1.CertificateSpec{
			IsCA: true, CommonName: "root.linkerd.cluster.local", SecretName: "linkerd-trust-anchor",
			Duration:   &metav1.Duration{Duration: 8760 * time.Hour},
			PrivateKey: &cmv1.CertificatePrivateKey{Algorithm: cmv1.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: cmv1.RotationPolicyAlways},
			IssuerRef:  cmmeta.IssuerReference{Name: "linkerd-trust-root-issuer", Kind: "Issuer", Group: "cert-manager.io"},
			Usages:     []cmv1.KeyUsage{cmv1.UsageCertSign, cmv1.UsageCRLSign},
		},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cm.CertmanagerV1().ClusterIssuers().Create(ctx, &cmv1.ClusterIssuer{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-issuer"},
		Spec:       cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{CA: &cmv1.CAIssuer{SecretName: "linkerd-trust-anchor"}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = cm.CertmanagerV1().Certificates("linkerd").Create(ctx, &cmv1.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-issuer", Namespace: "linkerd"},
		Spec: cmv1.CertificateSpec{
			IsCA: true, CommonName: "identity.linkerd.cluster.local", DNSNames: []string{"identity.linkerd.cluster.local"},
			SecretName: "linkerd-identity-issuer", Duration: &metav1.Duration{Duration: 48 * time.Hour},
			PrivateKey: &cmv1.CertificatePrivateKey{Algorithm: cmv1.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: cmv1.RotationPolicyAlways},
			IssuerRef:  cmmeta.IssuerReference{Name: "linkerd-identity-issuer", Kind: "ClusterIssuer", Group: "cert-manager.io"},
			Usages:     []cmv1.KeyUsage{cmv1.UsageCertSign, cmv1.UsageCRLSign, cmv1.UsageServerAuth, cmv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	must(err)
	p.waitSecret(t, ctx, "cert-manager", "linkerd-trust-anchor", nil)
	p.waitSecret(t, ctx, "linkerd", "linkerd-identity-issuer", nil)
	return p
}

// secretCert returns a Secret's tls.crt.
func (p *testPKI) secretCert(t *testing.T, ctx context.Context, ns, name string) []byte {
	t.Helper()
	s, err := p.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data[corev1.TLSCertKey]
}

func (p *testPKI) anchorPEM(t *testing.T, ctx context.Context) string {
	return string(p.secretCert(t, ctx, "cert-manager", "linkerd-trust-anchor"))
}

// waitSecret waits until the Secret holds a certificate different from old.
func (p *testPKI) waitSecret(t *testing.T, ctx context.Context, ns, name string, old []byte) []byte {
	t.Helper()
	var crt []byte
	err := poll.Until(ctx, 2*time.Minute, fmt.Sprintf("secret %s/%s issued", ns, name), func(ctx context.Context) (bool, error) {
		s, err := p.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		crt = s.Data[corev1.TLSCertKey]
		return len(crt) > 0 && len(s.Data[corev1.TLSPrivateKeyKey]) > 0 && string(crt) != string(old), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return crt
}

// renew does what `cmctl renew` does and waits for the new certificate.
func (p *testPKI) renew(t *testing.T, ctx context.Context, ns, name string) []byte {
	t.Helper()
	old := p.secretCert(t, ctx, ns, name)
	crt, err := p.cm.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	crt.Status.Conditions = append(crt.Status.Conditions, cmv1.CertificateCondition{
		Type: cmv1.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered",
		Message: "Certificate re-issuance manually triggered", LastTransitionTime: &now,
	})
	if _, err := p.cm.CertmanagerV1().Certificates(ns).UpdateStatus(ctx, crt, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p.waitSecret(t, ctx, ns, name, old)
}

// setBundle writes linkerd-identity-trust-roots.
func (p *testPKI) setBundle(t *testing.T, ctx context.Context, bundle string) {
	t.Helper()
	api := p.kube.CoreV1().ConfigMaps("linkerd")
	cm, err := api.Get(ctx, meshsim.TrustRootsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: meshsim.TrustRootsConfigMap, Namespace: "linkerd"},
			Data: map[string]string{meshsim.TrustRootsKey: bundle}}, metav1.CreateOptions{})
	} else if err == nil {
		cm.Data = map[string]string{meshsim.TrustRootsKey: bundle}
		_, err = api.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}
