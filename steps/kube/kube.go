package kube

import (
	"context"
	"net/http"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Resource is what the rotation does with one kind, in one namespace or cluster-wide.
type Resource[T runtime.Object, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// StatusResource is a Resource whose status is written through its own subresource.
type StatusResource[T runtime.Object, L runtime.Object] interface {
	Resource[T, L]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Interface reaches the Kubernetes kinds the rotation uses.
type Interface interface {
	CoreV1() CoreV1
	AppsV1() AppsV1
	PolicyV1() PolicyV1
	CoordinationV1() CoordinationV1
}

// CoreV1 is the core group's part of Interface.
type CoreV1 interface {
	// RESTClient is the group's client, for informers' list-watches.
	RESTClient() rest.Interface
	Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList]
	ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList]
	Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList]
	Events(namespace string) Resource[*corev1.Event, *corev1.EventList]
}

// AppsV1 is the apps group's part of Interface.
type AppsV1 interface {
	RESTClient() rest.Interface
	Deployments(namespace string) Resource[*appsv1.Deployment, *appsv1.DeploymentList]
	StatefulSets(namespace string) Resource[*appsv1.StatefulSet, *appsv1.StatefulSetList]
	DaemonSets(namespace string) Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList]
}

// PolicyV1 is the policy group's part of Interface.
type PolicyV1 interface {
	PodDisruptionBudgets(namespace string) Resource[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList]
	Evictions(namespace string) Evictions
}

// Evictions evicts pods through their eviction subresource, which honours disruption budgets.
type Evictions interface {
	Evict(ctx context.Context, eviction *policyv1.Eviction) error
}

// CoordinationV1 is the coordination group's part of Interface: the leader-election Lease.
type CoordinationV1 interface {
	Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
}

// CertManager reaches cert-manager's kinds.
type CertManager interface {
	CertmanagerV1() CertmanagerV1
}

// CertmanagerV1 is the certmanager.k8s.io/v1 group's part of CertManager.
type CertmanagerV1 interface {
	Certificates(namespace string) StatusResource[*cmapi.Certificate, *cmapi.CertificateList]
	CertificateRequests(namespace string) Resource[*cmapi.CertificateRequest, *cmapi.CertificateRequestList]
	Issuers(namespace string) Resource[*cmapi.Issuer, *cmapi.IssuerList]
	ClusterIssuers() Resource[*cmapi.ClusterIssuer, *cmapi.ClusterIssuerList]
}

// AddToScheme adds the kinds of this package to a scheme.
var AddToScheme = schemeBuilder.AddToScheme

var schemeBuilder = runtime.NewSchemeBuilder(
	corev1.AddToScheme, appsv1.AddToScheme, autoscalingv1.AddToScheme, policyv1.AddToScheme,
	coordinationv1.AddToScheme, cmapi.AddToScheme,
)

// Scheme knows exactly the kinds of this package, and the meta types of options and errors.
var Scheme = runtime.NewScheme()

var codecs = serializer.NewCodecFactory(Scheme)

var parameterCodec = runtime.NewParameterCodec(Scheme)

func init() {
	if err := AddToScheme(Scheme); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(Scheme, metav1.SchemeGroupVersion)
}

// Clients are the typed clients of cfg's cluster.
type Clients struct {
	core, apps, policy, coordination, certManager rest.Interface

	// What CoreClientFor builds another core client from.
	cfg         *rest.Config
	httpClient  *http.Client
	kubeLimiter flowcontrol.RateLimiter
}

var (
	_ Interface   = (*Clients)(nil)
	_ CertManager = (*Clients)(nil)
)

// NewForConfig returns the clients of the cluster of cfg. They share one HTTP client; the
// Kubernetes groups share one rate limiter (cfg.QPS, cfg.Burst) and cert-manager's has its own,
// as they did as two generated Clientsets. Without cfg.UserAgent they send client-go's default
// one, as a Clientset does: the HTTP client sets it, so it is set before that is built.
func NewForConfig(cfg *rest.Config) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	limiter := func() flowcontrol.RateLimiter {
		if cfg.RateLimiter != nil || cfg.QPS <= 0 {
			return cfg.RateLimiter
		}
		return flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	kubeLimiter := limiter()
	c := &Clients{cfg: cfg, httpClient: httpClient, kubeLimiter: kubeLimiter}
	for _, g := range []struct {
		into    *rest.Interface
		gv      schema.GroupVersion
		apiPath string
		limiter flowcontrol.RateLimiter
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api", kubeLimiter},
		{&c.apps, appsv1.SchemeGroupVersion, "/apis", kubeLimiter},
		{&c.policy, policyv1.SchemeGroupVersion, "/apis", kubeLimiter},
		{&c.coordination, coordinationv1.SchemeGroupVersion, "/apis", kubeLimiter},
		{&c.certManager, cmapi.SchemeGroupVersion, "/apis", limiter()},
	} {
		if *g.into, err = restClient(cfg, httpClient, g.limiter, g.gv, g.apiPath, codecs.WithoutConversion()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func restClient(cfg *rest.Config, httpClient *http.Client, limiter flowcontrol.RateLimiter, gv schema.GroupVersion, apiPath string,
	ns runtime.NegotiatedSerializer) (rest.Interface, error) {
	gc := rest.CopyConfig(cfg)
	gc.RateLimiter = limiter
	gc.GroupVersion = &gv
	gc.APIPath = apiPath
	gc.NegotiatedSerializer = ns
	if gc.UserAgent == "" {
		gc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(gc, httpClient)
}

// CoreClientFor returns a client of the core group that decodes with ns: for a reader that
// decodes a kind into a type of its own (podindex.WirePod). It shares the connection and the rate
// limiter of the other Kubernetes clients.
func (c *Clients) CoreClientFor(ns runtime.NegotiatedSerializer) (rest.Interface, error) {
	return restClient(c.cfg, c.httpClient, c.kubeLimiter, corev1.SchemeGroupVersion, "/api", ns)
}

// resource is a typed client of a built-in kind: client-go's own, preferring protobuf as its
// generated clients do.
func resource[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object](c rest.Interface, name, namespace string, newT func() T, newL func() L) *typed[T, L] {
	return &typed[T, L]{client: c, resource: name, namespace: namespace, newT: newT, newL: newL, protobuf: true}
}

// custom is a typed client of a custom resource: JSON only, as the apiserver serves those.
func custom[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object](c rest.Interface, name, namespace string, newT func() T, newL func() L) *typed[T, L] {
	return &typed[T, L]{client: c, resource: name, namespace: namespace, newT: newT, newL: newL}
}

func (c *Clients) CoreV1() CoreV1                 { return core{c.core} }
func (c *Clients) AppsV1() AppsV1                 { return apps{c.apps} }
func (c *Clients) PolicyV1() PolicyV1             { return policy{c.policy} }
func (c *Clients) CoordinationV1() CoordinationV1 { return coordination{c.coordination} }
func (c *Clients) CertmanagerV1() CertmanagerV1   { return certManager{c.certManager} }

type core struct{ c rest.Interface }

func (g core) RESTClient() rest.Interface { return g.c }
func (g core) Pods(ns string) Resource[*corev1.Pod, *corev1.PodList] {
	return resource(g.c, "pods", ns, func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}
func (g core) ConfigMaps(ns string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return resource(g.c, "configmaps", ns, func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}
func (g core) Secrets(ns string) Resource[*corev1.Secret, *corev1.SecretList] {
	return resource(g.c, "secrets", ns, func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} })
}
func (g core) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return resource(g.c, "namespaces", "", func() *corev1.Namespace { return &corev1.Namespace{} }, func() *corev1.NamespaceList { return &corev1.NamespaceList{} })
}
func (g core) Events(ns string) Resource[*corev1.Event, *corev1.EventList] {
	return resource(g.c, "events", ns, func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

type apps struct{ c rest.Interface }

func (g apps) RESTClient() rest.Interface { return g.c }
func (g apps) Deployments(ns string) Resource[*appsv1.Deployment, *appsv1.DeploymentList] {
	return resource(g.c, "deployments", ns, func() *appsv1.Deployment { return &appsv1.Deployment{} }, func() *appsv1.DeploymentList { return &appsv1.DeploymentList{} })
}
func (g apps) StatefulSets(ns string) Resource[*appsv1.StatefulSet, *appsv1.StatefulSetList] {
	return resource(g.c, "statefulsets", ns, func() *appsv1.StatefulSet { return &appsv1.StatefulSet{} }, func() *appsv1.StatefulSetList { return &appsv1.StatefulSetList{} })
}
func (g apps) DaemonSets(ns string) Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return resource(g.c, "daemonsets", ns, func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} }, func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} })
}

type policy struct{ c rest.Interface }

func (g policy) PodDisruptionBudgets(ns string) Resource[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList] {
	return resource(g.c, "poddisruptionbudgets", ns, func() *policyv1.PodDisruptionBudget { return &policyv1.PodDisruptionBudget{} }, func() *policyv1.PodDisruptionBudgetList { return &policyv1.PodDisruptionBudgetList{} })
}
func (g policy) Evictions(string) Evictions { return evictions{g.c} }

type evictions struct{ c rest.Interface }

// Evict posts the eviction to its pod's eviction subresource, in the eviction's namespace, as
// client-go's policy/v1 client does.
func (e evictions) Evict(ctx context.Context, eviction *policyv1.Eviction) error {
	return e.c.Post().AbsPath("/api/v1").Namespace(eviction.Namespace).Resource("pods").Name(eviction.Name).
		SubResource("eviction").Body(eviction).Do(ctx).Error()
}

type coordination struct{ c rest.Interface }

func (g coordination) Leases(ns string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return resource(g.c, "leases", ns, func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

type certManager struct{ c rest.Interface }

func (g certManager) Certificates(ns string) StatusResource[*cmapi.Certificate, *cmapi.CertificateList] {
	return custom(g.c, "certificates", ns, func() *cmapi.Certificate { return &cmapi.Certificate{} }, func() *cmapi.CertificateList { return &cmapi.CertificateList{} })
}
func (g certManager) CertificateRequests(ns string) Resource[*cmapi.CertificateRequest, *cmapi.CertificateRequestList] {
	return custom(g.c, "certificaterequests", ns, func() *cmapi.CertificateRequest { return &cmapi.CertificateRequest{} }, func() *cmapi.CertificateRequestList { return &cmapi.CertificateRequestList{} })
}
func (g certManager) Issuers(ns string) Resource[*cmapi.Issuer, *cmapi.IssuerList] {
	return custom(g.c, "issuers", ns, func() *cmapi.Issuer { return &cmapi.Issuer{} }, func() *cmapi.IssuerList { return &cmapi.IssuerList{} })
}
func (g certManager) ClusterIssuers() Resource[*cmapi.ClusterIssuer, *cmapi.ClusterIssuerList] {
	return custom(g.c, "clusterissuers", "", func() *cmapi.ClusterIssuer { return &cmapi.ClusterIssuer{} }, func() *cmapi.ClusterIssuerList { return &cmapi.ClusterIssuerList{} })
}

// ServerGroups lists the API groups the apiserver serves under /apis, as a discovery client's
// ServerGroups does (without the legacy core group, which is always there).
func (c *Clients) ServerGroups() (*metav1.APIGroupList, error) {
	out := &metav1.APIGroupList{}
	if err := c.core.Get().AbsPath("/apis").Do(context.TODO()).Into(out); err != nil {
		return nil, err
	}
	return out, nil
}
