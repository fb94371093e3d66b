package podindex

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/linkerd/trust-rotation/steps"
)

func TestTopWorkloadsKeepsTheSortedTop(t *testing.T) {
	counts := map[string]int{}
	for i := range 50 {
		counts[fmt.Sprintf("ns/Deployment/w%02d", i)] = i % 7
	}
	var all []steps.WorkloadCount
	for w, n := range counts {
		all = append(all, steps.WorkloadCount{Workload: w, Pods: n})
	}
	steps.SortWorkloads(all)
	top, n := TopWorkloads(counts)
	if n != 50 || fmt.Sprint(top) != fmt.Sprint(all[:BehindLimit]) {
		t.Errorf("topWorkloads = %v, %d; want %v, 50", top, n, all[:BehindLimit])
	}
	if top, n := TopWorkloads(map[string]int{"a": 1}); n != 1 || len(top) != 1 || top[0].Workload != "a" {
		t.Errorf("one workload: %v, %d", top, n)
	}
}

func TestFillControlPlaneNamesTheAlivePodsOfEachDeployment(t *testing.T) {
	x := New(nil)
	cp := func(name, uid string, running, alive bool) *Pod {
		return &Pod{Namespace: "linkerd", Name: name, UID: uid, Workload: "linkerd/Deployment/linkerd-identity",
			ControlPlane: true, Meshed: true, Alive: alive, Running: running}
	}
	x.Upsert(cp("linkerd-identity-b", "2", true, true))
	x.Upsert(cp("linkerd-identity-a", "1", false, true))
	x.Upsert(cp("linkerd-identity-c", "3", true, false)) // Succeeded or Failed: gone
	s := &steps.State{ControlPlane: map[string]steps.Deployment{
		"linkerd-identity":    {Namespace: "linkerd", Pods: []string{"stale"}, RunningPods: 7},
		"linkerd-destination": {Namespace: "linkerd"},
	}}
	x.FillControlPlane(s)
	id := s.ControlPlane["linkerd-identity"]
	if fmt.Sprint(id.Pods) != "[linkerd-identity-a linkerd-identity-b]" || id.RunningPods != 1 || len(id.Members) != 2 || id.Members[0].Name != "linkerd-identity-a" {
		t.Errorf("linkerd-identity: pods %v, running %d, members %+v", id.Pods, id.RunningPods, id.Members)
	}
	if d := s.ControlPlane["linkerd-destination"]; len(d.Pods) != 0 || d.RunningPods != 0 || len(d.Members) != 0 {
		t.Errorf("linkerd-destination has no pod, got %+v", d)
	}
}

// TestPodSize: a Pod fits in 256 bytes, the allocator's size class below 288. A field more
// costs 32 bytes per meshed pod, 320 kB at 10,000 pods: add one knowingly, and update this.
func TestPodSize(t *testing.T) {
	if size := unsafe.Sizeof(Pod{}); size > 256 {
		t.Errorf("a Pod takes %d bytes, more than 256", size)
	}
}
