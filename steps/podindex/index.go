package podindex

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/linkerd/trust-rotation/steps"
)

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
	// want are the trust-root hashes TrustBundle was last asked about, and behind counts, per
	// workload, the alive meshed data-plane pods on another hash: kept per event for those
	// hashes, rebuilt when others are asked for (once per change of the desired bundle).
	want   []string
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
		behind: map[string]int{}, want: []string{""}, onChange: onChange}
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
	if !slices.Contains(x.want, p.TrustRootHash) {
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

// Behind is the number of alive meshed data-plane pods on another trust-root hash than those
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

// TrustBundle counts the alive meshed non-control-plane pods injected with a bundle of one of
// the given hashes (State.BundleHashes: the desired bundle's, and in a bridged recovery the
// expired anchor's too). The counts are O(1); naming the workloads behind costs what is behind,
// not the mesh: per-workload counts are kept per event for the hashes last asked about (others
// rebuild them once), the workloads behind are ranked, and only the pods of the first few are
// read to name a few pods.
func (x *Index) TrustBundle(hashes ...string) steps.Convergence {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !slices.Equal(hashes, x.want) {
		x.want, x.behind, x.behindPods = slices.Clone(hashes), map[string]int{}, 0
		for _, p := range x.pods {
			if p.Meshed && p.Alive && !p.ControlPlane && !slices.Contains(hashes, p.TrustRootHash) {
				x.behind[p.Workload]++
				x.behindPods++
			}
		}
	}
	c := steps.Convergence{Target: x.dataPlane}
	for i, h := range hashes {
		if !slices.Contains(hashes[:i], h) {
			c.Converged += x.byHash[h]
		}
	}
	if c.Done() {
		return c
	}
	c.Behind, c.BehindWorkloads = TopWorkloads(x.behind)
	x.eachPodOf(c.Behind, func(p *Pod) bool {
		if why := BundleProblem(p, hashes...); !p.ControlPlane && why != "" {
			c.Pods = append(c.Pods, steps.PodProblem{Namespace: p.Namespace, Name: p.Name, Reason: why})
		}
		return len(c.Pods) < BehindLimit
	})
	SortProblems(c.Pods)
	return c
}

// BundleProblem says why a meshed non-control-plane pod has not converged on a trust bundle of
// the given hashes (the first is the desired bundle's), or "" when it has. The wording is the
// operator's (Index.TrustBundle).
func BundleProblem(p *Pod, hashes ...string) string {
	if len(hashes) == 0 || slices.Contains(hashes, p.TrustRootHash) {
		return ""
	}
	return fmt.Sprintf("trust-root-sha256 %s, want %s", ShortHash(p.TrustRootHash), ShortHash(hashes[0]))
}
