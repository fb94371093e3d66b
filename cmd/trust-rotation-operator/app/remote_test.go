package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func link(name, target, secret string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LinkGroup + "/v1alpha3", "kind": "Link",
		"metadata": map[string]any{"name": name, "namespace": DefaultMulticlusterNamespace},
		"spec":     map[string]any{},
	}}
	if target != "" {
		_ = unstructured.SetNestedField(u.Object, target, "spec", "targetClusterName")
	}
	if secret != "" {
		_ = unstructured.SetNestedField(u.Object, secret, "spec", "clusterCredentialsSecret")
	}
	return u
}

// TestRemotesFromLinksAndSpec: the linked clusters are the Links' target clusters (credentials
// cluster-credentials-<link> unless the Link names another Secret) and spec.remoteClusters, which
// win over a Link to the same cluster; each one that cannot be read says why, naming the Secret;
// an unlinked cluster's watch stops.
func TestRemotesFromLinksAndSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kube := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-credentials-north", Namespace: DefaultMulticlusterNamespace},
		Data:       map[string][]byte{"token": []byte("x")},
	}, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "south-kubeconfig", Namespace: DefaultMulticlusterNamespace},
		Data:       map[string][]byte{"config": []byte("not: [a kubeconfig")},
	})
	disco := kube.Discovery().(*fakediscovery.FakeDiscovery)
	disco.Resources = []*metav1.APIResourceList{{GroupVersion: LinkGroup + "/v1alpha3", APIResources: []metav1.APIResource{{Name: LinkResource, Namespaced: true, Kind: "Link"}}}}
	gvr := schema.GroupVersionResource{Group: LinkGroup, Version: "v1alpha3", Resource: LinkResource}
	dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "LinkList"},
		link("east", "east", "east-creds"), link("north", "", ""), link("south-link", "south", ""))
	r := newRemotes(clientset.Kube(kube), dyn, disco, DefaultMulticlusterNamespace, time.Minute, func() {})
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	r.sync([]v1alpha1.RemoteCluster{{Name: "south", KubeconfigSecret: v1alpha1.SecretKeyRef{Name: "south-kubeconfig", Key: "config"}}})

	want := map[string]struct{ source, problem string }{
		"east":  {"Link linkerd-multicluster/east", "credentials Secret linkerd-multicluster/east-creds not found"},
		"north": {"Link linkerd-multicluster/north", `credentials Secret linkerd-multicluster/cluster-credentials-north has no key "kubeconfig" (keys: token)`},
		"south": {SourceSpec, `credentials Secret linkerd-multicluster/south-kubeconfig, key "config": not a usable kubeconfig`},
	}
	var got []steps.Remote
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = r.snapshot()
		ready := len(got) == len(want)
		for _, rm := range got {
			ready = ready && rm.Problem != ""
		}
		if ready || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(got) != len(want) {
		t.Fatalf("remotes %+v, want %d", got, len(want))
	}
	for _, rm := range got {
		w := want[rm.Name]
		if rm.Source != w.source || !strings.HasPrefix(rm.Problem, w.problem) || rm.Found || !rm.LastObserved.IsZero() {
			t.Errorf("remote %s: source %q problem %q found %v; want source %q, problem starting %q, nothing read", rm.Name, rm.Source, rm.Problem, rm.Found, w.source, w.problem)
		}
	}

	// Unlinking east (deleting its Link) stops its watch and drops its gate.
	if err := dyn.Resource(gvr).Namespace(DefaultMulticlusterNamespace).Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		r.sync(nil)
		names := []string{}
		for _, rm := range r.snapshot() {
			names = append(names, rm.Name)
		}
		if strings.Join(names, ",") == "north,south" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remotes after unlinking east and dropping the spec: %v, want north (its Link) and south (its Link)", names)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
