package kube_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sync"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
)

// recordedRequest is what a client sent, as an apiserver reads it.
type recordedRequest struct {
	Method, Path                   string
	Query                          url.Values
	ContentType, Accept, UserAgent string
	Body                           []byte
}

// recordingServer records every request and answers each with the response set last.
type recordingServer struct {
	mu       sync.Mutex
	requests []recordedRequest
	status   int
	body     []byte
}

func (s *recordingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, recordedRequest{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
		ContentType: r.Header.Get("Content-Type"), Accept: r.Header.Get("Accept"), UserAgent: r.Header.Get("User-Agent"),
		Body: body,
	})
	status, resp := s.status, s.body
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(resp)
}

// respond sets the response to the requests that follow.
func (s *recordingServer) respond(status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

// take returns the one request made since the last take, failing if there were more or none.
func (s *recordingServer) take(t *testing.T, who string) recordedRequest {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.requests
	s.requests = nil
	if len(got) != 1 {
		t.Fatalf("%s made %d requests, want 1: %+v", who, len(got), got)
	}
	return got[0]
}

// clientPair is the operator's clients and client-go's (and cert-manager's) generated
// Clientsets, served through kube/clientset, all of one config.
type clientPair struct {
	srv              *recordingServer
	ours             *kube.Clients
	theirs           kube.Interface
	oursCM, theirsCM kube.CertmanagerV1
}

func newClientPair(t *testing.T) *clientPair {
	t.Helper()
	srv := &recordingServer{status: http.StatusOK}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cfg := &rest.Config{Host: hs.URL, QPS: -1}
	ours, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cmclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &clientPair{srv: srv, ours: ours, theirs: clientset.Kube(cs),
		oursCM: ours.CertmanagerV1(), theirsCM: clientset.CertManager(cm).CertmanagerV1()}
}

// both makes the same call with our client and client-go's, and fails unless they sent the
// same request and read the same result from the same response.
func (p *clientPair) both(t *testing.T, status int, response []byte, call func(ours bool) (any, error)) {
	t.Helper()
	p.srv.respond(status, response)
	var reqs [2]recordedRequest
	var results [2]any
	for i, who := range []string{"ours", "client-go"} {
		out, err := call(i == 0)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		reqs[i], results[i] = p.srv.take(t, who), out
	}
	compareRequests(t, reqs[0], reqs[1])
	if !apiequality.Semantic.DeepEqual(results[0], results[1]) {
		t.Errorf("the results differ:\nours:      %s\nclient-go: %s", asJSON(results[0]), asJSON(results[1]))
	}
}

func compareRequests(t *testing.T, ours, theirs recordedRequest) {
	t.Helper()
	for _, f := range []struct{ what, ours, theirs string }{
		{"method", ours.Method, theirs.Method},
		{"path", ours.Path, theirs.Path},
		{"Content-Type", ours.ContentType, theirs.ContentType},
		{"Accept", ours.Accept, theirs.Accept},
		{"User-Agent", ours.UserAgent, theirs.UserAgent},
	} {
		if f.ours != f.theirs {
			t.Errorf("%s %s: %s %q, client-go %q", ours.Method, ours.Path, f.what, f.ours, f.theirs)
		}
	}
	if !reflect.DeepEqual(ours.Query, theirs.Query) {
		t.Errorf("%s %s: query %v, client-go %v", ours.Method, ours.Path, ours.Query, theirs.Query)
	}
	ob, tb := decodeBody(t, ours), decodeBody(t, theirs)
	if !apiequality.Semantic.DeepEqual(ob, tb) {
		t.Errorf("%s %s: body\n%s\nclient-go's\n%s", ours.Method, ours.Path, asJSON(ob), asJSON(tb))
	}
}

var bodyCodecs = serializer.NewCodecFactory(kube.Scheme)

// decodeBody decodes a body of an API object (JSON or protobuf) into that object; a patch, or
// no body, stays the bytes sent.
func decodeBody(t *testing.T, r recordedRequest) any {
	t.Helper()
	switch r.ContentType {
	case runtime.ContentTypeJSON, runtime.ContentTypeProtobuf:
		obj, _, err := bodyCodecs.UniversalDeserializer().Decode(r.Body, nil, nil)
		if err != nil {
			t.Fatalf("%s %s: decoding the %s body: %v", r.Method, r.Path, r.ContentType, err)
		}
		return obj
	}
	return string(r.Body)
}

func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// encode is obj as the apiserver sends it: JSON, with its kind.
func encode(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	obj = obj.DeepCopyObject()
	gvks, _, err := kube.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var statusSuccess = []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}`)

// Options with every field the rotation sets, and more, so that each is encoded in the query.
var (
	getOpts   = metav1.GetOptions{ResourceVersion: "7"}
	listOpts  = metav1.ListOptions{LabelSelector: "app=a", FieldSelector: "metadata.name=n1", ResourceVersion: "7", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 50, Continue: "c1", TimeoutSeconds: ptr.To[int64](30)}
	watchOpts = metav1.ListOptions{LabelSelector: "app=a", ResourceVersion: "7", AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](40)}
	createOpt = metav1.CreateOptions{FieldManager: "linkerd-trust-rotation", DryRun: []string{metav1.DryRunAll}}
	updateOpt = metav1.UpdateOptions{FieldManager: "linkerd-trust-rotation", FieldValidation: "Strict"}
	deleteOpt = metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), PropagationPolicy: ptr.To(metav1.DeletePropagationBackground), Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("u1"))}}
	patchOpt  = metav1.PatchOptions{FieldManager: "linkerd-trust-rotation", Force: ptr.To(true)}
)

// checkResource makes every call of a Resource with ours and client-go's, on a sample object.
func checkResource[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object](t *testing.T, p *clientPair, ours, theirs kube.Resource[T, L], sample T) {
	sample.SetName("n1")
	sample.SetLabels(map[string]string{"app": "a"})
	sample.SetResourceVersion("7")
	pick := func(o bool) kube.Resource[T, L] {
		if o {
			return ours
		}
		return theirs
	}
	obj := encode(t, sample)
	gvks, _, _ := kube.Scheme.ObjectKinds(sample)
	list := fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"metadata":{"resourceVersion":"8"},"items":[%s]}`, gvks[0].GroupVersion(), gvks[0].Kind+"List", obj)
	event := fmt.Appendf(nil, `{"type":"ADDED","object":%s}`+"\n", obj)
	ctx := t.Context()

	t.Run("get", func(t *testing.T) {
		p.both(t, 200, obj, func(o bool) (any, error) { return pick(o).Get(ctx, "n1", getOpts) })
	})
	t.Run("list", func(t *testing.T) {
		p.both(t, 200, list, func(o bool) (any, error) { return pick(o).List(ctx, listOpts) })
	})
	t.Run("watch", func(t *testing.T) {
		p.both(t, 200, event, func(o bool) (any, error) {
			w, err := pick(o).Watch(ctx, watchOpts)
			if err != nil {
				return nil, err
			}
			defer w.Stop()
			e, ok := <-w.ResultChan()
			if !ok {
				return nil, fmt.Errorf("the watch ended without an event")
			}
			return e, nil
		})
	})
	t.Run("create", func(t *testing.T) {
		p.both(t, 201, obj, func(o bool) (any, error) { return pick(o).Create(ctx, sample, createOpt) })
	})
	t.Run("update", func(t *testing.T) {
		p.both(t, 200, obj, func(o bool) (any, error) { return pick(o).Update(ctx, sample, updateOpt) })
	})
	t.Run("delete", func(t *testing.T) {
		p.both(t, 200, statusSuccess, func(o bool) (any, error) { return nil, pick(o).Delete(ctx, "n1", deleteOpt) })
	})
	t.Run("apply", func(t *testing.T) {
		p.both(t, 200, obj, func(o bool) (any, error) {
			return pick(o).Patch(ctx, "n1", types.ApplyPatchType, []byte(`{"metadata":{"labels":{"app":"b"}}}`), patchOpt)
		})
	})
	t.Run("merge patch of status", func(t *testing.T) {
		p.both(t, 200, obj, func(o bool) (any, error) {
			return pick(o).Patch(ctx, "n1", types.MergePatchType, []byte(`{"status":{}}`), metav1.PatchOptions{}, "status")
		})
	})
}

// The operator's typed clients send what client-go's and cert-manager's generated clients send
// for the same call (method, path, query, Content-Type, Accept, User-Agent, and the body,
// decoded), and read the same result from the same response: every call of every kind of
// package kube, its eviction, the informers' list-watches through RESTClient, and the API groups
// that a discovery client lists.
func TestTypedClientsRequestLikeClientGo(t *testing.T) {
	p := newClientPair(t)
	o, c := p.ours, p.theirs
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	for _, r := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"pods", func(t *testing.T) { checkResource(t, p, o.CoreV1().Pods("ns1"), c.CoreV1().Pods("ns1"), pod) }},
		{"pods in every namespace", func(t *testing.T) { checkResource(t, p, o.CoreV1().Pods(""), c.CoreV1().Pods(""), pod) }},
		{"configmaps", func(t *testing.T) {
			checkResource(t, p, o.CoreV1().ConfigMaps("ns1"), c.CoreV1().ConfigMaps("ns1"), &corev1.ConfigMap{Data: map[string]string{"ca-bundle.crt": "x"}})
		}},
		{"secrets", func(t *testing.T) {
			checkResource(t, p, o.CoreV1().Secrets("ns1"), c.CoreV1().Secrets("ns1"), &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("x")}})
		}},
		{"namespaces", func(t *testing.T) {
			checkResource(t, p, o.CoreV1().Namespaces(), c.CoreV1().Namespaces(), &corev1.Namespace{})
		}},
		{"events", func(t *testing.T) {
			checkResource(t, p, o.CoreV1().Events("ns1"), c.CoreV1().Events("ns1"), &corev1.Event{Reason: "PhaseChanged", Count: 2})
		}},
		{"deployments", func(t *testing.T) {
			checkResource(t, p, o.AppsV1().Deployments("ns1"), c.AppsV1().Deployments("ns1"), &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}})
		}},
		{"statefulsets", func(t *testing.T) {
			checkResource(t, p, o.AppsV1().StatefulSets("ns1"), c.AppsV1().StatefulSets("ns1"), &appsv1.StatefulSet{})
		}},
		{"daemonsets", func(t *testing.T) {
			checkResource(t, p, o.AppsV1().DaemonSets("ns1"), c.AppsV1().DaemonSets("ns1"), &appsv1.DaemonSet{})
		}},
		{"poddisruptionbudgets", func(t *testing.T) {
			checkResource(t, p, o.PolicyV1().PodDisruptionBudgets("ns1"), c.PolicyV1().PodDisruptionBudgets("ns1"), &policyv1.PodDisruptionBudget{})
		}},
		{"leases", func(t *testing.T) {
			checkResource(t, p, o.CoordinationV1().Leases("ns1"), c.CoordinationV1().Leases("ns1"), &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")}})
		}},
		{"certificates", func(t *testing.T) {
			checkResource(t, p, p.oursCM.Certificates("ns1"), p.theirsCM.Certificates("ns1"), &cmapi.Certificate{Spec: cmapi.CertificateSpec{CommonName: "root.linkerd.cluster.local"}})
		}},
		{"certificaterequests", func(t *testing.T) {
			checkResource(t, p, p.oursCM.CertificateRequests("ns1"), p.theirsCM.CertificateRequests("ns1"), &cmapi.CertificateRequest{})
		}},
		{"issuers", func(t *testing.T) {
			checkResource(t, p, p.oursCM.Issuers("ns1"), p.theirsCM.Issuers("ns1"), &cmapi.Issuer{})
		}},
		{"clusterissuers", func(t *testing.T) {
			checkResource(t, p, p.oursCM.ClusterIssuers(), p.theirsCM.ClusterIssuers(), &cmapi.ClusterIssuer{})
		}},
	} {
		t.Run(r.name, r.run)
	}

	ctx := t.Context()
	t.Run("certificates/status", func(t *testing.T) {
		crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "ns1"},
			Status: cmapi.CertificateStatus{Revision: ptr.To(3)}}
		p.both(t, 200, encode(t, crt), func(o bool) (any, error) {
			if o {
				return p.oursCM.Certificates("ns1").UpdateStatus(ctx, crt, updateOpt)
			}
			return p.theirsCM.Certificates("ns1").UpdateStatus(ctx, crt, updateOpt)
		})
	})
	t.Run("pods/eviction", func(t *testing.T) {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "ns1"},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("u1"))}}}
		p.both(t, 201, statusSuccess, func(o bool) (any, error) {
			if o {
				return nil, p.ours.PolicyV1().Evictions("ns1").Evict(ctx, ev)
			}
			return nil, p.theirs.PolicyV1().Evictions("ns1").Evict(ctx, ev)
		})
	})

	// The informers list and watch through the groups' RESTClients, as namedInformer does.
	for _, g := range []struct {
		name     string
		ours     rest.Interface
		theirs   rest.Interface
		resource string
		sample   runtime.Object
	}{
		{"core RESTClient", o.CoreV1().RESTClient(), c.CoreV1().RESTClient(), "secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "ns1"}}},
		{"apps RESTClient", o.AppsV1().RESTClient(), c.AppsV1().RESTClient(), "deployments", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "ns1"}}},
	} {
		t.Run(g.name, func(t *testing.T) {
			lw := func(o bool) *cache.ListWatch {
				rc := g.theirs
				if o {
					rc = g.ours
				}
				return cache.NewListWatchFromClient(rc, g.resource, "ns1", fields.OneTermEqualSelector("metadata.name", "n1"))
			}
			obj := encode(t, g.sample)
			gvks, _, _ := kube.Scheme.ObjectKinds(g.sample)
			list := fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"metadata":{"resourceVersion":"8"},"items":[%s]}`, gvks[0].GroupVersion(), gvks[0].Kind+"List", obj)
			p.both(t, 200, list, func(o bool) (any, error) {
				return lw(o).ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 500})
			})
			p.both(t, 200, fmt.Appendf(nil, `{"type":"MODIFIED","object":%s}`+"\n", obj), func(o bool) (any, error) {
				w, err := lw(o).WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "8", AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](300)})
				if err != nil {
					return nil, err
				}
				defer w.Stop()
				return <-w.ResultChan(), nil
			})
		})
	}

	// ServerGroups stands in for a discovery client's: the same groups, without the core group
	// (which is always served). Discovery asks for more (the aggregated form, and /api), so
	// here the results are compared, not the requests.
	t.Run("server groups", func(t *testing.T) {
		groups := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{{
			Name:             "multicluster.linkerd.io",
			Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: "multicluster.linkerd.io/v1alpha3", Version: "v1alpha3"}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "multicluster.linkerd.io/v1alpha3", Version: "v1alpha3"},
		}}}
		groupsJSON, err := json.Marshal(groups)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/api", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`))
		})
		mux.HandleFunc("/apis", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(groupsJSON)
		})
		hs := httptest.NewServer(mux)
		defer hs.Close()
		cfg := &rest.Config{Host: hs.URL}
		ours, err := kube.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ours.ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		want, err := dc.ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		var wantGroups []metav1.APIGroup
		for _, g := range want.Groups {
			if g.Name != "" {
				wantGroups = append(wantGroups, g)
			}
		}
		if len(wantGroups) != 1 || !apiequality.Semantic.DeepEqual(got.Groups, wantGroups) {
			t.Errorf("ServerGroups = %s, discovery's (without the core group) %s", asJSON(got.Groups), asJSON(wantGroups))
		}
	})
}
