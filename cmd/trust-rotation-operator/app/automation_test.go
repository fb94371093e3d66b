package app

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
)

type nopWriter struct{ steps.Writer }

func (nopWriter) EvictPods(context.Context, steps.WorkloadRef, []string) error { return nil }

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
	w := rememberingWriter{Writer: nopWriter{}, auto: a}
	if err := w.EvictPods(context.Background(), ref, []string{"x-1"}); err != nil {
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
