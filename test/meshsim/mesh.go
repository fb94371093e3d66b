package meshsim

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// Never disables a delay-driven refresh (Config.VolumeRefreshDelay): only a restart shows changes.
const Never time.Duration = -1

// Config configures the simulated mesh. Zero values take Linkerd's defaults, except where noted.
type Config struct {
	// RESTConfig reaches the cluster (required). Client is built from it when nil.
	RESTConfig *rest.Config
	Client     kubernetes.Interface

	LinkerdNamespace string // default "linkerd"
	TrustDomain      string // default "cluster.local"
	ProxyVersion     string // linkerd.io/proxy-version; default "meshsim"

	// IssuanceLifetime is identity's workload certificate lifetime (identity.issuer.issuanceLifetime,
	// default 24h); ClockSkewAllowance is added at both ends (default 20s, Linkerd's Helm value).
	IssuanceLifetime   time.Duration
	ClockSkewAllowance time.Duration

	// IssuerReloadDelay is how long after an issuer Secret change the identity controller sees
	// the new files (kubelet volume sync + fsnotify). Default 500ms.
	IssuerReloadDelay time.Duration
	// VolumeRefreshDelay is how long after a trust-roots ConfigMap change the proxy-injector sees
	// it in its mounted file (the kubelet's sync period, ~60s by default). Never: only at restart.
	VolumeRefreshDelay time.Duration
	// CrashLoopBackoff is the kubelet's first restart back-off for a crashed identity container
	// (default 10s, doubling to 5m).
	CrashLoopBackoff time.Duration

	// ProxyMinRefresh / ProxyMaxRefresh, when set, make the injector (and InstallControlPlane)
	// add LINKERD2_PROXY_IDENTITY_MIN_REFRESH / MAX_REFRESH to every proxy; unset, proxies use
	// their defaults (10s / 24h).
	ProxyMinRefresh time.Duration
	ProxyMaxRefresh time.Duration

	// ProxyAsContainer makes the injector put the proxy in spec.containers unless a workload or
	// namespace annotation asks for a native sidecar: Helm proxy.nativeSidecar: false, the layout
	// of every Linkerd before edge-26.5.2. By default the proxy is a native sidecar, as current
	// Linkerd injects it (linkerd2 #15267).
	ProxyAsContainer bool

	// WebhookFailurePolicy of the proxy-injector webhook. Default Fail (Linkerd's Helm default
	// is Ignore; Fail makes an unavailable injector visible as rejected pods).
	WebhookFailurePolicy admissionregistrationv1.FailurePolicyType

	// OracleTick is the period of the oracle's full check (default 1s); it also checks on every
	// change of a proxy's roots or chain.
	OracleTick time.Duration
	// CertificateBound is how long a meshed pod's proxy may run without a certificate before
	// the oracle reports it (Oracle.SetCertificateBound); 0 reports none.
	CertificateBound time.Duration

	// Registerer receives the oracle's metrics (optional).
	Registerer prometheus.Registerer

	// ClusterName names the cluster when meshes of linked clusters share one oracle (Oracle):
	// it prefixes the pods' names, and pods of different clusters are judged as they talk across
	// a link (see PodRole). "" for a single cluster.
	ClusterName string
	// Oracle, when set, is an oracle shared with the meshes of the linked clusters, which the
	// caller runs (Oracle.Run); by default the mesh makes and runs its own.
	Oracle *Oracle
	// Clock drives every simulated timer (default: the real clock).
	Clock clock.WithTicker

	// Linkerd, when both binaries are set (reallinkerd.FromEnv: LINKERD_BIN and
	// LINKERD_CONTROLLER_BIN), switches the mesh to real-Linkerd mode: for each Running
	// linkerd-identity pod it runs Linkerd's own `controller identity` (realidentity.go), and for
	// each Running linkerd-proxy-injector pod its `controller proxy-injector`, which the
	// apiserver's admission calls reach (realinjector.go); only the proxies stay simulated. It
	// needs root (a mount namespace per container), RESTConfig, and the real clock. With its
	// Verifier set (WEBPKI_VERIFIER_BIN), the mesh's own oracle takes every chain verdict from
	// the real rustls-webpki, its model beside it (Oracle.SetVerifier); a shared Oracle is the
	// caller's to equip.
	Linkerd reallinkerd.Binaries
}

type clockWithAfterFunc interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

func (c *Config) defaults() error {
	if c.RESTConfig == nil && c.Client == nil {
		return errors.New("meshsim: Config.RESTConfig is required")
	}
	if c.LinkerdNamespace == "" {
		c.LinkerdNamespace = DefaultLinkerdNamespace
	}
	if c.TrustDomain == "" {
		c.TrustDomain = DefaultTrustDomain
	}
	if c.ProxyVersion == "" {
		c.ProxyVersion = "meshsim"
	}
	if c.IssuanceLifetime == 0 {
		c.IssuanceLifetime = 24 * time.Hour
	}
	if c.ClockSkewAllowance == 0 {
		c.ClockSkewAllowance = 20 * time.Second
	}
	if c.IssuerReloadDelay == 0 {
		c.IssuerReloadDelay = 500 * time.Millisecond
	}
	if c.VolumeRefreshDelay == 0 {
		c.VolumeRefreshDelay = 60 * time.Second
	}
	if c.CrashLoopBackoff == 0 {
		c.CrashLoopBackoff = 10 * time.Second
	}
	if c.WebhookFailurePolicy == "" {
		c.WebhookFailurePolicy = admissionregistrationv1.Fail
	}
	if c.OracleTick == 0 {
		c.OracleTick = time.Second
	}
	if _, realClock := c.Clock.(clock.RealClock); c.Linkerd.Real() && (c.RESTConfig == nil || c.Clock != nil && !realClock) {
		return errors.New("meshsim: Config.Linkerd runs Linkerd's own identity: it needs RESTConfig and the real clock")
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if _, ok := c.Clock.(clockWithAfterFunc); !ok {
		return errors.New("meshsim: Config.Clock must implement AfterFunc (clock.RealClock and testing clocks do)")
	}
	return nil
}

// Mesh is a running simulation.
type Mesh struct {
	cfg    Config
	client kubernetes.Interface
	clock  clockWithAfterFunc
	ctx    context.Context
	cancel context.CancelFunc
	oracle *Oracle
	// verifier is the real rustls-webpki the mesh's own oracle asks (Config.Linkerd.Verifier).
	verifier *RealVerifier
	// refreshErrs holds, by pod UID, why each proxy's last refresh failed (lastRefreshError).
	refreshErrs sync.Map

	factory    informers.SharedInformerFactory
	lnFactory  informers.SharedInformerFactory
	pods       listersv1.PodLister
	namespaces listersv1.NamespaceLister
	configMaps listersv1.ConfigMapLister
	secrets    listersv1.SecretLister

	admin       *adminServer
	webhook     *webhook
	real        *realLinkerd // Linkerd's own processes' shared state; nil when simulated
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	mu         sync.Mutex
	proxies    map[types.UID]*proxy
	identities map[types.UID]identityController
	// withheldReloads are the identity pods whose issuer volume is not refreshed
	// (WithholdIssuerReload), by UID.
	withheldReloads map[types.UID]bool
	injectors       map[types.UID]*injectorProc
	pending         map[types.UID]string // pods whose containers cannot start yet, and why
	proxyStarts     map[string]int       // by "<ns>/<deployment>"
	restarts        map[string]int       // RolloutRestart calls, by Workload.String()
	rollouts        *rollouts            // restarts and concurrency seen on application workloads
	// ignoreAdditionalEnv makes the injector ignore config.linkerd.io/proxy-additional-env.
	ignoreAdditionalEnv bool
	// faults are the admin-port faults tests inject (SetProxyFault).
	faults  faultSet
	stopped bool
	wg      sync.WaitGroup
}

// Start runs the simulated mesh until Stop: informers on the cluster, the admission webhook
// (registered with the apiserver), and the oracle. It returns once the informers have synced.
func Start(ctx context.Context, cfg Config) (*Mesh, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	client := cfg.Client
	if client == nil {
		rc := rest.CopyConfig(cfg.RESTConfig)
		if rc.QPS == 0 {
			rc.QPS, rc.Burst = 200, 400
		}
		var err error
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("meshsim: building the client: %w", err)
		}
	}
	mctx, cancel := context.WithCancel(context.Background())
	m := &Mesh{
		cfg: cfg, client: client, clock: cfg.Clock.(clockWithAfterFunc), ctx: mctx, cancel: cancel,
		proxies: map[types.UID]*proxy{}, identities: map[types.UID]identityController{}, withheldReloads: map[types.UID]bool{}, injectors: map[types.UID]*injectorProc{},
		pending: map[types.UID]string{}, proxyStarts: map[string]int{}, restarts: map[string]int{},
		rollouts: newRollouts(),
	}
	if cfg.Linkerd.Real() {
		m.real = newRealLinkerd()
	}
	m.oracle = cfg.Oracle
	if m.oracle == nil {
		m.oracle = NewOracle(cfg.Clock, cfg.OracleTick, cfg.Registerer)
	}
	m.oracle.SetCertificateBound(cfg.CertificateBound)
	m.oracle.SetLeafExplainer(m.lastRefreshError)
	m.admin = newAdminServer(mctx)

	m.broadcaster = record.NewBroadcaster(record.WithContext(mctx))
	m.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	m.recorder = m.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: IdentityDeployment})

	m.factory = informers.NewSharedInformerFactory(client, 0)
	m.lnFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.LinkerdNamespace))
	podInf := m.factory.Core().V1().Pods()
	nsInf := m.factory.Core().V1().Namespaces()
	cmInf := m.lnFactory.Core().V1().ConfigMaps()
	secInf := m.lnFactory.Core().V1().Secrets()
	m.pods, m.namespaces, m.configMaps, m.secrets = podInf.Lister(), nsInf.Lister(), cmInf.Lister(), secInf.Lister()

	if _, err := cmInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.configMapEvent(obj) },
		UpdateFunc: func(_, obj any) { m.configMapEvent(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("meshsim: watching configmaps: %w", err)
	}
	if _, err := secInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.secretEvent(obj) },
		UpdateFunc: func(_, obj any) { m.secretEvent(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("meshsim: watching secrets: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.podEvent(obj) },
		UpdateFunc: func(_, obj any) { m.podEvent(obj) },
		DeleteFunc: func(obj any) { m.podEvent(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("meshsim: watching pods: %w", err)
	}
	_ = nsInf.Informer()
	if _, err := m.factory.Apps().V1().Deployments().Informer().AddEventHandler(m.rollouts.handler(cfg.LinkerdNamespace)); err != nil {
		cancel()
		return nil, fmt.Errorf("meshsim: watching deployments: %w", err)
	}
	if _, err := m.factory.Apps().V1().StatefulSets().Informer().AddEventHandler(m.rollouts.handler(cfg.LinkerdNamespace)); err != nil {
		cancel()
		return nil, fmt.Errorf("meshsim: watching statefulsets: %w", err)
	}
	// ConfigMaps and Secrets first, so that the first pod events see them.
	m.lnFactory.Start(mctx.Done())
	m.lnFactory.WaitForCacheSync(ctx.Done())
	m.factory.Start(mctx.Done())
	for typ, ok := range m.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			m.Stop()
			return nil, fmt.Errorf("meshsim: informer for %v did not sync: %w", typ, ctx.Err())
		}
	}
	wh, err := startWebhook(m)
	if err != nil {
		m.Stop()
		return nil, err
	}
	m.webhook = wh
	if err := m.registerWebhook(ctx); err != nil {
		m.Stop()
		return nil, err
	}
	if cfg.Oracle == nil && cfg.Linkerd.Verifier != "" {
		v, err := StartVerifier(cfg.Linkerd.Verifier)
		if err != nil {
			m.Stop()
			return nil, err
		}
		m.verifier = v
		m.oracle.SetVerifier(v)
	}
	if cfg.Oracle == nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.oracle.Run(mctx)
		}()
	}
	klog.InfoS("Mesh simulator started", "linkerdNamespace", cfg.LinkerdNamespace, "webhook", wh.url)
	return m, nil
}

// Stop unregisters the webhook and stops every simulated process, listener and goroutine.
func (m *Mesh) Stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	m.mu.Unlock()
	if m.webhook != nil {
		m.unregisterWebhook()
	}
	m.cancel()
	m.factory.Shutdown()
	m.lnFactory.Shutdown()
	m.mu.Lock()
	for uid := range m.proxies {
		m.stopPodLocked(uid)
	}
	for uid := range m.identities {
		m.stopPodLocked(uid)
	}
	for uid := range m.injectors {
		m.stopPodLocked(uid)
	}
	m.mu.Unlock()
	if m.real != nil {
		m.real.close()
	}
	if m.webhook != nil {
		m.webhook.close()
	}
	m.admin.close()
	m.broadcaster.Shutdown()
	m.wg.Wait()
	if m.verifier != nil {
		_ = m.verifier.Close() // the oracle falls back to its model from now on
		klog.InfoS("Mesh simulator stopped", "verifier", m.oracle.VerifierReport())
		return
	}
	klog.InfoS("Mesh simulator stopped")
}

// lastRefreshError is why a pod's proxy last failed to renew its certificate ("" when its last
// refresh succeeded): identity's refusal, or the proxy rejecting what identity handed it. The
// oracle calls it under its own lock, so it reads refreshErrs, which takes no lock of the mesh's.
func (m *Mesh) lastRefreshError(uid types.UID) string {
	if why, ok := m.refreshErrs.Load(uid); ok {
		return why.(string)
	}
	return ""
}

// Oracle is the mesh's mTLS safety oracle.
func (m *Mesh) Oracle() *Oracle { return m.oracle }

// Client is the client the mesh uses.
func (m *Mesh) Client() kubernetes.Interface { return m.client }

// Real reports whether the mesh runs Linkerd's own identity and proxy injector (Config.Linkerd):
// a fault of those two that only the simulator can make cannot be made then.
func (m *Mesh) Real() bool { return m.real != nil }

// Config returns the effective configuration.
func (m *Mesh) Config() Config { return m.cfg }

// WebhookURL is where the apiserver calls the proxy-injector.
func (m *Mesh) WebhookURL() string { return m.webhook.url }

// mountedConfigMapValue is a ConfigMap volume's content, or a configMapKeyRef env variable's
// value, at container start: the kubelet reads the ConfigMap from the apiserver then, so a
// write made before the pod started is in it even when this simulator's ConfigMap informer has
// not delivered it yet (informers of different resources deliver in no common order, and one
// may still be relisting after an apiserver outage). The informer's copy when the apiserver
// cannot be read.
func (m *Mesh) mountedConfigMapValue(ns, name, key string) (string, bool) {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	cm, err := m.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", false
		}
		return m.configMapValue(ns, name, key)
	}
	v, ok := cm.Data[key]
	return v, ok
}

func (m *Mesh) configMapValue(ns, name, key string) (string, bool) {
	cm, err := m.configMaps.ConfigMaps(ns).Get(name)
	if err != nil || ns != m.cfg.LinkerdNamespace {
		if ns == m.cfg.LinkerdNamespace || err == nil {
			return "", false
		}
		// Proxies outside the linkerd namespace only reference ConfigMaps by exception.
		cm, err = m.client.CoreV1().ConfigMaps(ns).Get(m.ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false
		}
	}
	v, ok := cm.Data[key]
	return v, ok
}

// mountedIssuerSecret is the issuer Secret's volume at container start, read from the apiserver
// as the kubelet does (see mountedConfigMapValue); the informer's copy when it cannot be read.
// The kubelet mounts every key of the Secret: identity reads those its scheme names
// (issuerFiles).
func (m *Mesh) mountedIssuerSecret() (map[string][]byte, bool) {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	s, err := m.client.CoreV1().Secrets(m.cfg.LinkerdNamespace).Get(ctx, IssuerSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false
	case err != nil:
		return m.issuerSecret()
	}
	return s.Data, true
}

func (m *Mesh) issuerSecret() (map[string][]byte, bool) {
	s, err := m.secrets.Secrets(m.cfg.LinkerdNamespace).Get(IssuerSecret)
	if err != nil {
		return nil, false
	}
	return s.Data, true
}

func (m *Mesh) deployment(ns, name string) (*appsv1.Deployment, error) {
	return m.client.AppsV1().Deployments(ns).Get(m.ctx, name, metav1.GetOptions{})
}

func (m *Mesh) recordEvent(obj *appsv1.Deployment, eventType, reason, msg string) {
	if obj != nil {
		m.recorder.Event(obj, eventType, reason, msg)
	}
}

func (m *Mesh) recordPodEvent(pod PodRef, eventType, reason, msg string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	m.recorder.Event(ref, eventType, reason, msg)
}

func (m *Mesh) configMapEvent(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != TrustRootsConfigMap {
		return
	}
	m.mu.Lock()
	injectors := make([]*injectorProc, 0, len(m.injectors))
	for _, in := range m.injectors {
		injectors = append(injectors, in)
	}
	m.mu.Unlock()
	for _, in := range injectors {
		in.configMapChanged()
	}
	if d := m.cfg.VolumeRefreshDelay; m.real != nil && d >= 0 {
		m.mu.Lock()
		for _, id := range m.identities {
			if real, ok := id.(*realIdentity); ok {
				m.clock.AfterFunc(d, real.trustRootsVolumeChanged)
			}
		}
		m.mu.Unlock()
	}
	m.retryPending()
}

func (m *Mesh) secretEvent(obj any) {
	s, ok := obj.(*corev1.Secret)
	if !ok || s.Name != IssuerSecret {
		return
	}
	m.mu.Lock()
	ids := make([]identityController, 0, len(m.identities))
	for uid, id := range m.identities {
		if m.withheldReloads[uid] {
			klog.InfoS("Issuer volume refresh withheld (fault)", "uid", uid)
			continue
		}
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.clock.AfterFunc(m.cfg.IssuerReloadDelay, id.issuerVolumeChanged)
	}
	m.retryPending()
}

// WithholdIssuerReload makes the identity pod named name (in the Linkerd namespace) miss every
// change of the issuer Secret from now on, as an identity whose reload of its issuer failed
// does (linkerd2 #15109): its issuer volume keeps the content it had, so it goes on signing with
// the issuer it loaded. Its replacement, a new pod, reads the Secret as usual. It reports
// whether the pod runs. For tests only.
func (m *Mesh) WithholdIssuerReload(name string) bool {
	m.mu.Lock()
	ids := make(map[types.UID]identityController, len(m.identities))
	for uid, id := range m.identities {
		ids[uid] = id
	}
	m.mu.Unlock()
	for uid, id := range ids {
		if id.state().Pod.Name == name {
			m.mu.Lock()
			m.withheldReloads[uid] = true
			m.mu.Unlock()
			return true
		}
	}
	return false
}

// retryPending retries starting the containers of pods that could not start (the kubelet
// retries CreateContainerConfigError and missing volumes).
func (m *Mesh) retryPending() {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.pending))
	for uid := range m.pending {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		for _, pod := range m.podsByUID(uid) {
			m.syncPod(pod)
		}
	}
}

func (m *Mesh) podsByUID(uid types.UID) []*corev1.Pod {
	pods, _ := m.pods.List(labelsEverything())
	for _, p := range pods {
		if p.UID == uid {
			return []*corev1.Pod{p}
		}
	}
	return nil
}

func (m *Mesh) podEvent(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if cur, err := m.pods.Pods(pod.Namespace).Get(pod.Name); err != nil || cur.UID != pod.UID {
		m.mu.Lock()
		m.stopPodLocked(pod.UID)
		m.mu.Unlock()
		return
	}
	m.syncPod(pod)
}

// syncPod starts the simulated processes of a pod that runs, and stops those of a pod that no
// longer does. A pod is running once kwok marks it Running with an IP; it keeps running while it
// terminates, as its containers do during the grace period.
func (m *Mesh) syncPod(pod *corev1.Pod) {
	running := pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if !running {
		m.stopPodLocked(pod.UID)
		return
	}
	if in := m.injectors[pod.UID]; in != nil && pod.DeletionTimestamp != nil {
		in.setTerminating()
	}
	_, hasProxy := m.proxies[pod.UID]
	_, pending := m.pending[pod.UID]
	if hasProxy && !pending {
		return
	}
	ref := PodRef{Cluster: m.cfg.ClusterName, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	component := ""
	if pod.Namespace == m.cfg.LinkerdNamespace {
		component = pod.Labels[LabelControlPlaneComponent]
	}
	switch {
	case component != "":
		ref.Role = RoleControlPlane
	case IsGateway(pod):
		ref.Role = RoleGateway
	}
	// The control-plane container starts before (or with) its proxy: identity's own proxy
	// certifies against it over localhost.
	switch component {
	case ComponentIdentity:
		if m.identities[pod.UID] == nil {
			var id identityController = &identityProc{mesh: m, pod: ref, scheme: podIssuerScheme(pod)}
			if m.real != nil {
				id = newRealIdentity(m, pod, ref)
			}
			m.identities[pod.UID] = id
			m.mu.Unlock()
			id.start()
			m.mu.Lock()
		}
	case ComponentProxyInjector:
		if m.injectors[pod.UID] == nil {
			bundle, ok := m.mountedConfigMapValue(m.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
			if !ok {
				m.pending[pod.UID] = "proxy-injector: trust-roots volume not available"
				return
			}
			in := &injectorProc{mesh: m, pod: ref, bundle: bundle}
			m.injectors[pod.UID] = in
			if m.real != nil {
				in.run = newInjectorRun(in, pod)
				go in.run.start()
			}
		}
	}
	if m.proxies[pod.UID] == nil && ProxyOf(pod) != nil {
		p, err := m.newProxy(pod, ref, component)
		if err != nil {
			if _, was := m.pending[pod.UID]; !was {
				klog.InfoS("Proxy container cannot start", "pod", ref, "err", err)
			}
			m.pending[pod.UID] = err.Error()
			return
		}
		m.proxies[pod.UID] = p
		if p.workload != "" {
			m.proxyStarts[pod.Namespace+"/"+p.workload]++
		}
		p.start()
	}
	delete(m.pending, pod.UID)
}

// newProxy resolves the proxy container's env as the kubelet does at container start. Its
// configMapKeyRefs (the control plane's LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS, from
// linkerd-identity-trust-roots) read the ConfigMap as the pod's volumes do
// (mountedConfigMapValue): the kubelet resolves both from one ConfigMap manager, so a proxy
// never starts on an older bundle than the one its pod's other containers mounted.
func (m *Mesh) newProxy(pod *corev1.Pod, ref PodRef, component string) (*proxy, error) {
	c := ProxyOf(pod)
	env, err := resolveEnv(pod, c, m.mountedConfigMapValue)
	if err != nil {
		return nil, fmt.Errorf("CreateContainerConfigError: %w", err)
	}
	roots, err := parseRoots(env[EnvTrustAnchors])
	if err != nil {
		return nil, fmt.Errorf("proxy failed to start: invalid %s: %w", EnvTrustAnchors, err)
	}
	name := env[EnvLocalName]
	if name == "" || strings.Contains(name, "$(") {
		return nil, fmt.Errorf("proxy failed to start: invalid %s %q", EnvLocalName, name)
	}
	minRef, maxRef := DefaultMinRefresh, DefaultMaxRefresh
	if v, ok := env[EnvMinRefresh]; ok {
		if minRef, err = ParseProxyDuration(v); err != nil {
			return nil, fmt.Errorf("proxy failed to start: %s: %w", EnvMinRefresh, err)
		}
	}
	if v, ok := env[EnvMaxRefresh]; ok {
		if maxRef, err = ParseProxyDuration(v); err != nil {
			return nil, fmt.Errorf("proxy failed to start: %s: %w", EnvMaxRefresh, err)
		}
	}
	key, err := newLeafKey()
	if err != nil {
		return nil, fmt.Errorf("proxy failed to start: generating key: %w", err)
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return &proxy{
		mesh: m, pod: ref, serviceAccount: sa, podIP: pod.Status.PodIP, port: adminPort(c), workload: ownerDeployment(pod),
		component: component, identity: name, roots: roots, rootsPEM: env[EnvTrustAnchors],
		minRef: minRef, maxRef: maxRef, key: key, started: m.clock.Now(), done: make(chan struct{}),
	}, nil
}

func (m *Mesh) stopPodLocked(uid types.UID) {
	delete(m.pending, uid)
	if p := m.proxies[uid]; p != nil {
		delete(m.proxies, uid)
		p.stop()
	}
	if id := m.identities[uid]; id != nil {
		delete(m.identities, uid)
		delete(m.withheldReloads, uid)
		id.stop()
	}
	if m.real != nil {
		m.real.forget(uid)
	}
	if in := m.injectors[uid]; in != nil {
		delete(m.injectors, uid)
		in.stop()
	}
}

// identityChanged is called when an identity controller becomes ready, so that proxies waiting
// for identity are not left waiting a full MIN_REFRESH after the mesh comes up... except that
// real proxies are: they retry on their own schedule. Kept as a hook for logging only.
func (m *Mesh) identityChanged() {}

// identityServing is called when Linkerd's own identity controller (realIdentity) starts
// serving. The simulated identity serves the instant its container starts, so its pod's proxy,
// which certifies with it over localhost, gets a certificate at once; Linkerd's takes a moment,
// and a proxy whose first Certify failed waits MIN_REFRESH (10s) before it tries again, during
// which no other proxy can reach identity through it. The proxy of a pod whose containers start
// in order (identity first, as the chart lists them) would not have asked yet; so it asks now.
func (m *Mesh) identityServing(uid types.UID) {
	m.mu.Lock()
	p := m.proxies[uid]
	m.mu.Unlock()
	if p != nil {
		p.certifyNow()
	}
}

// certify is a proxy's call to the identity service. The identity pod's own proxy reaches its
// controller over localhost; every other proxy reaches a Ready identity pod through the Service,
// over TLS that it verifies against its OWN roots for identity's name — so a proxy whose roots
// do not trust identity's proxy certificate cannot refresh at all.
func (m *Mesh) certify(p *proxy) ([]*x509.Certificate, error) {
	if m.faults.identityCutOff(p.pod.UID) {
		return nil, errors.New("connecting to linkerd-identity: connection refused (cut off by a test fault)")
	}
	m.mu.Lock()
	var id identityController
	var idProxy *proxy
	if p.component == ComponentIdentity {
		id = m.identities[p.pod.UID]
	} else {
		var ready []types.UID
		for uid, cand := range m.identities {
			if cand.ready() {
				ready = append(ready, uid)
			}
		}
		if len(ready) > 0 {
			sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
			uid := ready[rand.IntN(len(ready))]
			id, idProxy = m.identities[uid], m.proxies[uid]
		}
	}
	m.mu.Unlock()
	if id == nil || !id.ready() {
		return nil, errors.New("identity service unavailable: no ready identity endpoint")
	}
	if idProxy != nil {
		idProxy.mu.Lock()
		chain, name := idProxy.chain, idProxy.identity
		idProxy.mu.Unlock()
		if chain == nil {
			return nil, errors.New("identity service unavailable: identity's proxy has no certificate")
		}
		if err := verifyChain(chain, p.roots, name, m.clock.Now()); err != nil {
			return nil, fmt.Errorf("TLS handshake with identity %s failed: %w", name, err)
		}
	}
	return id.certify(p)
}

// ownerDeployment infers the Deployment of a pod from its ReplicaSet owner and template hash.
func ownerDeployment(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "ReplicaSet" {
			if h := pod.Labels["pod-template-hash"]; h != "" {
				return strings.TrimSuffix(o.Name, "-"+h)
			}
			return o.Name
		}
	}
	return ""
}

// PodState is the ground truth of one meshed pod's proxy.
type PodState struct {
	PodRef
	PodIP     string
	Workload  string // owning Deployment
	Component string // control-plane component, "" for application pods
	Identity  string
	// RootFingerprints are the SHA-256 of the DER of each root the proxy trusts (sorted).
	RootFingerprints []string
	// TrustRootSHA256 is the pod's linkerd.io/trust-root-sha256 annotation.
	TrustRootSHA256 string
	HasCertificate  bool
	LeafFingerprint string
	// IssuerFingerprint is the fingerprint of the certificate that signed the live leaf.
	IssuerFingerprint string
	LeafNotAfter      time.Time
	Refreshes         int // certificates accepted
	Rejections        int // certificates rejected for not chaining to the proxy's roots
	Failures          int // failed refreshes (rejections included)
	LastError         string
	Started           time.Time
}

// PodState returns the ground truth of the proxy of the pod with this UID; the zero PodState when
// it runs none.
func (m *Mesh) PodState(uid types.UID) PodState {
	m.mu.Lock()
	p := m.proxies[uid]
	m.mu.Unlock()
	if p == nil {
		return PodState{}
	}
	return p.state(m)
}

// Pods returns the ground truth of every running proxy, sorted by namespace and name.
func (m *Mesh) Pods() []PodState {
	m.mu.Lock()
	ps := make([]*proxy, 0, len(m.proxies))
	for _, p := range m.proxies {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	out := make([]PodState, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.state(m))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (p *proxy) state(m *Mesh) PodState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PodState{
		PodRef: p.pod, PodIP: p.podIP, Workload: p.workload, Component: p.component, Identity: p.identity,
		RootFingerprints: append([]string(nil), p.roots.fingerprints...), HasCertificate: p.chain != nil,
		Refreshes: p.refreshes, Rejections: p.rejections, Failures: p.failures, LastError: p.lastErr, Started: p.started,
	}
	if pod, err := m.pods.Pods(p.pod.Namespace).Get(p.pod.Name); err == nil && pod.UID == p.pod.UID {
		s.TrustRootSHA256 = pod.Annotations[AnnotationTrustRootHash]
	}
	if p.chain != nil {
		s.LeafFingerprint = Fingerprint(p.chain[0])
		s.LeafNotAfter = p.chain[0].NotAfter
		if len(p.chain) > 1 {
			s.IssuerFingerprint = Fingerprint(p.chain[1])
		}
	}
	return s
}

// LiveChain returns a pod's live certificate chain (leaf first), nil if it has none.
func (m *Mesh) LiveChain(uid types.UID) []*x509.Certificate {
	m.mu.Lock()
	p := m.proxies[uid]
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*x509.Certificate(nil), p.chain...)
}

// Identities returns the ground truth of every identity controller.
func (m *Mesh) Identities() []IdentityState {
	m.mu.Lock()
	ids := make([]identityController, 0, len(m.identities))
	for _, id := range m.identities {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	out := make([]IdentityState, 0, len(ids))
	for _, id := range ids {
		out = append(out, id.state())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.Name < out[j].Pod.Name })
	return out
}

// Injectors returns the ground truth of every proxy-injector.
func (m *Mesh) Injectors() []InjectorState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]InjectorState, 0, len(m.injectors))
	for _, in := range m.injectors {
		s := InjectorState{Pod: in.pod}
		if v := in.view(); v != "" {
			s.BundleSHA256 = BundleSHA256(v)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.Name < out[j].Pod.Name })
	return out
}

// Pending returns the pods whose simulated containers could not start yet, with the reason.
func (m *Mesh) Pending() map[PodRef]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[PodRef]string{}
	for uid, why := range m.pending {
		for _, p := range m.podsByUID(uid) {
			out[PodRef{Namespace: p.Namespace, Name: p.Name, UID: uid}] = why
		}
	}
	return out
}

// ProxyStarts is how many proxies have started for pods of a Deployment (one per pod).
func (m *Mesh) ProxyStarts(namespace, deployment string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proxyStarts[namespace+"/"+deployment]
}

// Restarts is how many times RolloutRestart was called for a Deployment through this mesh.
func (m *Mesh) Restarts(namespace, deployment string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarts[namespace+"/"+deployment]
}

// WaitForCertificates waits, by observing the proxies, until every running meshed pod that
// match selects (nil: all) holds a certificate, and at least min pods match.
func (m *Mesh) WaitForCertificates(ctx context.Context, min int, match func(PodState) bool) error {
	for {
		n, missing := 0, ""
		for _, s := range m.Pods() {
			if match != nil && !match(s) {
				continue
			}
			n++
			if !s.HasCertificate && missing == "" {
				missing = s.PodRef.String() + " (" + s.LastError + ")"
			}
		}
		if n >= min && missing == "" {
			return nil
		}
		// Every certificate installed triggers an oracle check, so its status channel is the
		// change notification to wait on.
		o := m.oracle
		o.mu.Lock()
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for certificates (%d pods matched, want ≥ %d; first without certificate: %s): %w", n, min, missing, ctx.Err())
		case <-ch:
		}
	}
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
