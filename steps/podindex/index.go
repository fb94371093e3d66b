package podindex

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
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

// Index keeps the meshed pods and the per-hash and per-workload counts the trust-bundle
// convergence needs, updated per event, so that a reconcile reads counts instead of walking or
// listing pods: the cost of the accounting grows with what changes, not with the mesh.
type Index struct {
	mu   sync.RWMutex
	pods map[string]*Pod
	// byHash counts alive meshed non-control-plane pods per trust-root hash.
	byHash map[string]int
	// dataPlane is the number of alive meshed non-control-plane pods.
	dataPlane int
	// meshed is the number of alive meshed pods, control plane included.
	meshed int
	// workloads holds the alive meshed pods by workload, control plane included, in no order. A
	// slice, not a map by key: a workload has a few pods, and a map of a few was a third of
	// the index's memory per pod. Removing a pod scans its workload's.
	workloads map[string][]*Pod
	// want is the trust-root hash TrustBundle was last asked about, and behind counts, per
	// workload, the alive meshed data-plane pods on another hash: kept per event for that hash,
	// rebuilt when another is asked for (once per change of the desired bundle).
	want   string
	behind map[string]int
	// behindPods is the sum of behind.
	behindPods int
	// onChange is called, outside the lock, after every change.
	onChange func(old, new *Pod)
	// oldest is the creation of the oldest alive meshed data-plane pod (OldestMeshed).
	oldest oldestPod
}

// New returns an empty index. onChange, if set, sees every change.
func New(onChange func(old, new *Pod)) *Index {
	return &Index{pods: map[string]*Pod{}, byHash: map[string]int{}, workloads: map[string][]*Pod{},
		behind: map[string]int{}, onChange: onChange}
}

func (x *Index) count(p *Pod, delta int) {
	if p == nil || !p.Meshed || !p.Alive {
		return
	}
	x.meshed += delta
	if delta > 0 {
		x.workloads[p.Workload] = append(x.workloads[p.Workload], p)
	} else {
		x.removeFromWorkload(p)
	}
	if p.ControlPlane {
		return
	}
	x.dataPlane += delta
	x.oldest.count(p, delta)
	addCount(x.byHash, p.TrustRootHash, delta)
	if p.TrustRootHash != x.want {
		addCount(x.behind, p.Workload, delta)
		x.behindPods += delta
	}
}

// removeFromWorkload removes p, the very pod counted, from its workload's pods.
func (x *Index) removeFromWorkload(p *Pod) {
	pods := x.workloads[p.Workload]
	i := slices.Index(pods, p)
	if i < 0 {
		return
	}
	last := len(pods) - 1
	pods[i], pods[last] = pods[last], nil
	switch pods = pods[:last]; {
	case len(pods) == 0:
		delete(x.workloads, p.Workload)
	case len(pods) < cap(pods)/4:
		// A workload scaled down gives back what it held.
		x.workloads[p.Workload] = slices.Clip(slices.Clone(pods))
	default:
		x.workloads[p.Workload] = pods
	}
}

// addCount adds delta to m[k], dropping the key at zero so that len(m) counts the non-zero ones.
func addCount(m map[string]int, k string, delta int) {
	if m[k] += delta; m[k] == 0 {
		delete(m, k)
	}
}

// Upsert records a pod's current form.
func (x *Index) Upsert(p *Pod) {
	x.mu.Lock()
	old := x.pods[p.Key()]
	x.count(old, -1)
	x.pods[p.Key()] = p
	x.count(p, +1)
	x.mu.Unlock()
	if x.onChange != nil {
		x.onChange(old, p)
	}
}

// Delete forgets a pod.
func (x *Index) Delete(key string) {
	x.mu.Lock()
	old := x.pods[key]
	x.count(old, -1)
	delete(x.pods, key)
	x.mu.Unlock()
	if x.onChange != nil && old != nil {
		x.onChange(old, nil)
	}
}

// Behind is the number of alive meshed data-plane pods on another trust-root hash than the one
// TrustBundle was last asked about: zero once the trust bundle has converged.
func (x *Index) Behind() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.behindPods
}

// Get returns a pod by key.
func (x *Index) Get(key string) (*Pod, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.pods[key]
	return p, ok
}

// Each calls fn for every alive meshed pod, under a read lock; fn must not call the index.
func (x *Index) Each(fn func(*Pod)) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, p := range x.pods {
		if p.Meshed && p.Alive {
			fn(p)
		}
	}
}

// Replacing reports whether p's Deployment is rolling out another template than p's: its newest
// alive pod that is not being deleted was made from another template, after p. That pod's
// ReplicaSet is the Deployment's new one, and p's is scaled down as the new pods become ready.
// A rollback makes pods from p's template again, newer still, and p is no longer on its way out.
// The walk is over the workload's own pods.
func (x *Index) Replacing(p *Pod) bool {
	if p.TemplateHash == "" {
		return false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	var newest *Pod
	for _, q := range x.workloads[p.Workload] {
		if q.TemplateHash != "" && !q.Terminating && (newest == nil || q.Created.After(newest.Created)) {
			newest = q
		}
	}
	return newest != nil && newest.TemplateHash != p.TemplateHash && newest.Created.After(p.Created)
}

// MeshedPods is the number of alive meshed pods, control plane included.
func (x *Index) MeshedPods() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.meshed
}

// eachPodOf calls fn for the alive meshed pods of the given workloads, in that order and each
// workload's pods by name, until fn returns false. Called with x.mu held.
func (x *Index) eachPodOf(workloads []steps.WorkloadCount, fn func(*Pod) bool) {
	for _, w := range workloads {
		pods := slices.Clone(x.workloads[w.Workload])
		slices.SortFunc(pods, func(a, b *Pod) int { return strings.Compare(a.Key(), b.Key()) })
		for _, p := range pods {
			if !fn(p) {
				return
			}
		}
	}
}

// EachPodOf is eachPodOf under the index's read lock, for the prober: its
// CertTracker.Certificates names the pods behind among the index's pods of the workloads most
// behind, as TrustBundle does. fn must not call the index.
func (x *Index) EachPodOf(workloads []steps.WorkloadCount, fn func(*Pod) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	x.eachPodOf(workloads, fn)
}

// FillControlPlane adds to the State's control-plane Deployments their alive pods from the
// index: their names, sorted, how many run, and when each started and from which template
// restart.
func (x *Index) FillControlPlane(s *steps.State) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for name, d := range s.ControlPlane {
		d.Pods, d.RunningPods, d.Members = nil, 0, nil
		for _, p := range x.workloads[d.Namespace+"/Deployment/"+name] {
			if !p.ControlPlane {
				continue
			}
			var start ControlPlaneStart
			if p.ControlPlaneStart != nil {
				start = *p.ControlPlaneStart
			}
			d.Members = append(d.Members, steps.ControlPlanePod{Name: p.Name, Started: start.Started, RestartedAt: start.RestartedAt, Terminating: p.Terminating})
			if p.Running {
				d.RunningPods++
			}
		}
		sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].Name < d.Members[j].Name })
		for _, m := range d.Members {
			d.Pods = append(d.Pods, m.Name)
		}
		s.ControlPlane[name] = d
	}
}

// behindLimit is how many workloads and pods a convergence lists by name.
const BehindLimit = 10

// TrustBundle counts the alive meshed non-control-plane pods injected with the bundle of the
// given hash. The counts are O(1); naming the workloads behind costs what is behind, not the
// mesh: per-workload counts are kept per event for the hash last asked about (a new hash
// rebuilds them once), the workloads behind are ranked, and only the pods of the first few are
// read to name a few pods.
func (x *Index) TrustBundle(hash string) steps.Convergence {
	x.mu.Lock()
	defer x.mu.Unlock()
	if hash != x.want {
		x.want, x.behind, x.behindPods = hash, map[string]int{}, 0
		for _, p := range x.pods {
			if p.Meshed && p.Alive && !p.ControlPlane && p.TrustRootHash != hash {
				x.behind[p.Workload]++
				x.behindPods++
			}
		}
	}
	c := steps.Convergence{Converged: x.byHash[hash], Target: x.dataPlane}
	if c.Done() {
		return c
	}
	c.Behind, c.BehindWorkloads = TopWorkloads(x.behind)
	x.eachPodOf(c.Behind, func(p *Pod) bool {
		if !p.ControlPlane && p.TrustRootHash != hash {
			reason := fmt.Sprintf("trust-root-sha256 %s, want %s", ShortHash(p.TrustRootHash), ShortHash(hash))
			c.Pods = append(c.Pods, steps.PodProblem{Namespace: p.Namespace, Name: p.Name, Reason: reason})
		}
		return len(c.Pods) < BehindLimit
	})
	SortProblems(c.Pods)
	return c
}

// topWorkloads returns the behindLimit workloads with the most pods behind, in SortWorkloads'
// order, and how many workloads are behind. It keeps the top ones as it goes rather than
// sorting every workload: a reconcile during a rollout of 10,000 pods had 2,000 to sort.
func TopWorkloads(counts map[string]int) ([]steps.WorkloadCount, int) {
	top := make([]steps.WorkloadCount, 0, BehindLimit+1)
	before := func(a, b steps.WorkloadCount) bool {
		return a.Pods > b.Pods || a.Pods == b.Pods && a.Workload < b.Workload
	}
	for w, n := range counts {
		c := steps.WorkloadCount{Workload: w, Pods: n}
		if len(top) == BehindLimit && !before(c, top[BehindLimit-1]) {
			continue
		}
		i := sort.Search(len(top), func(i int) bool { return before(c, top[i]) })
		top = append(top, steps.WorkloadCount{})
		copy(top[i+1:], top[i:])
		top[i] = c
		if len(top) > BehindLimit {
			top = top[:BehindLimit]
		}
	}
	return top, len(counts)
}

func SortProblems(ps []steps.PodProblem) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Namespace != ps[j].Namespace {
			return ps[i].Namespace < ps[j].Namespace
		}
		return ps[i].Name < ps[j].Name
	})
}

func ShortHash(h string) string {
	if h == "" {
		return "(none)"
	}
	return steps.ShortFingerprint(h)
}

// BundleProblem says why a meshed non-control-plane pod has not converged on the trust bundle
// of the given hash, or "" when it has. The wording is the operator's (Index.TrustBundle).
func BundleProblem(p *Pod, hash string) string {
	if p.TrustRootHash == hash {
		return ""
	}
	return fmt.Sprintf("trust-root-sha256 %s, want %s", ShortHash(p.TrustRootHash), ShortHash(hash))
}
