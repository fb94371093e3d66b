package podindex

import (
	"strings"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// MeshedPodSelector selects meshed pods: Linkerd's proxy-injector labels every pod it injects,
// and the control-plane pods, with linkerd.io/control-plane-ns. Watching only these keeps the
// operator's memory proportional to the mesh, not to the cluster.
const MeshedPodSelector = steps.ControlPlaneNSLabel

// Pod is what the rotation needs of a meshed pod. SlimPod turns a Pod into one in the
// informer's transform function, so the cache never holds full pod specs. The operator holds one
// per meshed pod: the bools are together and so are the int32s, so that a Pod takes 256 bytes,
// a size class of Go's allocator (TestPodSize), not 288.
type Pod struct {
	Namespace, Name string
	UID             string
	// Workload is "namespace/Kind/name" of the pod's restartable owner.
	Workload string
	// TemplateHash is the pod-template-hash label a Deployment's ReplicaSet gives its pods: the
	// template the pod was made from (Index.Replacing).
	TemplateHash string
	// TrustRootHash is the linkerd.io/trust-root-sha256 annotation.
	TrustRootHash string
	// ControlPlane is true for Linkerd's own pods (linkerd.io/control-plane-component).
	ControlPlane bool
	// Meshed is true when the pod has a linkerd-proxy container, in either layout
	// (steps.ProxyContainer).
	Meshed bool
	// NativeSidecar is true when the proxy is a native sidecar (an init container with
	// restartPolicy: Always), Linkerd's default since edge-26.5.2.
	NativeSidecar bool
	// Alive is true until the pod reached Succeeded or Failed: its proxy may still serve.
	Alive bool
	// Running is true when the pod runs with an IP and its proxy can be probed.
	Running bool
	// Terminating is true once the pod is being deleted (deletionTimestamp set).
	Terminating bool
	// Created is the pod's creationTimestamp.
	Created time.Time
	// ControlPlaneStart is set for a control-plane pod only: a few pods of thousands, so the
	// others do not carry its fields.
	*ControlPlaneStart
	IP string
	// AdminPort is the proxy container's linkerd-admin port.
	AdminPort int32
	// ProxyRestarts is the proxy container's restart count: a proxy restarted in place holds a
	// certificate it obtained anew.
	ProxyRestarts int32
	// Identity is the proxy's identity name, the SNI its admin port answers to.
	Identity       string
	ServiceAccount string
	// RefreshMin and RefreshMax bound the proxy's certificate refresh interval, from its env
	// (steps.ProxyRefreshBounds); both zero when the pod spec does not tell.
	RefreshMin, RefreshMax time.Duration

	// key is Key, built once by SlimPod: every map of the operator (the index, the probe
	// results, the probe queue) is keyed by it, and a reconcile looks up every pod behind.
	key string
}

// ControlPlaneStart is when a control-plane pod last read the trust roots.
type ControlPlaneStart struct {
	// Started is when the pod's containers last started: the latest state.running.startedAt of
	// its containers (init containers included), or its creation while none runs. A container
	// restarted in place (an OOM kill) reads its configuration again, so this, not Created, is
	// when it last read the trust roots.
	Started time.Time
	// RestartedAt is the pod's kubectl.kubernetes.io/restartedAt annotation: the restart of the
	// pod template it was created from.
	RestartedAt string
}

// Key is namespace/name.
func (p *Pod) Key() string {
	if p.key != "" {
		return p.key
	}
	return p.Namespace + "/" + p.Name
}

// SlimPod extracts a Pod from a corev1.Pod. The identity name is computed by cfg.
func SlimPod(cfg steps.Config, pod *corev1.Pod) *Pod {
	// One allocation holds the key, the namespace and the name.
	key := pod.Namespace + "/" + pod.Name
	p := &Pod{
		key:            key,
		Namespace:      key[:len(pod.Namespace)],
		Name:           key[len(pod.Namespace)+1:],
		UID:            string(pod.UID),
		Workload:       intern(workloadOf(pod)),
		TemplateHash:   intern(pod.Labels[podTemplateHashLabel]),
		TrustRootHash:  intern(pod.Annotations[steps.TrustRootSHA256Annotation]),
		ServiceAccount: intern(pod.Spec.ServiceAccountName),
		IP:             pod.Status.PodIP,
	}
	_, p.ControlPlane = pod.Labels[steps.ControlPlaneComponentLabel]
	p.Alive = pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
	p.Running = pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	p.Terminating = pod.DeletionTimestamp != nil
	p.Created = pod.CreationTimestamp.Time
	if p.ControlPlane {
		p.ControlPlaneStart = &ControlPlaneStart{Started: lastStarted(pod), RestartedAt: pod.Annotations[steps.RestartedAtAnnotation]}
	}
	if c, layout := steps.ProxyContainer(&pod.Spec); c != nil {
		p.Meshed, p.NativeSidecar = true, layout == steps.NativeSidecar
		p.AdminPort = steps.ProxyAdminPort(c)
		if lo, hi, ok := steps.ProxyRefreshBounds(c); ok {
			p.RefreshMin, p.RefreshMax = lo, hi
		}
		statuses := pod.Status.ContainerStatuses
		if p.NativeSidecar {
			statuses = pod.Status.InitContainerStatuses
		}
		for _, cs := range statuses {
			if cs.Name == steps.ProxyContainerName {
				p.ProxyRestarts = cs.RestartCount
			}
		}
	}
	p.Identity = intern(cfg.IdentityName(p.ServiceAccount, p.Namespace))
	return p
}

// lastStarted is when the pod's containers last started: the latest state.running.startedAt,
// or the pod's creation while no container runs.
func lastStarted(pod *corev1.Pod) time.Time {
	t := pod.CreationTimestamp.Time
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if r := cs.State.Running; r != nil && r.StartedAt.After(t) {
				t = r.StartedAt.Time
			}
		}
	}
	return t
}

// intern returns the canonical copy of s. A pod shares its workload, service account and identity
// names with its siblings and its trust-root hash with nearly every pod; decoded from the wire,
// each was an allocation of its own per pod, held as long as the pod is cached.
func intern(s string) string { return unique.Make(s).Value() }

// workloadOf names the object to restart to replace the pod: a Deployment for a pod of one of
// its ReplicaSets (the ReplicaSet's name minus the pod-template-hash), else the controller owner,
// else the pod itself.
func workloadOf(pod *corev1.Pod) string {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return pod.Namespace + "/Pod/" + pod.Name
	}
	if owner.Kind == "ReplicaSet" {
		if h := pod.Labels["pod-template-hash"]; h != "" && strings.HasSuffix(owner.Name, "-"+h) {
			return pod.Namespace + "/Deployment/" + strings.TrimSuffix(owner.Name, "-"+h)
		}
	}
	return pod.Namespace + "/" + owner.Kind + "/" + owner.Name
}

// TransformPod is a cache.TransformFunc that strips a pod to what SlimPod reads, so the
// informer's cache holds a few hundred bytes per meshed pod instead of a full pod. It stays a
// *corev1.Pod because the cache keys objects by their metadata.
func TransformPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			OwnerReferences: pod.OwnerReferences, DeletionTimestamp: pod.DeletionTimestamp, CreationTimestamp: pod.CreationTimestamp,
		},
		Spec:   corev1.PodSpec{ServiceAccountName: pod.Spec.ServiceAccountName},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP},
	}
	keep := func(m map[string]string, keys ...string) map[string]string {
		var out map[string]string
		for _, k := range keys {
			if v, ok := m[k]; ok {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
			}
		}
		return out
	}
	slim.Labels = keep(pod.Labels, steps.ControlPlaneNSLabel, steps.ControlPlaneComponentLabel, "pod-template-hash")
	slim.Annotations = keep(pod.Annotations, steps.TrustRootSHA256Annotation)
	if _, cp := pod.Labels[steps.ControlPlaneComponentLabel]; cp {
		// What SlimPod reads of a control-plane pod only: when it started, and from which restart.
		slim.Annotations = keep(pod.Annotations, steps.TrustRootSHA256Annotation, steps.RestartedAtAnnotation)
		if t := lastStarted(pod); t.After(pod.CreationTimestamp.Time) {
			slim.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t)}}}}
		}
	}
	if c, layout := steps.ProxyContainer(&pod.Spec); c != nil {
		kept := []corev1.Container{{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy}}
		for _, v := range c.Env {
			if v.Name == steps.MinRefreshEnv || v.Name == steps.MaxRefreshEnv {
				kept[0].Env = append(kept[0].Env, v)
			}
		}
		statuses := &slim.Status.ContainerStatuses
		from := pod.Status.ContainerStatuses
		if layout == steps.NativeSidecar {
			slim.Spec.InitContainers = kept
			statuses, from = &slim.Status.InitContainerStatuses, pod.Status.InitContainerStatuses
		} else {
			slim.Spec.Containers = kept
		}
		for _, cs := range from {
			if cs.Name == steps.ProxyContainerName {
				*statuses = append(*statuses, corev1.ContainerStatus{Name: cs.Name, RestartCount: cs.RestartCount})
			}
		}
	}
	return slim, nil
}
