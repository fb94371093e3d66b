// Package pki installs Linkerd's PKI on a test cluster the way users install it with cert-manager
// (manifests/cert-manager/linkerd-pki.yaml, README step 2): a
// self-signed root Issuer, the trust-anchor Certificate it signs, a CA ClusterIssuer over the
// anchor's Secret, and the identity-issuer Certificate that ClusterIssuer signs. The real
// cert-manager controller issues every certificate. Renew triggers a re-issuance exactly like
// `cmctl renew`.
//
// The test cluster runs no cert-manager webhook, so nothing defaults or validates these objects:
// they are written complete.
package pki

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// Default object names, as manifests/cert-manager/linkerd-pki.yaml names them.
const (
	DefaultCertManagerNamespace  = "cert-manager"
	DefaultLinkerdNamespace      = "linkerd"
	DefaultRootIssuer            = "linkerd-trust-root-issuer"
	DefaultTrustAnchor           = "linkerd-trust-anchor"
	DefaultIdentityClusterIssuer = "linkerd-identity-issuer"
	DefaultIdentityIssuer        = "linkerd-identity-issuer"
	DefaultTrustDomain           = "cluster.local"
)

// Options name the PKI objects and set their lifetimes. Zero values take the defaults.
type Options struct {
	CertManagerNamespace string // cert-manager: the root Issuer, the anchor Certificate and Secret
	LinkerdNamespace     string // linkerd: the identity-issuer Certificate and Secret

	RootIssuer            string // self-signed Issuer
	TrustAnchor           string // anchor Certificate and its Secret
	IdentityClusterIssuer string // CA ClusterIssuer over the anchor Secret
	IdentityIssuer        string // identity-issuer Certificate and its Secret
	TrustDomain           string // the anchor is root.linkerd.<domain>, the issuer identity.linkerd.<domain>

	// AnchorDuration and AnchorRenewBefore default to 87600h (10 years) and 8760h: the anchor
	// is only ever rotated on purpose. IssuerDuration and IssuerRenewBefore default to Linkerd's
	// documented 48h and 25h. Tests that want cert-manager itself to renew pass shorter ones.
	AnchorDuration    time.Duration
	AnchorRenewBefore time.Duration
	IssuerDuration    time.Duration
	IssuerRenewBefore time.Duration

	// Timeout bounds each wait for an object to become ready (default 2 minutes).
	Timeout time.Duration

	// CopiedAnchor installs no root Issuer and no anchor Certificate: the anchor Secret is a
	// copy of another cluster's (CopyAnchor), the way linked clusters share one trust anchor.
	// Install expects it to be there already.
	CopiedAnchor bool
}

func (o Options) withDefaults() Options {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&o.CertManagerNamespace, DefaultCertManagerNamespace)
	def(&o.LinkerdNamespace, DefaultLinkerdNamespace)
	def(&o.RootIssuer, DefaultRootIssuer)
	def(&o.TrustAnchor, DefaultTrustAnchor)
	def(&o.IdentityClusterIssuer, DefaultIdentityClusterIssuer)
	def(&o.IdentityIssuer, DefaultIdentityIssuer)
	def(&o.TrustDomain, DefaultTrustDomain)
	defD := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defD(&o.AnchorDuration, 87600*time.Hour)
	defD(&o.AnchorRenewBefore, 8760*time.Hour)
	defD(&o.IssuerDuration, 48*time.Hour)
	defD(&o.IssuerRenewBefore, 25*time.Hour)
	defD(&o.Timeout, 2*time.Minute)
	return o
}

// Objects are the four cert-manager objects of the Linkerd PKI.
type Objects struct {
	RootIssuer            *cmapi.Issuer
	TrustAnchor           *cmapi.Certificate
	IdentityClusterIssuer *cmapi.ClusterIssuer
	IdentityIssuer        *cmapi.Certificate
}

// Manifests returns the PKI objects for opts, complete (every field a webhook would default is
// set), in the order they must be created.
func Manifests(opts Options) Objects {
	o := opts.withDefaults()
	ecdsa := func() *cmapi.CertificatePrivateKey {
		return &cmapi.CertificatePrivateKey{
			Algorithm: cmapi.ECDSAKeyAlgorithm,
			Size:      256,
			Encoding:  cmapi.PKCS1,
			// cert-manager ≥ 1.18's default, spelled out: every renewal makes a new key, so a
			// renewed anchor is a genuinely new root.
			RotationPolicy: cmapi.RotationPolicyAlways,
		}
	}
	return Objects{
		RootIssuer: &cmapi.Issuer{
			TypeMeta:   metav1.TypeMeta{APIVersion: "cert-manager.io/v1", Kind: "Issuer"},
			ObjectMeta: metav1.ObjectMeta{Name: o.RootIssuer, Namespace: o.CertManagerNamespace},
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
		},
		TrustAnchor: &cmapi.Certificate{
			TypeMeta:   metav1.TypeMeta{APIVersion: "cert-manager.io/v1", Kind: "Certificate"},
			ObjectMeta: metav1.ObjectMeta{Name: o.TrustAnchor, Namespace: o.CertManagerNamespace},
			Spec: cmapi.CertificateSpec{
				IsCA:        true,
				CommonName:  "root.linkerd." + o.TrustDomain,
				SecretName:  o.TrustAnchor,
				Duration:    &metav1.Duration{Duration: o.AnchorDuration},
				RenewBefore: &metav1.Duration{Duration: o.AnchorRenewBefore},
				PrivateKey:  ecdsa(),
				Usages:      []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign},
				IssuerRef:   cmmeta.IssuerReference{Name: o.RootIssuer, Kind: cmapi.IssuerKind, Group: "cert-manager.io"},
			},
		},
		IdentityClusterIssuer: &cmapi.ClusterIssuer{
			TypeMeta:   metav1.TypeMeta{APIVersion: "cert-manager.io/v1", Kind: "ClusterIssuer"},
			ObjectMeta: metav1.ObjectMeta{Name: o.IdentityClusterIssuer},
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: o.TrustAnchor}}},
		},
		IdentityIssuer: &cmapi.Certificate{
			TypeMeta:   metav1.TypeMeta{APIVersion: "cert-manager.io/v1", Kind: "Certificate"},
			ObjectMeta: metav1.ObjectMeta{Name: o.IdentityIssuer, Namespace: o.LinkerdNamespace},
			Spec: cmapi.CertificateSpec{
				IsCA:        true,
				CommonName:  "identity.linkerd." + o.TrustDomain,
				DNSNames:    []string{"identity.linkerd." + o.TrustDomain},
				SecretName:  o.IdentityIssuer,
				Duration:    &metav1.Duration{Duration: o.IssuerDuration},
				RenewBefore: &metav1.Duration{Duration: o.IssuerRenewBefore},
				PrivateKey:  ecdsa(),
				Usages:      []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageServerAuth, cmapi.UsageClientAuth},
				IssuerRef:   cmmeta.IssuerReference{Name: o.IdentityClusterIssuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			},
		},
	}
}

// PKI is an installed Linkerd PKI.
type PKI struct {
	Options // with defaults applied
	kube    kubernetes.Interface
	cm      cmclient.Interface
}

// Install creates (or updates to match opts) the namespaces and the four PKI objects, and waits
// until cert-manager has issued both certificates: each Issuer is Ready, each Certificate is
// Ready for its current spec and its Secret holds tls.crt.
func Install(ctx context.Context, kube kubernetes.Interface, cm cmclient.Interface, opts Options) (*PKI, error) {
	p := &PKI{Options: opts.withDefaults(), kube: kube, cm: cm}
	objs := Manifests(p.Options)
	for _, ns := range []string{p.CertManagerNamespace, p.LinkerdNamespace} {
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}

	if p.CopiedAnchor {
		if _, err := kube.CoreV1().Secrets(p.CertManagerNamespace).Get(ctx, p.TrustAnchor, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("the copied trust anchor Secret %s/%s: %w", p.CertManagerNamespace, p.TrustAnchor, err)
		}
	} else {
		if err := p.applyIssuer(ctx, objs.RootIssuer); err != nil {
			return nil, err
		}
		if err := p.applyCertificate(ctx, objs.TrustAnchor); err != nil {
			return nil, err
		}
	}
	if err := p.applyClusterIssuer(ctx, objs.IdentityClusterIssuer); err != nil {
		return nil, err
	}
	if err := p.applyCertificate(ctx, objs.IdentityIssuer); err != nil {
		return nil, err
	}
	klog.V(1).InfoS("Linkerd PKI issued", "anchor", p.CertManagerNamespace+"/"+p.TrustAnchor,
		"issuer", p.LinkerdNamespace+"/"+p.IdentityIssuer)
	return p, nil
}

func (p *PKI) applyIssuer(ctx context.Context, want *cmapi.Issuer) error {
	issuers := p.cm.CertmanagerV1().Issuers(want.Namespace)
	got, err := issuers.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = issuers.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		got.Spec = want.Spec
		_, err = issuers.Update(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("applying Issuer %s/%s: %w", want.Namespace, want.Name, err)
	}
	return poll.Until(ctx, p.Timeout, fmt.Sprintf("Issuer %s/%s to be Ready", want.Namespace, want.Name), func(ctx context.Context) (bool, error) {
		iss, err := issuers.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return issuerReady(iss.Generation, iss.Status.Conditions)
	})
}

func (p *PKI) applyClusterIssuer(ctx context.Context, want *cmapi.ClusterIssuer) error {
	issuers := p.cm.CertmanagerV1().ClusterIssuers()
	got, err := issuers.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = issuers.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		got.Spec = want.Spec
		_, err = issuers.Update(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("applying ClusterIssuer %s: %w", want.Name, err)
	}
	return poll.Until(ctx, p.Timeout, fmt.Sprintf("ClusterIssuer %s to be Ready", want.Name), func(ctx context.Context) (bool, error) {
		iss, err := issuers.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return issuerReady(iss.Generation, iss.Status.Conditions)
	})
}

func issuerReady(generation int64, conds []cmapi.IssuerCondition) (bool, error) {
	for _, c := range conds {
		if c.Type == cmapi.IssuerConditionReady {
			if c.Status == cmmeta.ConditionTrue && c.ObservedGeneration >= generation {
				return true, nil
			}
			return false, poll.Pending("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
		}
	}
	return false, poll.Pending("no Ready condition yet")
}

func (p *PKI) applyCertificate(ctx context.Context, want *cmapi.Certificate) error {
	certs := p.cm.CertmanagerV1().Certificates(want.Namespace)
	got, err := certs.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = certs.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		got.Spec = want.Spec
		_, err = certs.Update(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("applying Certificate %s/%s: %w", want.Namespace, want.Name, err)
	}
	_, err = WaitReady(ctx, p.kube, p.cm, want.Namespace, want.Name, p.Timeout)
	return err
}

// CopyAnchor copies the trust anchor Secret (certificate, key and ca.crt) from one cluster to
// another, as a user distributes one anchor to linked clusters by hand or with a secret store;
// the copy in the target is created or overwritten. It returns the anchor's fingerprint source,
// the copied tls.crt.
func CopyAnchor(ctx context.Context, from, to kubernetes.Interface, opts Options) ([]byte, error) {
	o := opts.withDefaults()
	src, err := from.CoreV1().Secrets(o.CertManagerNamespace).Get(ctx, o.TrustAnchor, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the trust anchor Secret to copy: %w", err)
	}
	for _, ns := range []string{o.CertManagerNamespace, o.LinkerdNamespace} {
		_, err := to.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	dst := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: o.TrustAnchor, Namespace: o.CertManagerNamespace}, Type: src.Type, Data: src.Data}
	secrets := to.CoreV1().Secrets(o.CertManagerNamespace)
	cur, err := secrets.Get(ctx, o.TrustAnchor, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = secrets.Create(ctx, dst, metav1.CreateOptions{})
	case err == nil:
		cur.Data, cur.Type = src.Data, src.Type
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("writing the copied trust anchor Secret: %w", err)
	}
	return src.Data[corev1.TLSCertKey], nil
}
