package meshsim

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/cache"
)

// rollouts counts, from the Deployments and StatefulSets the apiserver shows, the restarts of
// every application workload (a change of its pod template's kubectl.kubernetes.io/restartedAt,
// whoever made it) and how many were rolling out at once, cluster-wide and per namespace: the
// ground truth a restart budget is checked against. The control plane's Deployments are counted
// apart (their restarts only), so that a test can tell the rotation's own restarts of them from
// any more.
type rollouts struct {
	mu        sync.Mutex
	restarted map[string]string // last restartedAt seen, by Workload.String()
	restarts  map[string]int
	rolling   map[string]bool
	maxAll    int
	maxNS     map[string]int
	// history keeps the last statuses of each Deployment, and peak what was rolling when a
	// namespace reached its highest count: the evidence a failed budget check prints.
	history map[string][]string
	peak    string
	// controlPlane counts the restarts of the control plane's Deployments, by name.
	controlPlane map[string]int
}

// historyLen is how many statuses of each Deployment are kept for a failure report.
const historyLen = 8

func newRollouts() *rollouts {
	return &rollouts{restarted: map[string]string{}, restarts: map[string]int{}, rolling: map[string]bool{}, maxNS: map[string]int{},
		controlPlane: map[string]int{}, history: map[string][]string{}}
}

// restartSeen records a workload's restartedAt and reports whether it changed to a new value.
// Called with r.mu held.
func (r *rollouts) restartSeen(key, at string) bool {
	prev, seen := r.restarted[key]
	r.restarted[key] = at
	return seen && prev != at && at != ""
}

func (r *rollouts) handler(linkerdNS string) cache.ResourceEventHandler {
	update := func(obj any) {
		var key, at string
		var done bool
		switch w := obj.(type) {
		case *appsv1.Deployment:
			key, at = Workload{Namespace: w.Namespace, Name: w.Name}.String(), w.Spec.Template.Annotations[AnnotationRestartedAt]
			ok, _, err := rolloutComplete(w)
			done = ok && err == nil
			if w.Namespace == linkerdNS {
				r.mu.Lock()
				if r.restartSeen(key, at) {
					r.controlPlane[w.Name]++
				}
				r.mu.Unlock()
				return
			}
		case *appsv1.StatefulSet:
			key, at = Workload{Namespace: w.Namespace, Name: w.Name, Kind: KindStatefulSet}.String(), w.Spec.Template.Annotations[AnnotationRestartedAt]
			done, _ = statefulSetRolledOut(w)
		default:
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.restartSeen(key, at) {
			r.restarts[key]++
		}
		r.rolling[key] = !done
		h := append(r.history[key], fmt.Sprintf("%s %s rolling=%t", time.Now().Format("15:04:05.000"), statusLine(obj), !done))
		r.history[key] = h[max(0, len(h)-historyLen):]
		all, perNS := 0, map[string]int{}
		for k, rolling := range r.rolling {
			if rolling {
				all++
				perNS[k[:indexSlash(k)]]++
			}
		}
		r.maxAll = max(r.maxAll, all)
		for ns, n := range perNS {
			if n > r.maxNS[ns] && n > 1 {
				r.peak = r.describePeak(ns)
			}
			r.maxNS[ns] = max(r.maxNS[ns], n)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
		DeleteFunc: func(obj any) {
			var key string
			switch w := obj.(type) {
			case *appsv1.Deployment:
				key = Workload{Namespace: w.Namespace, Name: w.Name}.String()
			case *appsv1.StatefulSet:
				key = Workload{Namespace: w.Namespace, Name: w.Name, Kind: KindStatefulSet}.String()
			default:
				return
			}
			r.mu.Lock()
			delete(r.rolling, key)
			r.mu.Unlock()
		},
	}
}

// statusLine summarises a workload's status for the history.
func statusLine(obj any) string {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		st := w.Status
		return fmt.Sprintf("rv=%s gen=%d/%d replicas=%d updated=%d ready=%d available=%d unavailable=%d", w.ResourceVersion,
			st.ObservedGeneration, w.Generation, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, st.UnavailableReplicas)
	case *appsv1.StatefulSet:
		st := w.Status
		return fmt.Sprintf("rv=%s gen=%d/%d replicas=%d updated=%d ready=%d available=%d revision=%s/%s", w.ResourceVersion,
			st.ObservedGeneration, w.Generation, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, st.CurrentRevision, st.UpdateRevision)
	}
	return ""
}

// describePeak lists the Deployments of ns rolling now, each with its last statuses.
func (r *rollouts) describePeak(ns string) string {
	var keys []string
	for k, rolling := range r.rolling {
		if rolling && k[:indexSlash(k)] == ns {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d Deployments of %s rolling at once:", len(keys), ns)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s:\n    %s", k, strings.Join(r.history[k], "\n    "))
	}
	return b.String()
}

func indexSlash(s string) int {
	for i := range s {
		if s[i] == '/' {
			return i
		}
	}
	return len(s)
}

// RolloutStats are the restarts the mesh saw since the last ResetRolloutStats.
type RolloutStats struct {
	// Restarts counts the restartedAt changes of each application workload, by Workload.String():
	// "<ns>/<name>" for a Deployment, "<ns>/StatefulSet/<name>" for a StatefulSet.
	Restarts map[string]int
	// ControlPlaneRestarts counts the restartedAt changes of each control-plane Deployment, by
	// name. (Pods deleted to replace them at once change no restartedAt: not counted.)
	ControlPlaneRestarts map[string]int
	// MaxConcurrent is the most application Deployments seen rolling out at once, and
	// MaxConcurrentPerNamespace the most in one namespace.
	MaxConcurrent             int
	MaxConcurrentPerNamespace int
	// Peak describes, when a namespace had more than one Deployment rolling at once, those
	// Deployments and their last statuses at the moment it reached its highest count.
	Peak string
}

// RolloutStats returns what the mesh saw of application rollouts.
func (m *Mesh) RolloutStats() RolloutStats {
	r := m.rollouts
	r.mu.Lock()
	defer r.mu.Unlock()
	s := RolloutStats{Restarts: map[string]int{}, ControlPlaneRestarts: map[string]int{}, MaxConcurrent: r.maxAll, Peak: r.peak}
	for k, v := range r.restarts {
		s.Restarts[k] = v
	}
	for k, v := range r.controlPlane {
		s.ControlPlaneRestarts[k] = v
	}
	for _, n := range r.maxNS {
		s.MaxConcurrentPerNamespace = max(s.MaxConcurrentPerNamespace, n)
	}
	return s
}

// ResetRolloutStats starts counting restarts and concurrency afresh.
func (m *Mesh) ResetRolloutStats() {
	r := m.rollouts
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarts, r.maxNS, r.controlPlane = map[string]int{}, map[string]int{}, map[string]int{}
	r.maxAll, r.peak = 0, ""
	for k, rolling := range r.rolling {
		if rolling {
			r.maxAll++
			r.maxNS[k[:indexSlash(k)]]++
		}
	}
}

// SetIgnoreAdditionalEnv makes the proxy-injector ignore config.linkerd.io/proxy-additional-env,
// as Linkerd releases before edge-26.4.3 do: an accelerated refresh interval set there then never
// reaches the proxies.
func (m *Mesh) SetIgnoreAdditionalEnv(ignore bool) {
	m.mu.Lock()
	m.ignoreAdditionalEnv = ignore
	m.mu.Unlock()
}
