package app

import (
	"context"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The fake clientset does not stream a watch list's initial events, and the operator's list
// watchers hide its marker that says so: informers over it use plain LIST and WATCH. client-go
// reads its feature gates from the environment on first use, after this.
func init() { _ = os.Setenv("KUBE_FEATURE_WatchListClient", "false") }

// nopWriter evicts nothing; evictWriter has every eviction accepted.
type nopWriter struct{ steps.Writer }

func (nopWriter) EvictPods(context.Context, steps.WorkloadRef, []string) (int, error) { return 0, nil }

type evictWriter struct{ steps.Writer }

func (evictWriter) EvictPods(_ context.Context, _ steps.WorkloadRef, names []string) (int, error) {
	return len(names), nil
}

// An evicted Deployment counts as settling while its cached status is the one from before the
// eviction, and no longer once any other status was seen, even one that came back since.
func TestEvictionSettlesOnceTheStatusMoves(t *testing.T) {
	dep := func(available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x"},
			Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: available, AvailableReplicas: available}}
	}
	a := &automation{}
	a.deployments = &lazyInformer{inf: cache.NewSharedIndexInformer(&cache.ListWatch{}, &appsv1.Deployment{}, 0, cache.Indexers{})}
	if err := a.deployments.inf.GetStore().Add(dep(2)); err != nil {
		t.Fatal(err)
	}
	ref := steps.WorkloadRef{Namespace: "a", Kind: "Deployment", Name: "x"}
	// A PodDisruptionBudget that lets no pod go (every eviction answered 429) leaves no mark:
	// the status would never move.
	if _, err := (rememberingWriter{Writer: nopWriter{}, auto: a}).EvictPods(context.Background(), ref, []string{"x-1"}); err != nil {
		t.Fatal(err)
	}
	if !a.statusSeen(dep(2)) {
		t.Fatal("an eviction the apiserver refused left the workload settling")
	}
	w := rememberingWriter{Writer: evictWriter{}, auto: a}
	if _, err := w.EvictPods(context.Background(), ref, []string{"x-1"}); err != nil {
		t.Fatal(err)
	}
	if a.statusSeen(dep(2)) {
		t.Fatal("the status from before the eviction counts as showing it")
	}
	if !a.statusSeen(dep(1)) {
		t.Fatal("a status showing the disruption does not count")
	}
	if !a.statusSeen(dep(2)) {
		t.Fatal("the mark outlived the status change")
	}
}

// A workload the step's act evicted is in the State while it has no pod at all (its evicted pods
// removed, their replacements not in the pod cache yet), so that it still holds its place in the
// restart budget; a workload without pods and without the token is not.
func TestEvictedWorkloadWithoutPodsStaysInTheState(t *testing.T) {
	replicas := int32(2)
	dep := func(name string, ann map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Annotations: ann},
			Spec:   appsv1.DeploymentSpec{Replicas: &replicas},
			Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	}
	kube := fake.NewClientset(
		dep("evicted", map[string]string{steps.EvictedForAnnotation: "T"}),
		dep("earlier", map[string]string{steps.EvictedForAnnotation: "S"}),
		dep("untouched", nil),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &automation{kube: kube, cfg: steps.DefaultConfig(), poke: func() {}}
	spec := v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic, Method: v1alpha1.Evict}}
	a.ensure(ctx, spec)
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets, a.namespaces, a.pdbs} {
		if !cache.WaitForCacheSync(ctx.Done(), l.inf.HasSynced) {
			t.Fatalf("%s did not sync", l.what)
		}
	}
	s := &steps.State{Spec: spec}
	a.fillWorkloads(s, true, observe.NewPodIndex(nil), "T")
	if s.WorkloadsProblem != "" {
		t.Fatal(s.WorkloadsProblem)
	}
	w := s.Workloads["a/Deployment/evicted"]
	if w == nil || !w.Found || w.EvictedFor != "T" || w.Running != 0 {
		t.Fatalf("the evicted workload without pods: %+v, want it found, evicted for T, 0 pods running", w)
	}
	for _, other := range []string{"a/Deployment/earlier", "a/Deployment/untouched"} {
		if s.Workloads[other] != nil {
			t.Errorf("%s, neither meshed pods nor this step's token, is in the State", other)
		}
	}
}
