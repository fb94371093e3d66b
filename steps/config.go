package steps

import (
	"fmt"

	"github.com/spf13/pflag"
)

// Linkerd's names, as the README's install names them; every one can be overridden by a flag.
const (
	DefaultLinkerdNamespace     = "linkerd"
	DefaultCertManagerNamespace = "cert-manager"
	DefaultAnchorSecret         = "linkerd-trust-anchor"
	DefaultPreviousAnchorSecret = "linkerd-previous-anchor"
	DefaultIssuerSecret         = "linkerd-identity-issuer"
	DefaultTrustRootsConfigMap  = "linkerd-identity-trust-roots"
	DefaultTrustDomain          = "cluster.local"
	DefaultRotationName         = "cluster"

	// TrustRootsKey is the ConfigMap key Linkerd mounts as the trust bundle.
	TrustRootsKey = "ca-bundle.crt"
	// CertificateKey is the Secret key holding a certificate (kubernetes.io/tls).
	CertificateKey = "tls.crt"

	// Annotations and labels of Linkerd's contract (see docs/linkerd-contracts in the repo's
	// history, and linkerd2's pkg/k8s/labels.go).
	TrustRootSHA256Annotation  = "linkerd.io/trust-root-sha256"
	ControlPlaneNSLabel        = "linkerd.io/control-plane-ns"
	ControlPlaneComponentLabel = "linkerd.io/control-plane-component"
	ProxyContainerName         = "linkerd-proxy"
	AdminPortName              = "linkerd-admin"
	DefaultAdminPort           = 4191
	// RestartedAtAnnotation is the pod-template annotation `kubectl rollout restart` sets.
	RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"
	// ManagedByLabel marks objects the operator created.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "linkerd-trust-rotation"
	// FieldManager is the field manager of the operator's writes (server-side apply), as the
	// ConfigMap's managedFields name it.
	FieldManager = "linkerd-trust-rotation"
)

// Config names the objects of the Linkerd PKI the rotation reads and writes.
type Config struct {
	LinkerdNamespace     string
	CertManagerNamespace string
	AnchorSecret         string
	PreviousAnchorSecret string
	IssuerSecret         string
	TrustRootsConfigMap  string
	IdentityDeployment   string
	DestinationDeploy    string
	ProxyInjectorDeploy  string
	TrustDomain          string
	// AnchorCertificate and IssuerCertificate are the cert-manager Certificates of the trust
	// anchor (in the cert-manager namespace) and of the identity issuer (in the Linkerd
	// namespace): `linkerd trust rotate` renews the first, spec.identityIssuerRenewal the second.
	AnchorCertificate string
	IssuerCertificate string
}

// DefaultConfig returns Linkerd's default names.
func DefaultConfig() Config {
	return Config{
		LinkerdNamespace:     DefaultLinkerdNamespace,
		CertManagerNamespace: DefaultCertManagerNamespace,
		AnchorSecret:         DefaultAnchorSecret,
		PreviousAnchorSecret: DefaultPreviousAnchorSecret,
		IssuerSecret:         DefaultIssuerSecret,
		TrustRootsConfigMap:  DefaultTrustRootsConfigMap,
		IdentityDeployment:   "linkerd-identity",
		DestinationDeploy:    "linkerd-destination",
		ProxyInjectorDeploy:  "linkerd-proxy-injector",
		TrustDomain:          DefaultTrustDomain,
		AnchorCertificate:    DefaultAnchorSecret,
		IssuerCertificate:    DefaultIssuerSecret,
	}
}

// AddFlags registers a flag for every name. The operator and the CLI share them, so the same
// flag means the same object everywhere.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.LinkerdNamespace, "linkerd-namespace", "L", c.LinkerdNamespace, "namespace of the Linkerd control plane")
	fs.StringVar(&c.CertManagerNamespace, "cert-manager-namespace", c.CertManagerNamespace, "namespace of cert-manager and of the trust-anchor Certificate")
	fs.StringVar(&c.AnchorSecret, "trust-anchor-secret", c.AnchorSecret, "Secret (in the cert-manager namespace) that cert-manager writes the trust anchor to")
	fs.StringVar(&c.PreviousAnchorSecret, "previous-anchor-secret", c.PreviousAnchorSecret, "operator-managed Secret (in the Linkerd namespace) holding the previous anchor's certificate")
	fs.StringVar(&c.IssuerSecret, "identity-issuer-secret", c.IssuerSecret, "Secret (in the Linkerd namespace) holding the identity issuer")
	fs.StringVar(&c.TrustRootsConfigMap, "trust-roots-configmap", c.TrustRootsConfigMap, "ConfigMap (in the Linkerd namespace) holding the trust bundle, key "+TrustRootsKey)
	fs.StringVar(&c.IdentityDeployment, "identity-deployment", c.IdentityDeployment, "Deployment of the Linkerd identity controller")
	fs.StringVar(&c.DestinationDeploy, "destination-deployment", c.DestinationDeploy, "Deployment of the Linkerd destination controller")
	fs.StringVar(&c.ProxyInjectorDeploy, "proxy-injector-deployment", c.ProxyInjectorDeploy, "Deployment of the Linkerd proxy injector")
	fs.StringVar(&c.TrustDomain, "identity-trust-domain", c.TrustDomain, "Linkerd's identity trust domain")
	fs.StringVar(&c.AnchorCertificate, "trust-anchor-certificate", c.AnchorCertificate, "cert-manager Certificate (in the cert-manager namespace) of the trust anchor")
	fs.StringVar(&c.IssuerCertificate, "identity-issuer-certificate", c.IssuerCertificate, "cert-manager Certificate (in the Linkerd namespace) of the identity issuer")
}

// Validate says which name is empty, if any.
func (c Config) Validate() error {
	for flag, v := range map[string]string{
		"linkerd-namespace": c.LinkerdNamespace, "cert-manager-namespace": c.CertManagerNamespace,
		"trust-anchor-secret": c.AnchorSecret, "previous-anchor-secret": c.PreviousAnchorSecret,
		"identity-issuer-secret": c.IssuerSecret, "trust-roots-configmap": c.TrustRootsConfigMap,
		"identity-deployment": c.IdentityDeployment, "destination-deployment": c.DestinationDeploy,
		"proxy-injector-deployment": c.ProxyInjectorDeploy, "identity-trust-domain": c.TrustDomain,
		"trust-anchor-certificate": c.AnchorCertificate, "identity-issuer-certificate": c.IssuerCertificate,
	} {
		if v == "" {
			return fmt.Errorf("--%s must not be empty", flag)
		}
	}
	return nil
}

// IdentityName is the proxy identity of a pod, which is also the SNI its admin port answers to:
// <serviceaccount>.<namespace>.serviceaccount.identity.<linkerd-namespace>.<trust-domain>.
func (c Config) IdentityName(serviceAccount, namespace string) string {
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	return fmt.Sprintf("%s.%s.serviceaccount.identity.%s.%s", serviceAccount, namespace, c.LinkerdNamespace, c.TrustDomain)
}

// ControlPlane returns the control-plane Deployment names, identity first.
func (c Config) ControlPlane() []string {
	return []string{c.IdentityDeployment, c.DestinationDeploy, c.ProxyInjectorDeploy}
}
