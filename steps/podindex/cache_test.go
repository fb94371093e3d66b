package podindex

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
)

// injectedPod is a meshed pod as Linkerd's proxy-injector and a Deployment leave it.
func injectedPod() *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-6d4cf56db6-x7k2p", Namespace: "shop", UID: "0b5f0c1e-4d7e-4a53-9a70-6f0e8c1f2a11", ResourceVersion: "4711",
			Labels: map[string]string{"app": "web", "pod-template-hash": "6d4cf56db6", steps.ControlPlaneNSLabel: "linkerd",
				"linkerd.io/proxy-deployment": "web", "linkerd.io/workload-ns": "shop"},
			Annotations: map[string]string{steps.TrustRootSHA256Annotation: "3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
				"linkerd.io/created-by": "linkerd/proxy-injector", "linkerd.io/proxy-version": "stable", "linkerd.io/identity-mode": "default"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4cf56db6", UID: "7c1b", Controller: &yes}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "web",
			Containers: []corev1.Container{
				{Name: "linkerd-proxy", Image: "cr.l5d.io/linkerd/proxy:stable", Ports: []corev1.ContainerPort{
					{Name: "linkerd-proxy", ContainerPort: 4143}, {Name: steps.AdminPortName, ContainerPort: 4191}}},
				{Name: "web", Image: "example/web:1"},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.3.17"},
	}
}

// nativeSidecarPod is injectedPod as Linkerd edge-26.5.2 and later inject it: the proxy is an init
// container with restartPolicy Always, and spec.containers holds only the application.
func nativeSidecarPod() *corev1.Pod {
	pod := injectedPod()
	always := corev1.ContainerRestartPolicyAlways
	proxy := pod.Spec.Containers[0]
	proxy.RestartPolicy = &always
	pod.Spec.InitContainers = []corev1.Container{{Name: "linkerd-init", Image: "cr.l5d.io/linkerd/proxy-init:v2"}, proxy}
	pod.Spec.Containers = pod.Spec.Containers[1:]
	return pod
}

// TestSlimPodKnowsWhenAControlPlanePodStarted: a control-plane pod's start is its containers'
// latest start (a container restarted in place read its configuration again), its creation
// while none runs; and the template restart it came from. TransformPod keeps both.
func TestSlimPodKnowsWhenAControlPlanePodStarted(t *testing.T) {
	cfg := steps.DefaultConfig()
	pod := nativeSidecarPod()
	pod.Namespace, pod.Name = "linkerd", "linkerd-identity-6d4cf56db6-x7k2p"
	pod.Labels[steps.ControlPlaneComponentLabel] = "identity"
	pod.Annotations[steps.RestartedAtAnnotation] = "2026-06-01T12:00:00.5Z"
	created := metav1.Date(2026, 6, 1, 12, 0, 1, 0, time.UTC)
	pod.CreationTimestamp = created
	if got := SlimPod(cfg, pod); !got.Started.Equal(created.Time) || got.RestartedAt != "2026-06-01T12:00:00.5Z" {
		t.Fatalf("no container runs: Started %v RestartedAt %q, want the creation %v and the annotation", got.Started, got.RestartedAt, created)
	}
	restarted := metav1.Date(2026, 6, 1, 13, 0, 0, 0, time.UTC)
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "linkerd-proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Date(2026, 6, 1, 12, 0, 2, 0, time.UTC)}}}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "identity", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: restarted}}}}
	for name, get := range map[string]func() *Pod{
		"SlimPod": func() *Pod { return SlimPod(cfg, pod) },
		"SlimPod(TransformPod)": func() *Pod {
			slim, err := TransformPod(pod)
			if err != nil {
				t.Fatal(err)
			}
			return SlimPod(cfg, slim.(*corev1.Pod))
		},
	} {
		if got := get(); !got.Started.Equal(restarted.Time) || got.RestartedAt != "2026-06-01T12:00:00.5Z" {
			t.Errorf("%s: Started %v RestartedAt %q, want the identity container's restart %v", name, got.Started, got.RestartedAt, restarted)
		}
	}
	pod.Labels = map[string]string{steps.ControlPlaneNSLabel: "linkerd"}
	if got := SlimPod(cfg, pod); got.ControlPlaneStart != nil {
		t.Errorf("a data-plane pod: Started %v RestartedAt %q, want neither kept", got.Started, got.RestartedAt)
	}
}

func TestSlimPodFindsTheProxyInEitherLayout(t *testing.T) {
	cfg := steps.DefaultConfig()
	for name, tc := range map[string]struct {
		pod        *corev1.Pod
		wantNative bool
	}{
		"native sidecar":  {nativeSidecarPod(), true},
		"proxy container": {injectedPod(), false},
	} {
		t.Run(name, func(t *testing.T) {
			proxy, _ := steps.ProxyContainer(&tc.pod.Spec)
			proxy.Env = append(proxy.Env, corev1.EnvVar{Name: steps.MaxRefreshEnv, Value: "5m"})
			status := corev1.ContainerStatus{Name: steps.ProxyContainerName, RestartCount: 2}
			if tc.wantNative {
				tc.pod.Status.InitContainerStatuses = append(tc.pod.Status.InitContainerStatuses, status)
			} else {
				tc.pod.Status.ContainerStatuses = append(tc.pod.Status.ContainerStatuses, status)
			}
			direct := SlimPod(cfg, tc.pod)
			if !direct.Meshed || direct.NativeSidecar != tc.wantNative || direct.AdminPort != 4191 {
				t.Errorf("SlimPod: meshed=%v native=%v adminPort=%d; want true %v 4191",
					direct.Meshed, direct.NativeSidecar, direct.AdminPort, tc.wantNative)
			}
			if direct.RefreshMin != steps.DefaultMinRefresh || direct.RefreshMax != 5*time.Minute || direct.ProxyRestarts != 2 {
				t.Errorf("SlimPod: refresh %v..%v, proxy restarts %d; want %v..5m and 2 from the proxy's env and status",
					direct.RefreshMin, direct.RefreshMax, direct.ProxyRestarts, steps.DefaultMinRefresh)
			}
			// The bench's informer strips pods with TransformPod first: what it keeps must still
			// say meshed, in the same layout, with the same admin port.
			slim, err := TransformPod(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := SlimPod(cfg, slim.(*corev1.Pod)); *got != *direct {
				t.Errorf("SlimPod(TransformPod(pod)) = %+v, want %+v", *got, *direct)
			}
		})
	}
	unmeshed := injectedPod()
	unmeshed.Spec.Containers = unmeshed.Spec.Containers[1:]
	if p := SlimPod(cfg, unmeshed); p.Meshed {
		t.Errorf("a pod with no linkerd-proxy container is meshed: %+v", *p)
	}
}

func TestPodTransform(t *testing.T) {
	cfg := steps.DefaultConfig()
	want := SlimPod(cfg, injectedPod())
	for name, obj := range map[string]any{"corev1.Pod": injectedPod(), "WirePod": &WirePod{Pod: *injectedPod()}} {
		got, err := PodTransform(cfg)(obj)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := got.(*Pod)
		if !ok {
			t.Fatalf("%s: transform returned %T, want *Pod", name, got)
		}
		if *p != *want {
			t.Errorf("%s: pod = %+v, want what SlimPod makes: %+v", name, *p, *want)
		}
		if key, err := podKey(obj); err != nil || key != p.Key() || key != "shop/web-6d4cf56db6-x7k2p" {
			t.Errorf("%s: key before the transform %q (%v), after %q; want shop/web-6d4cf56db6-x7k2p", name, key, err, p.Key())
		}
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "shop/x"}
	if got, _ := PodTransform(cfg)(tomb); got != tomb {
		t.Errorf("a tombstone was transformed into %v", got)
	}
}

// BenchmarkPodCache compares what the pod informer keeps per meshed pod: B/op is the memory
// one cached pod costs (what a 10,000-pod mesh costs, divided by 10,000).
func BenchmarkPodCache(b *testing.B) {
	cfg := steps.DefaultConfig()
	for name, transform := range map[string]func(any) (any, error){
		"stripped-corev1.Pod+Pod": func(obj any) (any, error) {
			slim, err := TransformPod(obj)
			_ = SlimPod(cfg, slim.(*corev1.Pod)) // the Index's copy
			return slim, err
		},
		"Pod": PodTransform(cfg),
	} {
		b.Run(name, func(b *testing.B) {
			pod := injectedPod()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = transform(pod)
			}
		})
	}
}

// BenchmarkPodCacheRetained reports what the operator holds per cached pod once the informer has
// decoded it (every string its own allocation, as from the wire) and the transform has run: the
// heap still reachable from 10,000 transformed pods after a GC, per pod.
func BenchmarkPodCacheRetained(b *testing.B) {
	cfg := steps.DefaultConfig()
	transform := PodTransform(cfg)
	wire, err := json.Marshal(injectedPod())
	if err != nil {
		b.Fatal(err)
	}
	const pods = 10000
	var perPod float64
	for b.Loop() {
		kept := make([]any, pods)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range kept {
			var p corev1.Pod
			if err := json.Unmarshal(wire, &p); err != nil {
				b.Fatal(err)
			}
			p.Name = fmt.Sprintf("web-6d4cf56db6-%05d", i)
			p.Spec.ServiceAccountName = fmt.Sprintf("web-%d", i%5)
			kept[i], _ = transform(&p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / pods
		runtime.KeepAlive(kept)
	}
	b.ReportMetric(perPod, "retained-B/pod")
}
