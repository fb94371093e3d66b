package meshsim

// Names and keys of the Linkerd objects the simulator reads and writes. They are the defaults of
// a Linkerd installation (see linkerd-contracts.md); Config lets tests override the ones that a
// user can override.
const (
	// DefaultLinkerdNamespace is where the control plane runs.
	DefaultLinkerdNamespace = "linkerd"
	// DefaultTrustDomain is Linkerd's identity trust domain.
	DefaultTrustDomain = "cluster.local"

	TrustRootsConfigMap = "linkerd-identity-trust-roots"
	TrustRootsKey       = "ca-bundle.crt"
	IssuerSecret        = "linkerd-identity-issuer"

	IdentityDeployment      = "linkerd-identity"
	DestinationDeployment   = "linkerd-destination"
	ProxyInjectorDeployment = "linkerd-proxy-injector"

	ComponentIdentity      = "identity"
	ComponentDestination   = "destination"
	ComponentProxyInjector = "proxy-injector"

	LabelControlPlaneComponent = "linkerd.io/control-plane-component"
	LabelControlPlaneNS        = "linkerd.io/control-plane-ns"
	LabelWorkloadNS            = "linkerd.io/workload-ns"

	AnnotationInject        = "linkerd.io/inject"
	AnnotationTrustRootHash = "linkerd.io/trust-root-sha256"
	AnnotationProxyVersion  = "linkerd.io/proxy-version"
	AnnotationCreatedBy     = "linkerd.io/created-by"
	AnnotationAdditionalEnv = "config.linkerd.io/proxy-additional-env"
	AnnotationRestartedAt   = "kubectl.kubernetes.io/restartedAt"

	// AnnotationNativeSidecar chooses the proxy's layout per workload or namespace, over Helm's
	// proxy.nativeSidecar (linkerd2 pkg/k8s/labels.go ProxyEnableNativeSidecarAnnotation); the
	// beta and alpha spellings are deprecated but still read, with less precedence.
	AnnotationNativeSidecar      = "config.linkerd.io/proxy-enable-native-sidecar"
	AnnotationNativeSidecarBeta  = "config.beta.linkerd.io/proxy-enable-native-sidecar"
	AnnotationNativeSidecarAlpha = "config.alpha.linkerd.io/proxy-enable-native-sidecar"

	ProxyContainerName = "linkerd-proxy"
	AdminPortName      = "linkerd-admin"
	AdminPort          = 4191

	EnvTrustAnchors = "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS"
	EnvLocalName    = "LINKERD2_PROXY_IDENTITY_LOCAL_NAME"
	EnvMinRefresh   = "LINKERD2_PROXY_IDENTITY_MIN_REFRESH"
	EnvMaxRefresh   = "LINKERD2_PROXY_IDENTITY_MAX_REFRESH"

	// EventIssuerUpdated and EventIssuerUpdateSkipped are the reasons of the Events the identity
	// controller records on its Deployment (linkerd2 pkg/identity/service.go).
	EventIssuerUpdated       = "IssuerUpdated"
	EventIssuerUpdateSkipped = "IssuerUpdateSkipped"

	// WebhookConfigName is the MutatingWebhookConfiguration Linkerd registers.
	WebhookConfigName = "linkerd-proxy-injector-webhook-config"
	webhookName       = "linkerd-proxy-injector.linkerd.io"
)

// IdentityName returns the TLS identity of a workload, as the proxy-injector spells it in
// LINKERD2_PROXY_IDENTITY_LOCAL_NAME: <sa>.<ns>.serviceaccount.identity.<linkerd-ns>.<trust-domain>.
func IdentityName(serviceAccount, namespace, linkerdNS, trustDomain string) string {
	return serviceAccount + "." + namespace + ".serviceaccount.identity." + linkerdNS + "." + trustDomain
}

// issuerExpectedName is the DNS name the identity controller requires of its issuer certificate
// (controller/cmd/identity: "identity.<ns>.<trust-domain>").
func issuerExpectedName(linkerdNS, trustDomain string) string {
	return "identity." + linkerdNS + "." + trustDomain
}
