package meshsim

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

func b64lines(der []byte) string {
	s := base64.StdEncoding.EncodeToString(der)
	var b strings.Builder
	for len(s) > 64 {
		b.WriteString(s[:64] + "\n")
		s = s[64:]
	}
	return b.String() + s + "\n"
}

func TestRefreshIn(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := clk.Now()
	for _, tc := range []struct {
		name     string
		expiry   time.Time
		min, max time.Duration
		want     time.Duration
	}{
		{"no certificate yet", time.Time{}, 10 * time.Second, 24 * time.Hour, 10 * time.Second},
		{"expired", now.Add(-time.Second), 10 * time.Second, 24 * time.Hour, 10 * time.Second},
		{"70% of 24h20s", now.Add(24*time.Hour + 20*time.Second), 10 * time.Second, 24 * time.Hour, (24*time.Hour + 20*time.Second) * 7 / 10},
		{"clamped to max", now.Add(24 * time.Hour), 10 * time.Second, 5 * time.Minute, 5 * time.Minute},
		{"clamped to min", now.Add(5 * time.Second), 10 * time.Second, time.Hour, 10 * time.Second},
		{"short test lifetimes", now.Add(30 * time.Second), time.Second, time.Hour, 21 * time.Second},
	} {
		if got := RefreshIn(now, tc.expiry, tc.min, tc.max); got != tc.want {
			t.Errorf("%s: RefreshIn = %v, want %v", tc.name, got, tc.want)
		}
	}
	// As the clock advances on a certificate that could not be replaced, the retry comes sooner.
	expiry := now.Add(100 * time.Second)
	clk.Step(50 * time.Second)
	if got := RefreshIn(clk.Now(), expiry, time.Second, time.Hour); got != 35*time.Second {
		t.Errorf("after 50s: RefreshIn = %v, want 35s", got)
	}
}

func TestParseProxyDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, "500ms": 500 * time.Millisecond, "5m": 5 * time.Minute,
		"24h": 24 * time.Hour, "1d": 24 * time.Hour, "1m30s": 90 * time.Second} {
		got, err := ParseProxyDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseProxyDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseProxyDuration("soon"); err == nil {
		t.Error("ParseProxyDuration accepted garbage")
	}
	if FormatProxyDuration(1500*time.Millisecond) != "1500ms" || FormatProxyDuration(5*time.Minute) != "300s" {
		t.Error("FormatProxyDuration")
	}
}

func TestResolveEnvExpandsLikeTheKubelet(t *testing.T) {
	m := &Mesh{cfg: Config{LinkerdNamespace: "linkerd", TrustDomain: "cluster.local", ProxyVersion: "v"}}
	c := m.proxyContainer(corev1.EnvVar{Name: EnvTrustAnchors, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: TrustRootsConfigMap}, Key: TrustRootsKey}}}, nil, true)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "emojivoto"}, Spec: corev1.PodSpec{ServiceAccountName: "web"}}
	env, err := resolveEnv(pod, &c, func(ns, name, key string) (string, bool) {
		return "BUNDLE", ns == "emojivoto" && name == TrustRootsConfigMap && key == TrustRootsKey
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := env[EnvLocalName], "web.emojivoto.serviceaccount.identity.linkerd.cluster.local"; got != want {
		t.Errorf("identity name = %q, want %q", got, want)
	}
	if env[EnvTrustAnchors] != "BUNDLE" {
		t.Errorf("trust anchors = %q", env[EnvTrustAnchors])
	}
	if _, err := resolveEnv(pod, &c, func(string, string, string) (string, bool) { return "", false }); err == nil {
		t.Error("a missing ConfigMap key did not prevent the container from starting")
	}
}

// TestResolveEnvPodIPs: Linkerd's own injector (edge-26.8.3) sets LINKERD2_PROXY_INBOUND_IPS
// from status.podIPs, which the kubelet resolves to the pod's IPs joined by commas.
func TestResolveEnvPodIPs(t *testing.T) {
	c := corev1.Container{Env: []corev1.EnvVar{{Name: "LINKERD2_PROXY_INBOUND_IPS", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}}}}
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}}}
	env, err := resolveEnv(pod, &c, nil)
	if err != nil || env["LINKERD2_PROXY_INBOUND_IPS"] != "10.0.0.1,fd00::1" {
		t.Errorf("status.podIPs = %q, %v; want 10.0.0.1,fd00::1", env["LINKERD2_PROXY_INBOUND_IPS"], err)
	}
	pod.Status.PodIPs = nil
	if env, err = resolveEnv(pod, &c, nil); err != nil || env["LINKERD2_PROXY_INBOUND_IPS"] != "10.0.0.1" {
		t.Errorf("status.podIPs without podIPs = %q, %v; want the pod IP", env["LINKERD2_PROXY_INBOUND_IPS"], err)
	}
}

func TestNativeSidecarDecidedAsLinkerdDoes(t *testing.T) {
	const (
		ga, beta, alpha = AnnotationNativeSidecar, AnnotationNativeSidecarBeta, AnnotationNativeSidecarAlpha
	)
	cases := map[string]struct {
		def        bool
		ns, pod    map[string]string
		wantNative bool
	}{
		"current Linkerd's default is a native sidecar":       {def: true, wantNative: true},
		"proxy.nativeSidecar=false injects a container":       {def: false, wantNative: false},
		"a workload opts out":                                 {def: true, pod: map[string]string{ga: "false"}, wantNative: false},
		"a namespace opts out":                                {def: true, ns: map[string]string{ga: "false"}, wantNative: false},
		"the workload's annotation wins over its namespace's": {def: true, ns: map[string]string{ga: "false"}, pod: map[string]string{ga: "true"}, wantNative: true},
		"the GA key wins over the beta and alpha keys":        {def: false, pod: map[string]string{ga: "true", beta: "false", alpha: "false"}, wantNative: true},
		"the beta key wins over the alpha key":                {def: true, pod: map[string]string{beta: "false", alpha: "true"}, wantNative: false},
		"a namespace's GA key wins over the workload's alpha": {def: true, ns: map[string]string{ga: "true"}, pod: map[string]string{alpha: "false"}, wantNative: true},
		"a namespace's beta key is not inherited":             {def: true, ns: map[string]string{beta: "false"}, wantNative: true},
		"a value that is not a boolean is ignored":            {def: true, pod: map[string]string{ga: "nope", alpha: "false"}, wantNative: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := nativeSidecar(tc.def, tc.ns, tc.pod); got != tc.wantNative {
				t.Errorf("nativeSidecar = %v, want %v", got, tc.wantNative)
			}
		})
	}
}

func TestAdditionalEnvWorkloadOverNamespace(t *testing.T) {
	env, err := additionalEnv(`[{"name":"A","value":"ns"},{"name":"B","value":"ns"}]`, `[{"name":"B","value":"pod"},{"name":"C","value":"pod"}]`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range env {
		got[e.Name] = e.Value
	}
	if got["A"] != "ns" || got["B"] != "pod" || got["C"] != "pod" || len(env) != 3 {
		t.Errorf("merged env = %v", env)
	}
	m := &Mesh{cfg: Config{LinkerdNamespace: "linkerd", TrustDomain: "cluster.local", ProxyVersion: "v", ProxyMaxRefresh: time.Hour}}
	c := m.proxyContainer(corev1.EnvVar{Name: EnvTrustAnchors, Value: "x"}, []corev1.EnvVar{{Name: EnvMaxRefresh, Value: "5m"}}, false)
	n := 0
	for _, e := range c.Env {
		if e.Name == EnvMaxRefresh {
			n++
			if e.Value != "5m" {
				t.Errorf("additional env did not override %s: %q", EnvMaxRefresh, e.Value)
			}
		}
	}
	if n != 1 {
		t.Errorf("%s appears %d times", EnvMaxRefresh, n)
	}
	if _, err := additionalEnv(`not json`, ""); err == nil {
		t.Error("invalid JSON was not reported")
	}
}

func TestShouldInject(t *testing.T) {
	m := &Mesh{cfg: Config{LinkerdNamespace: "linkerd"}}
	ns := func(name, mode string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if mode != "" {
			n.Annotations = map[string]string{AnnotationInject: mode}
		}
		return n
	}
	pod := func(mode string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		if mode != "" {
			p.Annotations = map[string]string{AnnotationInject: mode}
		}
		return p
	}
	for _, tc := range []struct {
		ns   *corev1.Namespace
		pod  *corev1.Pod
		want bool
	}{
		{ns("app", "enabled"), pod(""), true},
		{ns("app", ""), pod("enabled"), true},
		{ns("app", "enabled"), pod("disabled"), false},
		{ns("app", ""), pod(""), false},
		{ns("app", "ingress"), pod(""), true},
		{ns("kube-system", "enabled"), pod("enabled"), false},
		{ns("linkerd", "enabled"), pod("enabled"), false},
	} {
		if got := m.shouldInject(tc.pod, tc.ns); got != tc.want {
			t.Errorf("ns %s %v, pod %v: shouldInject = %v", tc.ns.Name, tc.ns.Annotations, tc.pod.Annotations, got)
		}
	}
	hn := pod("enabled")
	hn.Spec.HostNetwork = true
	if m.shouldInject(hn, ns("app", "")) {
		t.Error("a host-network pod was injected")
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "x"}
	for in, want := range map[string]string{"$(A).$(B)": "x.$(B)", "$$(A)": "$(A)", "a$": "a$", "$(A": "$(A"} {
		if got := expandEnv(in, env); got != want {
			t.Errorf("expandEnv(%q) = %q, want %q", in, got, want)
		}
	}
}

// Keep json imported for helpers below.
var _ = json.Marshal
var _ types.UID
var _ x509.Certificate

// TestRolloutsCountStatefulSetsAndTheControlPlaneApart: a StatefulSet's restarts count as an
// application workload's, the control plane's in their own map, and a StatefulSet is rolling
// until its current revision is the update revision and every replica is ready.
func TestRolloutsCountStatefulSetsAndTheControlPlaneApart(t *testing.T) {
	r := newRollouts()
	h := r.handler("linkerd")
	replicas := int32(2)
	sts := func(restartedAt string, ready int32, current, update string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app-0", Name: "db-0", Generation: 1},
			Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
				Annotations: map[string]string{AnnotationRestartedAt: restartedAt}}}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, ReadyReplicas: ready, CurrentRevision: current, UpdateRevision: update},
		}
	}
	deploy := func(ns, name, restartedAt string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
				Annotations: map[string]string{AnnotationRestartedAt: restartedAt}}}}}
	}
	h.OnAdd(sts("", 2, "r1", "r1"), true)
	h.OnAdd(deploy("linkerd", IdentityDeployment, ""), true)
	h.OnUpdate(nil, sts("t1", 2, "r1", "r2"))
	if rolling := r.rolling["app-0/StatefulSet/db-0"]; !rolling {
		t.Error("a StatefulSet part-way through its rolling update is not rolling")
	}
	h.OnUpdate(nil, sts("t1", 1, "r2", "r2"))
	if rolling := r.rolling["app-0/StatefulSet/db-0"]; !rolling {
		t.Error("a StatefulSet with a replica not ready is not rolling")
	}
	h.OnUpdate(nil, sts("t1", 2, "r2", "r2"))
	h.OnUpdate(nil, deploy("linkerd", IdentityDeployment, "t1"))
	h.OnUpdate(nil, deploy("linkerd", IdentityDeployment, "t2"))
	m := &Mesh{rollouts: r}
	s := m.RolloutStats()
	if s.Restarts["app-0/StatefulSet/db-0"] != 1 || len(s.Restarts) != 1 {
		t.Errorf("application restarts %v, want the StatefulSet once", s.Restarts)
	}
	if s.ControlPlaneRestarts[IdentityDeployment] != 2 || len(s.ControlPlaneRestarts) != 1 {
		t.Errorf("control-plane restarts %v, want identity twice", s.ControlPlaneRestarts)
	}
	if s.MaxConcurrent != 1 {
		t.Errorf("MaxConcurrent = %d, want 1: the control plane does not count", s.MaxConcurrent)
	}
}

// TestAdmissionSkipsATerminatingInjector: a Service routes admission calls to ready endpoints,
// and a terminating pod's is not ready: an injector whose pod is being deleted (during the
// proxy-injector's rollout) takes no call while a new one runs, and takes them again only when it
// is the last one left.
func TestAdmissionSkipsATerminatingInjector(t *testing.T) {
	old := &injectorProc{pod: PodRef{Name: "injector-old", UID: "a"}, bundle: "old bundle"}
	cur := &injectorProc{pod: PodRef{Name: "injector-new", UID: "b"}, bundle: "new bundle"}
	m := &Mesh{injectors: map[types.UID]*injectorProc{"a": old, "b": cur}, webhook: &webhook{}}
	old.setTerminating()
	for i := 0; i < 4; i++ {
		if got := m.pickInjector(true); got != cur {
			t.Fatalf("call %d went to %s, want the running injector-new", i, got.pod.Name)
		}
	}
	delete(m.injectors, "b")
	if got := m.pickInjector(true); got != old {
		t.Fatalf("with injector-old alone, the call went to %v", got)
	}
}
