package podindex

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/linkerd/trust-rotation/steps"
)

// podOf is an alive, running, meshed data-plane pod of the Deployment web or api in app.
func podOf(workload, name, uid, hash string) *Pod {
	return &Pod{Namespace: "app", Name: name, UID: uid, Workload: "app/Deployment/" + workload,
		TrustRootHash: hash, Meshed: true, Alive: true, Running: true}
}

// controlPlanePod is an alive, running, meshed pod of a Linkerd Deployment.
func controlPlanePod(deployment, name, uid, hash string) *Pod {
	p := podOf("", name, uid, hash)
	p.Namespace, p.Workload, p.ControlPlane = "linkerd", "linkerd/Deployment/"+deployment, true
	return p
}

// endedPod is a pod of the Job job that ended: it no longer counts.
func endedPod(name, uid, hash string) *Pod {
	p := podOf("job", name, uid, hash)
	p.Alive = false
	return p
}

// TrustBundle counts the alive meshed data-plane pods on the wanted hash, out of all of them:
// control-plane pods, pods that ended and pods without a proxy do not count; an update or a
// deletion moves the counts, and asking for another hash counts against that one.
func TestTrustBundleCounts(t *testing.T) {
	x := New(nil)
	x.Upsert(podOf("web", "web-0", "1", "new"))
	x.Upsert(podOf("web", "web-1", "2", "old"))
	x.Upsert(podOf("web", "web-2", "3", "old"))
	x.Upsert(podOf("api", "api-0", "4", ""))
	x.Upsert(controlPlanePod("linkerd-destination", "linkerd-destination-0", "5", "old"))
	x.Upsert(endedPod("job-0", "6", "old"))
	plain := podOf("plain", "plain-0", "7", "old")
	plain.Meshed = false
	x.Upsert(plain)

	check := func(what, hash string, want steps.Convergence) {
		t.Helper()
		if got := x.TrustBundle(hash); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: TrustBundle(%q) =\n  %+v\nwant\n  %+v", what, hash, got, want)
		}
	}
	wrong := func(name, has, want string) steps.PodProblem {
		return steps.PodProblem{Namespace: "app", Name: name, Reason: "trust-root-sha256 " + has + ", want " + want}
	}
	check("at first", "new", steps.Convergence{Converged: 1, Target: 4,
		Behind:          []steps.WorkloadCount{{Workload: "app/Deployment/web", Pods: 2}, {Workload: "app/Deployment/api", Pods: 1}},
		BehindWorkloads: 2,
		Pods:            []steps.PodProblem{wrong("api-0", "(none)", "new"), wrong("web-1", "old", "new"), wrong("web-2", "old", "new")}})
	if got := x.MeshedPods(); got != 5 {
		t.Errorf("MeshedPods = %d, want 5 (the control plane's included, the ended and unmeshed pods not)", got)
	}

	x.Upsert(podOf("web", "web-1", "2", "new")) // restarted onto the new bundle
	x.Delete("app/api-0")
	check("after an update and a deletion", "new", steps.Convergence{Converged: 2, Target: 3,
		Behind: []steps.WorkloadCount{{Workload: "app/Deployment/web", Pods: 1}}, BehindWorkloads: 1,
		Pods: []steps.PodProblem{wrong("web-2", "old", "new")}})

	check("against the other hash", "old", steps.Convergence{Converged: 1, Target: 3,
		Behind: []steps.WorkloadCount{{Workload: "app/Deployment/web", Pods: 2}}, BehindWorkloads: 1,
		Pods: []steps.PodProblem{wrong("web-0", "new", "old"), wrong("web-1", "new", "old")}})

	x.Upsert(podOf("web", "web-2", "3", "new"))
	check("converged", "new", steps.Convergence{Converged: 3, Target: 3})
}

// TestConvergenceNamesPodsOfTheWorkloadsMostBehind: the pods a convergence names are pods behind,
// taken from the workloads most behind.
func TestConvergenceNamesPodsOfTheWorkloadsMostBehind(t *testing.T) {
	x := New(nil)
	for i := range 30 {
		w := "big"
		if i >= 25 {
			w = "small"
		}
		x.Upsert(&Pod{Namespace: "app", Name: fmt.Sprintf("%s-%02d", w, i), UID: fmt.Sprint(i),
			Workload: "app/Deployment/" + w, TrustRootHash: "old", Meshed: true, Alive: true, Running: true})
	}
	x.Upsert(&Pod{Namespace: "app", Name: "big-00", UID: "0", Workload: "app/Deployment/big",
		TrustRootHash: "new", Meshed: true, Alive: true, Running: true})
	c := x.TrustBundle("new")
	if c.Converged != 1 || c.Target != 30 || c.BehindWorkloads != 2 || c.Behind[0].Workload != "app/Deployment/big" || c.Behind[0].Pods != 24 {
		t.Fatalf("convergence = %+v", c)
	}
	if len(c.Pods) != BehindLimit {
		t.Fatalf("named %d pods, want %d", len(c.Pods), BehindLimit)
	}
	for _, p := range c.Pods {
		if p.Name == "big-00" || p.Name[:3] != "big" {
			t.Errorf("named %s: not a pod behind of the workload most behind", p.Name)
		}
	}
}

// TestConvergenceOnEitherBundle: asked about several hashes (a bridged recovery's expanded bundle
// and the expired anchor's), a pod on any of them has converged; the per-workload counts follow
// the events for that set, and asking about one hash again rebuilds them.
func TestConvergenceOnEitherBundle(t *testing.T) {
	x := New(nil)
	add := func(name, hash string) {
		x.Upsert(&Pod{Namespace: "app", Name: name, UID: name, Workload: "app/Deployment/" + name[:3], TrustRootHash: hash, Meshed: true, Alive: true, Running: true})
	}
	add("web-1", "new")
	add("web-2", "old")
	add("api-1", "other")
	c := x.TrustBundle("new", "old")
	if c.Converged != 2 || c.Target != 3 || c.BehindWorkloads != 1 || c.Behind[0].Workload != "app/Deployment/api" || len(c.Pods) != 1 || c.Pods[0].Name != "api-1" {
		t.Fatalf("convergence on new or old = %+v", c)
	}
	if x.Behind() != 1 {
		t.Fatalf("Behind() = %d, want 1", x.Behind())
	}
	add("api-1", "old") // restarted onto the expired anchor's bundle by someone else
	if c := x.TrustBundle("new", "old"); !c.Done() || x.Behind() != 0 {
		t.Fatalf("every pod on new or old: %+v, Behind() = %d", c, x.Behind())
	}
	if c := x.TrustBundle("new"); c.Converged != 1 || x.Behind() != 2 {
		t.Fatalf("on new alone: %+v, Behind() = %d", c, x.Behind())
	}
	if got := BundleProblem(&Pod{TrustRootHash: "old"}, "new", "old"); got != "" {
		t.Errorf("BundleProblem on an accepted hash: %q", got)
	}
	if got := BundleProblem(&Pod{TrustRootHash: "other"}, "new", "old"); got == "" {
		t.Error("BundleProblem on neither hash says nothing")
	}
}
