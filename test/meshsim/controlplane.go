package meshsim

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ControlPlaneOptions shape the control plane that InstallControlPlane renders, like the
// linkerd-control-plane Helm chart's values.
type ControlPlaneOptions struct {
	Namespace    string // default "linkerd"
	TrustDomain  string // default "cluster.local"
	Replicas     int32  // controllerReplicas, default 1
	ProxyVersion string // default "meshsim"
	// ProxyMinRefresh / ProxyMaxRefresh add the refresh bounds to the control-plane proxies.
	ProxyMinRefresh time.Duration
	ProxyMaxRefresh time.Duration
	// ProxyAsContainer puts the destination's and the proxy injector's proxies in
	// spec.containers (Helm proxy.nativeSidecar: false) instead of native sidecars, the chart
	// default since edge-26.5.2. The identity's proxy is in spec.containers either way.
	ProxyAsContainer bool
	// IssuerScheme is identity's -identity-scheme (Helm identity.issuer.scheme): kubernetes.io/tls
	// when empty, as this project's install sets it; linkerd.io/tls is the chart's default, with
	// the issuer Helm renders from certificates made by hand.
	IssuerScheme string
}

// InstallControlPlane creates (or updates) the linkerd namespace, the control-plane
// ServiceAccounts and the Deployments linkerd-identity, linkerd-destination and
// linkerd-proxy-injector with Linkerd's labels and a linkerd-proxy container (a native sidecar
// unless opts.ProxyAsContainer, except identity's, always in spec.containers, as the chart
// renders them: TestControlPlaneMatchesLinkerd) whose trust anchors come from the
// linkerd-identity-trust-roots ConfigMap through configMapKeyRef (resolved at
// container start). kwok runs the pods; a running Mesh simulates their processes.
//
// The pod templates carry linkerd.io/trust-root-sha256 of the ConfigMap value at install time,
// as Helm renders it; a later `rollout restart` does not change it.
func InstallControlPlane(ctx context.Context, client kubernetes.Interface, opts ControlPlaneOptions) error {
	if opts.Namespace == "" {
		opts.Namespace = DefaultLinkerdNamespace
	}
	if opts.TrustDomain == "" {
		opts.TrustDomain = DefaultTrustDomain
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.ProxyVersion == "" {
		opts.ProxyVersion = "meshsim"
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace,
		Labels: map[string]string{"linkerd.io/is-control-plane": "true", "config.linkerd.io/admission-webhooks": "disabled",
			LabelControlPlaneNS: opts.Namespace},
		Annotations: map[string]string{AnnotationInject: "disabled"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", opts.Namespace, err)
	}
	hash := ""
	if cm, err := client.CoreV1().ConfigMaps(opts.Namespace).Get(ctx, TrustRootsConfigMap, metav1.GetOptions{}); err == nil {
		hash = BundleSHA256(cm.Data[TrustRootsKey])
	}
	for _, component := range []string{ComponentIdentity, ComponentDestination, ComponentProxyInjector} {
		name := "linkerd-" + component
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace,
			Labels: map[string]string{LabelControlPlaneComponent: component, LabelControlPlaneNS: opts.Namespace}}}
		if _, err := client.CoreV1().ServiceAccounts(opts.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating serviceaccount %s/%s: %w", opts.Namespace, name, err)
		}
		d := controlPlaneDeployment(opts, component, hash)
		api := client.AppsV1().Deployments(opts.Namespace)
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, d, metav1.CreateOptions{})
		case err == nil:
			d.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, d, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("installing deployment %s/%s: %w", opts.Namespace, name, err)
		}
	}
	return nil
}

func controlPlaneDeployment(opts ControlPlaneOptions, component, trustRootHash string) *appsv1.Deployment {
	name := "linkerd-" + component
	labels := map[string]string{LabelControlPlaneComponent: component, LabelControlPlaneNS: opts.Namespace}
	podLabels := map[string]string{LabelControlPlaneComponent: component, LabelControlPlaneNS: opts.Namespace,
		LabelWorkloadNS: opts.Namespace, "linkerd.io/proxy-deployment": name}
	annotations := map[string]string{AnnotationProxyVersion: opts.ProxyVersion, AnnotationCreatedBy: "linkerd/helm " + opts.ProxyVersion}
	if trustRootHash != "" {
		annotations[AnnotationTrustRootHash] = trustRootHash
	}
	m := &Mesh{cfg: Config{LinkerdNamespace: opts.Namespace, TrustDomain: opts.TrustDomain, ProxyVersion: opts.ProxyVersion,
		ProxyMinRefresh: opts.ProxyMinRefresh, ProxyMaxRefresh: opts.ProxyMaxRefresh}}
	anchors := corev1.EnvVar{Name: EnvTrustAnchors, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: TrustRootsConfigMap}, Key: TrustRootsKey}}}
	// The chart renders linkerd-identity's proxy in spec.containers whatever proxy.nativeSidecar
	// says (linkerd2 charts/linkerd-control-plane/templates/identity.yaml sets it to false for
	// that pod): only destination and the proxy injector carry a native sidecar.
	native := !opts.ProxyAsContainer && component != ComponentIdentity
	proxy := m.proxyContainer(anchors, nil, native)
	main := corev1.Container{Name: component, Image: "cr.l5d.io/linkerd/controller:" + opts.ProxyVersion, Args: []string{component}}
	if component == ComponentIdentity {
		main.Args = append(main.Args, "-controller-namespace="+opts.Namespace, "-identity-trust-domain="+opts.TrustDomain,
			identitySchemeArg+cmp.Or(opts.IssuerScheme, SchemeKubernetes))
		main.Ports = []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8080}, {Name: "admin-http", ContainerPort: 9990}}
	}
	spec := corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{main, proxy}}
	if native {
		spec.InitContainers, spec.Containers = []corev1.Container{proxy}, []corev1.Container{main}
	}
	replicas := opts.Replicas
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: annotations},
				Spec:       spec,
			},
		},
	}
}

// Identity's issuer schemes (linkerd2 controller/cmd/identity/main.go): the files of the issuer
// volume identity reads under each. Linkerd's chart renders -identity-scheme from
// identity.issuer.scheme, linkerd.io/tls by default; this project's install sets
// kubernetes.io/tls.
const (
	SchemeLinkerd     = "linkerd.io/tls"
	SchemeKubernetes  = "kubernetes.io/tls"
	identitySchemeArg = "-identity-scheme="
)

// issuerFiles are the issuer certificate and key identity reads from its volume under scheme:
// crt.pem and key.pem under linkerd.io/tls, tls.crt and tls.key under kubernetes.io/tls (main.go
// builds the paths from the scheme; any other scheme fails there).
func issuerFiles(data map[string][]byte, scheme string) (crt, key []byte) {
	if scheme == SchemeLinkerd {
		return data["crt.pem"], data["key.pem"]
	}
	return data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]
}

// podIssuerScheme is the -identity-scheme argument of the pod's identity container, "" when it
// has none (the chart always renders it).
func podIssuerScheme(pod *corev1.Pod) string {
	args, _ := containerArgs(pod, ComponentIdentity)
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, identitySchemeArg); ok {
			return v
		}
	}
	return ""
}
