package app

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
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
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &appsv1.Deployment{}, 0, cache.Indexers{})
	a.deployments = singleInformer("deployments", inf)
	if err := inf.GetStore().Add(dep(2)); err != nil {
		t.Fatal(err)
	}
	ref := steps.WorkloadRef{Namespace: "a", Kind: "Deployment", Name: "x"}
	// A PodDisruptionBudget that lets no pod go (every eviction answered 429) leaves no mark:
	// the status would never move.
	if _, err := (rememberingWriter{Writer: nopWriter{}, auto: a}).EvictPods(context.Background(), ref, []string{"x-1"}); err != nil {
		t.Fatal(err)
	}
	if !a.StatusSeen(dep(2)) {
		t.Fatal("an eviction the apiserver refused left the workload settling")
	}
	w := rememberingWriter{Writer: evictWriter{}, auto: a}
	if _, err := w.EvictPods(context.Background(), ref, []string{"x-1"}); err != nil {
		t.Fatal(err)
	}
	if a.StatusSeen(dep(2)) {
		t.Fatal("the status from before the eviction counts as showing it")
	}
	if !a.StatusSeen(dep(1)) {
		t.Fatal("a status showing the disruption does not count")
	}
	if !a.StatusSeen(dep(2)) {
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
	a := &automation{kube: clientset.Kube(kube), cfg: steps.DefaultConfig(), poke: func() {}}
	spec := v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic, Method: v1alpha1.Evict}}
	a.ensure(ctx, spec)
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets, a.namespaces, a.pdbs} {
		if !cache.WaitForCacheSync(ctx.Done(), l.hasSynced) {
			t.Fatalf("%s did not sync", l.what)
		}
	}
	s := &steps.State{Spec: spec}
	observe.FillWorkloads(s, a, true, podindex.New(nil), "T")
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

// forbidClusterWideLists makes the fake clientset answer as the apiserver does to a
// ServiceAccount whose RBAC grants workloads in some namespaces only: a list or watch of every
// namespace is Forbidden.
func forbidClusterWideLists(kube *fake.Clientset) {
	deny := func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() != metav1.NamespaceAll || action.GetResource().Resource == "namespaces" {
			return false, nil, nil
		}
		gr := action.GetResource().GroupResource()
		return true, nil, apierrors.NewForbidden(gr, "", fmt.Errorf(`User "system:serviceaccount:linkerd:trust-rotation-operator" cannot list resource %q in API group %q at the cluster scope`, gr.Resource, gr.Group))
	}
	kube.PrependReactor("list", "*", deny)
	kube.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		_, _, err := deny(action)
		return err != nil, nil, err
	})
}

// With --restart-namespaces the workloads are watched in those namespaces alone, so an RBAC that
// grants them there only is enough; a workload elsewhere is left to the user, out of scope.
func TestRestartNamespacesWatchOnlyThere(t *testing.T) {
	dep := func(ns string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	}
	kube := fake.NewClientset(dep("a"), dep("b"))
	forbidClusterWideLists(kube)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &automation{kube: clientset.Kube(kube), cfg: steps.DefaultConfig(), poke: func() {}, restartNamespaces: []string{"a"}}
	spec := v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic, Method: v1alpha1.Evict}}
	a.ensure(ctx, spec)
	for _, l := range []*lazyInformer{a.deployments, a.statefulSets, a.daemonSets, a.namespaces, a.pdbs} {
		if !cache.WaitForCacheSync(ctx.Done(), l.hasSynced) {
			_, why := l.ready()
			t.Fatalf("%s did not sync: %s", l.what, why)
		}
	}
	index := podindex.New(nil)
	for _, ns := range []string{"a", "b"} {
		index.Upsert(&podindex.Pod{Namespace: ns, Name: "web-1", UID: ns, Workload: ns + "/Deployment/web", Meshed: true, Alive: true, Running: true, TrustRootHash: "old"})
	}
	s := &steps.State{Spec: spec}
	observe.FillWorkloads(s, a, true, index, "T")
	if s.WorkloadsProblem != "" {
		t.Fatal(s.WorkloadsProblem)
	}
	if w := s.Workloads["a/Deployment/web"]; w == nil || !w.Found || w.OutOfScope {
		t.Errorf("a/Deployment/web, in a restart namespace: %+v, want found", w)
	}
	if w := s.Workloads["b/Deployment/web"]; w == nil || w.Found || !w.OutOfScope {
		t.Errorf("b/Deployment/web, outside the restart namespaces: %+v, want out of scope", w)
	}
}

// Without --restart-namespaces, an RBAC that does not allow listing workloads cluster-wide makes
// the rotation's message say so, and what to do.
func TestForbiddenClusterWideListIsExplained(t *testing.T) {
	kube := fake.NewClientset()
	forbidClusterWideLists(kube)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &automation{kube: clientset.Kube(kube), cfg: steps.DefaultConfig(), poke: func() {}}
	spec := v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic}}
	a.ensure(ctx, spec)
	want := []string{"cannot watch deployments cluster-wide", "is forbidden", "--restart-namespaces", "dataPlaneRestart.rbacScope=Namespaces"}
	var last string
	err := utilwait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		s := &steps.State{Spec: spec}
		observe.FillWorkloads(s, a, true, podindex.New(nil), "T")
		last = s.WorkloadsProblem
		for _, w := range want {
			if !strings.Contains(last, w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the workloads problem %q does not say %q", last, want)
	}
}

// spec.identityIssuerRenewal Automatic set on the TrustAnchorRotation alone, without the chart's
// grant of the issuer's Certificate: the message names the Certificate and the chart value.
func TestForbiddenCertificateIsExplained(t *testing.T) {
	cm := cmfake.NewClientset()
	cm.PrependReactor("list", "certificates", func(action k8stesting.Action) (bool, runtime.Object, error) {
		gr := action.GetResource().GroupResource()
		return true, nil, apierrors.NewForbidden(gr, "", fmt.Errorf(`User "system:serviceaccount:linkerd:trust-rotation-operator" cannot list resource "certificates" in API group "cert-manager.io" in the namespace "linkerd"`))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &automation{kube: clientset.Kube(fake.NewClientset()), cm: clientset.CertManager(cm), cfg: steps.DefaultConfig(), poke: func() {}}
	a.ensure(ctx, v1alpha1.TrustAnchorRotationSpec{IdentityIssuerRenewal: v1alpha1.Automatic})
	want := []string{"cannot watch Certificate linkerd/linkerd-identity-issuer:", "is forbidden", "rotation.spec.identityIssuerRenewal=Automatic"}
	var last string
	err := utilwait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		_, last = a.certificate.ready()
		for _, w := range want {
			if !strings.Contains(last, w) {
				return false, nil
			}
		}
		return !strings.Contains(last, "restart"), nil
	})
	if err != nil {
		t.Fatalf("the Certificate's problem %q does not say %q (or speaks of restarts)", last, want)
	}
}

// An informer started for automatic restarts pokes the controller once it has synced, whatever
// its list held: a reconcile that found the cache not ready waits for that poke, and no event
// comes from an empty list (no PodDisruptionBudget, no DaemonSet in the cluster) or after the
// last item of a list.
func TestWorkloadCachesPokeWhenSynced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	synced := make(chan struct{})
	a := &automation{kube: clientset.Kube(fake.NewClientset()), cfg: steps.DefaultConfig()}
	var once sync.Once
	a.poke = func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.pdbs != nil && a.WorkloadsProblem() == "" {
			once.Do(func() { close(synced) })
		}
	}
	a.ensure(ctx, v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic}})
	select {
	case <-synced:
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		t.Fatalf("no poke found the workload caches of an empty cluster ready: %s", a.WorkloadsProblem())
	}
}
