package meshsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// injectorProc simulates the proxy-injector container of one injector pod. Its view of the trust
// bundle is the file /var/run/linkerd/identity/trust-roots/ca-bundle.crt of its ConfigMap volume:
// the ConfigMap value at pod start, refreshed by the kubelet some time after the ConfigMap
// changes (Config.VolumeRefreshDelay).
type injectorProc struct {
	mesh *Mesh
	pod  PodRef

	mu      sync.Mutex
	bundle  string
	timers  []clock.Timer
	stopped bool
	// terminating: its pod is being deleted; its container still runs (the grace period), but
	// its endpoint is no longer ready, so the Service sends it no more admission calls.
	terminating bool
	// run is Linkerd's own proxy injector in real-Linkerd mode (realinjector.go): it answers
	// the admission calls, reading the file this type's bundle stands for. nil: simulated.
	run *injectorRun
}

func (in *injectorProc) isStopped() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stopped
}

// ready says whether the Service would send it admission calls: it sees a bundle and, when it is
// Linkerd's own, its readiness probe passed.
func (in *injectorProc) ready() bool {
	return in.view() != "" && (in.run == nil || in.run.ready())
}

func (in *injectorProc) setTerminating() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.terminating = true
}

func (in *injectorProc) isTerminating() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.terminating
}

// InjectorState is the ground truth of one proxy-injector.
type InjectorState struct {
	Pod          PodRef
	BundleSHA256 string // sha256 of the bundle it injects now
}

func (in *injectorProc) configMapChanged() {
	d := in.mesh.cfg.VolumeRefreshDelay
	if d < 0 {
		return // Never: only a restart shows the new value
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopped {
		return
	}
	in.timers = append(in.timers, in.mesh.clock.AfterFunc(d, func() {
		v, ok := in.mesh.configMapValue(in.mesh.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
		in.mu.Lock()
		defer in.mu.Unlock()
		if ok && !in.stopped && v != in.bundle {
			in.bundle = v
			klog.V(2).InfoS("Proxy-injector sees a new trust bundle", "pod", in.pod, "sha256", BundleSHA256(v))
			if in.run != nil {
				in.run.refreshTrustRoots(v)
			}
		}
	}))
}

func (in *injectorProc) view() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.bundle
}

func (in *injectorProc) stop() {
	in.mu.Lock()
	in.stopped = true
	for _, t := range in.timers {
		t.Stop()
	}
	in.mu.Unlock()
	if in.run != nil {
		in.run.stop()
	}
}

// webhook is the HTTPS admission server registered with the apiserver by URL.
type webhook struct {
	srv    *http.Server
	lis    net.Listener
	caPEM  []byte
	url    string
	done   chan struct{}
	rrNext int
	mu     sync.Mutex
}

func startWebhook(m *Mesh) (*webhook, error) {
	cert, caPEM, err := selfSignedServingCert()
	if err != nil {
		return nil, fmt.Errorf("making the proxy-injector serving certificate: %w", err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("listening for the proxy-injector webhook: %w", err)
	}
	w := &webhook{lis: lis, caPEM: caPEM, url: "https://" + lis.Addr().String() + "/", done: make(chan struct{})}
	w.srv = &http.Server{Handler: http.HandlerFunc(m.serveAdmission), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(w.done)
		_ = w.srv.Serve(lis)
	}()
	return w, nil
}

func (w *webhook) close() {
	_ = w.srv.Close()
	<-w.done
}

func selfSignedServingCert() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "linkerd-proxy-injector.linkerd.svc"},
		DNSNames:     []string{"linkerd-proxy-injector.linkerd.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	c, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}, []byte(EncodeCertificates(c)), nil
}

// registerWebhook creates or updates the MutatingWebhookConfiguration with Linkerd's selectors:
// every pod CREATE outside kube-system / cert-manager and namespaces that disable admission
// webhooks, control-plane pods excluded by label; the decision to inject is taken in the handler.
func (m *Mesh) registerWebhook(ctx context.Context) error {
	policy := m.cfg.WebhookFailurePolicy
	sideEffects := admissionregistrationv1.SideEffectClassNone
	scope := admissionregistrationv1.NamespacedScope
	timeout := int32(10)
	url := m.webhook.url
	want := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName, Labels: map[string]string{
			LabelControlPlaneComponent: ComponentProxyInjector, LabelControlPlaneNS: m.cfg.LinkerdNamespace}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         webhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: m.webhook.caPEM},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "config.linkerd.io/admission-webhooks", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}},
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "cert-manager"}},
			}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: LabelControlPlaneComponent, Operator: metav1.LabelSelectorOpDoesNotExist},
				{Key: "linkerd.io/cni-resource", Operator: metav1.LabelSelectorOpDoesNotExist},
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods"}, Scope: &scope},
			}},
			FailurePolicy:           &policy,
			SideEffects:             &sideEffects,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	api := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cur, err := api.Get(ctx, WebhookConfigName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		want.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering mutatingwebhookconfiguration %s: %w", WebhookConfigName, err)
	}
	return nil
}

func (m *Mesh) unregisterWebhook() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, WebhookConfigName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Deleting the proxy-injector webhook configuration", "name", WebhookConfigName)
	}
}

// serveAdmission is the webhook handler. While no injector pod runs, it fails the call (as the
// apiserver's call to a Service without endpoints fails), so failurePolicy decides.
func (m *Mesh) serveAdmission(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "malformed AdmissionReview", http.StatusBadRequest)
		return
	}
	req := review.Request
	var inj *injectorProc
	if m.real != nil {
		inj = m.awaitInjector(r.Context())
	}
	if inj == nil {
		inj = m.pickInjector(true)
	}
	if inj != nil && inj.run != nil {
		inj.run.admit(w, r, body)
		return
	}
	if inj == nil {
		klog.V(2).InfoS("Admission call failed: no proxy-injector pod is running", "namespace", req.Namespace)
		http.Error(w, "no endpoints available for service linkerd-proxy-injector", http.StatusServiceUnavailable)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind == "Pod" && req.Operation == admissionv1.Create {
		var pod corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			http.Error(w, "malformed pod", http.StatusBadRequest)
			return
		}
		patch, err := m.injectPatch(&pod, req.Namespace, inj.view())
		if err != nil {
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: err.Error()}
		} else if patch != nil {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	out, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// awaitInjector picks a ready proxy injector whose pod is not terminating and, while one is
// still starting, waits for it, for a little less than the webhook's timeout. Linkerd's own
// injector serves a second or so after its container starts (its informers sync first), and
// kwok marks a pod Ready as soon as it runs: a rollout of linkerd-proxy-injector then deletes
// the old pod before the new container serves, where a kubelet would hold the new pod unready
// and the rollout the old one, still serving, until it does. Waiting here stands for that; the
// terminating pod's injector, with the volume of before the rollout, is left for when no other
// is starting (nil).
func (m *Mesh) awaitInjector(ctx context.Context) *injectorProc {
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if inj := m.pickInjector(false); inj != nil {
			return inj
		}
		m.mu.Lock()
		starting := false
		for _, in := range m.injectors {
			starting = starting || !in.isTerminating() && !in.ready()
		}
		m.mu.Unlock()
		if !starting {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// pickInjector chooses a Running injector like a Service does (round robin over ready
// endpoints); a terminating one only when allowed, and no other is ready.
func (m *Mesh) pickInjector(allowTerminating bool) *injectorProc {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A terminating pod's endpoint is not ready: the Service routes to it only when no other
	// injector is there to take the call.
	var ready, terminating []*injectorProc
	for _, in := range m.injectors {
		switch {
		case !in.ready():
		case in.isTerminating():
			terminating = append(terminating, in)
		default:
			ready = append(ready, in)
		}
	}
	if len(ready) == 0 && allowTerminating {
		ready = terminating
	}
	if len(ready) == 0 {
		return nil
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].pod.UID < ready[j].pod.UID })
	m.webhook.mu.Lock()
	defer m.webhook.mu.Unlock()
	m.webhook.rrNext++
	return ready[m.webhook.rrNext%len(ready)]
}

// shouldInject reproduces linkerd2 pkg/inject: the pod's linkerd.io/inject annotation wins over
// its namespace's; "enabled" and "ingress" inject; pods that already have a proxy, host-network
// pods and pods of kube-system and the control-plane namespace are never injected.
func (m *Mesh) shouldInject(pod *corev1.Pod, ns *corev1.Namespace) bool {
	if ns == nil || ns.Name == "kube-system" || ns.Name == m.cfg.LinkerdNamespace {
		return false
	}
	if pod.Spec.HostNetwork || ProxyOf(pod) != nil {
		return false
	}
	mode, ok := pod.Annotations[AnnotationInject]
	if !ok {
		mode = ns.Annotations[AnnotationInject]
	}
	return mode == "enabled" || mode == "ingress"
}

// injectPatch returns the JSON patch that meshes the pod, or nil if it is not to be injected.
func (m *Mesh) injectPatch(pod *corev1.Pod, namespace, bundle string) ([]byte, error) {
	ns, err := m.namespaces.Get(namespace)
	if err != nil {
		ns, err = m.client.CoreV1().Namespaces().Get(context.Background(), namespace, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
		}
	}
	return m.patchFor(pod, ns, bundle)
}

// patchFor returns the JSON patch that meshes the pod of namespace ns with the given bundle, or
// nil if it is not to be injected.
func (m *Mesh) patchFor(pod *corev1.Pod, ns *corev1.Namespace, bundle string) ([]byte, error) {
	namespace := ns.Name
	if !m.shouldInject(pod, ns) {
		return nil, nil
	}
	extra, err := additionalEnv(ns.Annotations[AnnotationAdditionalEnv], pod.Annotations[AnnotationAdditionalEnv])
	if err != nil {
		klog.InfoS("Ignoring invalid proxy-additional-env annotation", "namespace", namespace, "err", err)
	}
	m.mu.Lock()
	if m.ignoreAdditionalEnv {
		extra = nil // a Linkerd before edge-26.4.3 does not know the annotation
	}
	m.mu.Unlock()
	native := nativeSidecar(!m.cfg.ProxyAsContainer, ns.Annotations, pod.Annotations)
	c := m.proxyContainer(corev1.EnvVar{Name: EnvTrustAnchors, Value: strings.TrimSpace(bundle) + "\n"}, extra, native)
	var ops []map[string]any
	add := func(path string, v any) { ops = append(ops, map[string]any{"op": "add", "path": path, "value": v}) }
	annotations := map[string]string{
		AnnotationTrustRootHash:    BundleSHA256(bundle),
		AnnotationProxyVersion:     m.cfg.ProxyVersion,
		AnnotationCreatedBy:        "linkerd/proxy-injector " + m.cfg.ProxyVersion,
		"linkerd.io/identity-mode": "default",
	}
	labels := map[string]string{LabelControlPlaneNS: m.cfg.LinkerdNamespace, LabelWorkloadNS: namespace}
	addMap := func(base string, cur, add2 map[string]string) {
		if cur == nil {
			add(base, add2)
			return
		}
		for k, v := range add2 {
			add(base+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), v)
		}
	}
	addMap("/metadata/annotations", pod.Annotations, annotations)
	addMap("/metadata/labels", pod.Labels, labels)
	// charts/patch/templates/patch.json: a native sidecar goes first among the init containers
	// (after proxy-init, which this simulated CNI-mode mesh does not inject), so that later init
	// containers already run behind the proxy; otherwise, with Helm's default proxy.await: true,
	// the proxy becomes the first container, so the kubelet starts it before the application.
	switch {
	case !native:
		add("/spec/containers/0", c)
	case len(pod.Spec.InitContainers) == 0:
		add("/spec/initContainers", []corev1.Container{c})
	default:
		add("/spec/initContainers/0", c)
	}
	return json.Marshal(ops)
}

// nativeSidecar decides the proxy's layout as linkerd2 pkg/inject does: the namespace's config
// annotations apply where the workload has none of the same key (AppendNamespaceAnnotations,
// which inherits the GA and alpha keys, not the beta one), then config.linkerd.io wins over
// config.beta.linkerd.io over config.alpha.linkerd.io (applyAnnotationOverrides); a value that
// is not a boolean is ignored. def is Helm's proxy.nativeSidecar.
func nativeSidecar(def bool, nsAnn, podAnn map[string]string) bool {
	ann := map[string]string{}
	for k, v := range podAnn {
		ann[k] = v
	}
	for _, k := range []string{AnnotationNativeSidecar, AnnotationNativeSidecarAlpha} {
		if v, ok := nsAnn[k]; ok {
			if _, own := podAnn[k]; !own {
				ann[k] = v
			}
		}
	}
	for _, k := range []string{AnnotationNativeSidecar, AnnotationNativeSidecarBeta, AnnotationNativeSidecarAlpha} {
		if v, ok := ann[k]; ok {
			if b, err := strconv.ParseBool(v); err == nil {
				return b
			}
			return def
		}
	}
	return def
}

// proxyContainer renders the linkerd-proxy container (charts/partials _proxy.tpl): the identity
// name from the downward API, trust anchors, optional refresh bounds, then the additional env
// merged by name; a native sidecar gets restartPolicy: Always.
func (m *Mesh) proxyContainer(anchors corev1.EnvVar, extra []corev1.EnvVar, native bool) corev1.Container {
	env := []corev1.EnvVar{
		{Name: "_pod_name", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "_pod_ns", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "_pod_sa", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
		{Name: "_l5d_ns", Value: m.cfg.LinkerdNamespace},
		{Name: "_l5d_trustdomain", Value: m.cfg.TrustDomain},
		{Name: "LINKERD2_PROXY_IDENTITY_DIR", Value: "/var/run/linkerd/identity/end-entity"},
		anchors,
		{Name: "LINKERD2_PROXY_IDENTITY_TOKEN_FILE", Value: "/var/run/secrets/tokens/linkerd-identity-token"},
		{Name: "LINKERD2_PROXY_IDENTITY_SVC_ADDR", Value: "linkerd-identity-headless." + m.cfg.LinkerdNamespace + ".svc.cluster.local.:8080"},
		// The chart writes the namespace and trust domain in; only the pod's own names are
		// $(VAR) references (charts/partials _proxy.tpl).
		{Name: EnvLocalName, Value: "$(_pod_sa).$(_pod_ns).serviceaccount.identity." + m.cfg.LinkerdNamespace + "." + m.cfg.TrustDomain},
		{Name: "LINKERD2_PROXY_IDENTITY_SVC_NAME", Value: IdentityName("linkerd-identity", m.cfg.LinkerdNamespace, m.cfg.LinkerdNamespace, m.cfg.TrustDomain)},
	}
	if m.cfg.ProxyMinRefresh > 0 {
		env = append(env, corev1.EnvVar{Name: EnvMinRefresh, Value: FormatProxyDuration(m.cfg.ProxyMinRefresh)})
	}
	if m.cfg.ProxyMaxRefresh > 0 {
		env = append(env, corev1.EnvVar{Name: EnvMaxRefresh, Value: FormatProxyDuration(m.cfg.ProxyMaxRefresh)})
	}
	env = mergeEnv(env, extra)
	var restart *corev1.ContainerRestartPolicy
	if native {
		always := corev1.ContainerRestartPolicyAlways
		restart = &always
	}
	return corev1.Container{
		Name:  ProxyContainerName,
		Image: "cr.l5d.io/linkerd/proxy:" + m.cfg.ProxyVersion,
		Ports: []corev1.ContainerPort{
			{Name: "linkerd-proxy", ContainerPort: 4143},
			{Name: AdminPortName, ContainerPort: AdminPort},
		},
		Env:           env,
		RestartPolicy: restart,
	}
}

// additionalEnv parses config.linkerd.io/proxy-additional-env from the namespace and the
// workload (pod template), the workload's entries overriding the namespace's by name.
func additionalEnv(nsValue, podValue string) ([]corev1.EnvVar, error) {
	var errs []error
	parse := func(s string) []corev1.EnvVar {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		var env []corev1.EnvVar
		if err := json.Unmarshal([]byte(s), &env); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", AnnotationAdditionalEnv, err))
			return nil
		}
		return env
	}
	return mergeEnv(parse(nsValue), parse(podValue)), errors.Join(errs...)
}

// mergeEnv overrides base's variables by name with over's, appending new ones in order.
func mergeEnv(base, over []corev1.EnvVar) []corev1.EnvVar {
	out := append([]corev1.EnvVar(nil), base...)
	for _, e := range over {
		replaced := false
		for i := range out {
			if out[i].Name == e.Name {
				out[i], replaced = e, true
				break
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}
