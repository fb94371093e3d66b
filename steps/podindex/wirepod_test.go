package podindex

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
)

// wirePods are pods of every shape SlimPod tells apart, with fields it does not read around
// those it does: both proxy layouts, a control-plane pod restarted in place, a terminating pod,
// a bare pod, an owner that is not the controller, refresh bounds from the env (one read from a
// field reference), a pod without an IP yet, a pod that ended.
func wirePods() map[string]*corev1.Pod {
	pods := map[string]*corev1.Pod{}
	full := func(pod *corev1.Pod) *corev1.Pod {
		pod.CreationTimestamp = metav1.Date(2026, 6, 1, 12, 0, 1, 0, time.UTC)
		pod.Generation = 3
		pod.Finalizers = []string{"example.com/keep"}
		pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}}}
		proxy, _ := steps.ProxyContainer(&pod.Spec)
		proxy.Env = append(proxy.Env,
			corev1.EnvVar{Name: "LINKERD2_PROXY_LOG", Value: "warn"},
			corev1.EnvVar{Name: steps.MinRefreshEnv, Value: "5m"},
			corev1.EnvVar{Name: "_pod_ns", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			corev1.EnvVar{Name: steps.MaxRefreshEnv, Value: "1h"})
		proxy.Resources.Limits = corev1.ResourceList{}
		pod.Spec.Volumes = []corev1.Volume{{Name: "linkerd-identity-end-entity", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: "web", Image: "example/web:1", ContainerID: "containerd://1", Ready: true, RestartCount: 2,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Date(2026, 6, 1, 12, 0, 3, 0, time.UTC)}}})
		return pod
	}
	pods["sidecar"] = full(injectedPod())
	pods["sidecar restarted"] = full(injectedPod())
	pods["sidecar restarted"].Status.ContainerStatuses = append(pods["sidecar restarted"].Status.ContainerStatuses,
		corev1.ContainerStatus{Name: steps.ProxyContainerName, RestartCount: 4})
	pods["native sidecar"] = full(nativeSidecarPod())
	pods["native sidecar"].Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "linkerd-init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		{Name: steps.ProxyContainerName, RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Date(2026, 6, 1, 12, 0, 2, 0, time.UTC)}}}}
	cp := full(nativeSidecarPod())
	cp.Namespace, cp.Name = "linkerd", "linkerd-identity-6d4cf56db6-x7k2p"
	cp.Labels[steps.ControlPlaneComponentLabel] = "identity"
	cp.Annotations[steps.RestartedAtAnnotation] = "2026-06-01T12:00:00.5Z"
	cp.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.Date(2026, 6, 1, 13, 0, 0, 0, time.UTC)
	pods["control plane"] = cp
	terminating := full(injectedPod())
	terminating.DeletionTimestamp = ptr.To(metav1.Date(2026, 6, 1, 14, 0, 0, 0, time.UTC))
	terminating.DeletionGracePeriodSeconds = ptr.To[int64](30)
	pods["terminating"] = terminating
	bare := full(injectedPod())
	bare.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "1"}}
	pods["bare"] = bare
	sts := full(injectedPod())
	sts.OwnerReferences = append(sts.OwnerReferences[:0],
		metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "1", Controller: ptr.To(false)},
		metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "2", Controller: ptr.To(true)})
	delete(sts.Labels, "pod-template-hash")
	pods["statefulset"] = sts
	pending := full(injectedPod())
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending}
	pods["pending"] = pending
	ended := full(injectedPod())
	ended.Status.Phase = corev1.PodSucceeded
	pods["ended"] = ended
	unmeshed := injectedPod()
	unmeshed.Spec.Containers = unmeshed.Spec.Containers[1:]
	pods["not meshed"] = unmeshed
	fromRef := full(injectedPod())
	fromRef.Spec.Containers[0].Env = append(fromRef.Spec.Containers[0].Env, corev1.EnvVar{Name: steps.MaxRefreshEnv,
		ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "refresh"}}})
	pods["refresh from a reference"] = fromRef
	return pods
}

// TestWirePodReadsWhatSlimPodReads: for every shape of pod, SlimPod of the pod decoded by
// WirePod from the apiserver's protobuf equals SlimPod of the pod decoded in full, and the
// informer reads the same metadata.
func TestWirePodReadsWhatSlimPodReads(t *testing.T) {
	cfg := steps.DefaultConfig()
	for name, pod := range wirePods() {
		t.Run(name, func(t *testing.T) {
			data, err := pod.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var full corev1.Pod
			if err := full.Unmarshal(data); err != nil {
				t.Fatal(err)
			}
			var wire WirePod
			if err := wire.Unmarshal(data); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if want, got := SlimPod(cfg, &full), SlimPod(cfg, &wire.Pod); !reflect.DeepEqual(got, want) {
				t.Errorf("SlimPod of the WirePod:\n got %+v\nwant %+v", got, want)
			}
			if got, want := wire.ResourceVersion, full.ResourceVersion; got != want {
				t.Errorf("resourceVersion %q, want %q", got, want)
			}
			if len(wire.Spec.Containers)+len(wire.Spec.InitContainers) > 1 || len(wire.ManagedFields) > 0 || len(wire.Labels) > 3 {
				t.Errorf("kept more than the rotation reads: %+v", wire.Pod)
			}
		})
	}
}

// TestWireSchemeDecodesWhatTheApiserverSends: the apiserver's protobuf (the envelope of a Pod, a
// PodList with a continuation, a watch event and a bookmark ending a watch-list's initial
// events) decodes through the WireScheme into WirePods, and JSON still decodes in full.
func TestWireSchemeDecodesWhatTheApiserverSends(t *testing.T) {
	encode := func(obj runtime.Object) []byte {
		var buf bytes.Buffer
		if err := protobuf.NewSerializer(kube.Scheme, kube.Scheme).Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	typed := func(pod *corev1.Pod) *corev1.Pod {
		pod.APIVersion, pod.Kind = "v1", "Pod"
		return pod
	}
	decoder := serializer.NewCodecFactory(WireScheme()).UniversalDeserializer()
	pod := typed(wirePods()["native sidecar"])
	obj, _, err := decoder.Decode(encode(pod), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wire, ok := obj.(*WirePod)
	if !ok || wire.Name != pod.Name || wire.Spec.InitContainers[0].Name != steps.ProxyContainerName {
		t.Fatalf("decoded %T %+v, want the WirePod of %s", obj, obj, pod.Name)
	}

	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "99", Continue: "next", RemainingItemCount: ptr.To[int64](7)},
		Items:    []corev1.Pod{*wirePods()["sidecar"], *wirePods()["control plane"]}}
	into := &WirePodList{}
	if _, _, err := decoder.Decode(encode(list), nil, into); err != nil {
		t.Fatal(err)
	}
	if into.ResourceVersion != "99" || into.Continue != "next" || into.RemainingItemCount == nil || *into.RemainingItemCount != 7 ||
		len(into.Items) != 2 || into.Items[1].Labels[steps.ControlPlaneComponentLabel] != "identity" {
		t.Errorf("PodList decoded as %+v", into)
	}

	bookmark := typed(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "100",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	event := &metav1.WatchEvent{Type: "BOOKMARK", Object: runtime.RawExtension{Raw: encode(bookmark)}}
	raw, err := event.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var got metav1.WatchEvent
	if err := got.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	obj, _, err = decoder.Decode(got.Object.Raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := obj.(*WirePod); !ok || b.ResourceVersion != "100" || b.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("a bookmark decoded as %T %+v: the reflector reads its resourceVersion and annotation", obj, obj)
	}

	js, err := runtime.Encode(serializer.NewCodecFactory(kube.Scheme).LegacyCodec(corev1.SchemeGroupVersion), pod)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON corev1.Pod
	if _, _, err := serializer.NewCodecFactory(kube.Scheme).UniversalDeserializer().Decode(js, nil, &fromJSON); err != nil {
		t.Fatal(err)
	}
	obj, _, err = decoder.Decode(js, nil, nil)
	if j, ok := obj.(*WirePod); err != nil || !ok || !reflect.DeepEqual(j.Spec, fromJSON.Spec) || len(j.Spec.Volumes) == 0 {
		t.Errorf("JSON decoded as %T (%v), want the WirePod of the whole pod", obj, err)
	}
}

// TestWirePodRejectsWhatIsNotAPod: every truncation of a pod's protobuf is an error or a pod,
// never a panic, and a truncated field is an error.
func TestWirePodRejectsWhatIsNotAPod(t *testing.T) {
	data, err := wirePods()["control plane"].Marshal()
	if err != nil {
		t.Fatal(err)
	}
	errs := 0
	for n := range len(data) {
		var p WirePod
		if p.Unmarshal(data[:n]) != nil {
			errs++
		}
	}
	if errs == 0 {
		t.Error("no truncation of a pod's protobuf was an error")
	}
	var p WirePod
	if err := p.Unmarshal([]byte{0x0a, 0x05, 0x0a}); err == nil {
		t.Error("a field longer than the message decoded without error")
	}
	if err := p.Unmarshal([]byte{0x0b}); err == nil {
		t.Error("a group (wire type 3) decoded without error")
	}
}

// benchPod is wirePods' native sidecar with what Linkerd's injector gives every proxy besides:
// its ~40 env vars, probes, mounts and resources, and the application's own env.
func benchPod() *corev1.Pod {
	pod := wirePods()["native sidecar"]
	proxy, _ := steps.ProxyContainer(&pod.Spec)
	for i := range 40 {
		proxy.Env = append(proxy.Env, corev1.EnvVar{Name: fmt.Sprintf("LINKERD2_PROXY_SETTING_%02d", i), Value: "svc.cluster.local.,10.0.0.0/8,100.64.0.0/10,172.16.0.0/12"})
	}
	proxy.Args = []string{"--identity-dir", "/var/run/linkerd/identity/end-entity"}
	proxy.VolumeMounts = []corev1.VolumeMount{{Name: "linkerd-identity-end-entity", MountPath: "/var/run/linkerd/identity/end-entity"},
		{Name: "linkerd-identity-token", MountPath: "/var/run/secrets/tokens"}}
	proxy.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(4191)}}}
	proxy.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromInt32(4191)}}}
	proxy.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("20Mi")}
	for i := range 10 {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("APP_%d", i), Value: "value"})
	}
	return pod
}

// BenchmarkPodDecode compares decoding a meshed pod's protobuf in full with decoding it as a
// WirePod, each alone ("…/decode") and followed by SlimPod, as the informer's transform does.
func BenchmarkPodDecode(b *testing.B) {
	cfg := steps.DefaultConfig()
	data, err := benchPod().Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []struct {
		name   string
		decode func() (*corev1.Pod, error)
	}{
		{"full", func() (*corev1.Pod, error) { var pod corev1.Pod; return &pod, pod.Unmarshal(data) }},
		{"wire", func() (*corev1.Pod, error) { var pod WirePod; return &pod.Pod, pod.Unmarshal(data) }},
	} {
		for _, slim := range []bool{false, true} {
			name := d.name + "/decode"
			if slim {
				name = d.name + "/SlimPod"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					pod, err := d.decode()
					if err != nil {
						b.Fatal(err)
					}
					if slim {
						_ = SlimPod(cfg, pod)
					}
				}
			})
		}
	}
}
