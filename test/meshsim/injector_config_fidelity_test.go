package meshsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"
)

// injectorRecording is what Linkerd's own proxy injector wrote into pods around a change of the
// trust-roots ConfigMap (testdata/linkerd-proxy-injector/config-change.json, recorded by
// TestLinkerdInjectorAfterTrustRootsChange in test/reallinkerd with -update).
type injectorRecording struct {
	Comment              string              `json:"comment"`
	Linkerd              string              `json:"linkerd"`
	Command              []string            `json:"command"`
	Namespace            string              `json:"namespace"`
	NamespaceAnnotations map[string]string   `json:"namespaceAnnotations"`
	Bundles              map[string]string   `json:"bundles"`
	Admissions           []injectorAdmission `json:"admissions"`
}

// injectorAdmission is one pod admitted at a moment of the recording: which bundle the
// ConfigMap held in the apiserver and which one the injector's mounted file held, the pod's
// layout annotations, and what the injector wrote into the pod.
type injectorAdmission struct {
	Moment         string            `json:"moment"`
	ConfigMap      string            `json:"configMap"`
	File           string            `json:"file"`
	Layout         string            `json:"layout"`
	PodAnnotations map[string]string `json:"podAnnotations"`

	ProxyPlace      string `json:"proxyPlace"`
	RestartPolicy   string `json:"restartPolicy"`
	TrustAnchors    string `json:"trustAnchors"`
	TrustRootSHA256 string `json:"trustRootSHA256"`
}

// TestInjectorConfigChangeMatchesLinkerd replays the recording against the simulator's proxy
// injector, moment by moment: the injector pod starts on the ConfigMap's value; the ConfigMap
// changes in the apiserver (the simulator's informer sees it, the mounted file does not change
// yet); the kubelet refreshes the file (Config.VolumeRefreshDelay elapses). At each moment the
// same pods, in both layouts, are admitted, and what the simulator writes into them must be
// what real Linkerd wrote: where the proxy is, its restartPolicy, its
// LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS and the pod's linkerd.io/trust-root-sha256. Real
// Linkerd reads the mounted file at every admission (controller/proxy-injector/webhook.go), so
// the new bundle appears at the first admission after the file changed, not at a restart.
func TestInjectorConfigChangeMatchesLinkerd(t *testing.T) {
	rec := readInjectorRecording(t)
	if len(rec.Admissions) == 0 {
		t.Fatal("the recording has no admissions")
	}
	const refresh = time.Minute
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	trustRoots := func(name string) *corev1.ConfigMap {
		b, ok := rec.Bundles[name]
		if !ok {
			t.Fatalf("the recording names a bundle %q it does not hold", name)
		}
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultLinkerdNamespace, Name: TrustRootsConfigMap},
			Data: map[string]string{TrustRootsKey: b}}
	}
	first := rec.Admissions[0]
	cm := trustRoots(first.ConfigMap)
	client := fake.NewClientset(cm)
	if err := idx.Add(cm); err != nil {
		t.Fatal(err)
	}
	m := &Mesh{cfg: Config{LinkerdNamespace: DefaultLinkerdNamespace, TrustDomain: DefaultTrustDomain,
		ProxyVersion: rec.Linkerd, VolumeRefreshDelay: refresh},
		client: client, clock: clk, ctx: t.Context(), configMaps: listersv1.NewConfigMapLister(idx)}
	bundle, ok := m.mountedConfigMapValue(DefaultLinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
	if !ok {
		t.Fatal("the simulated injector pod found no trust roots to mount")
	}
	in := &injectorProc{mesh: m, pod: PodRef{Namespace: DefaultLinkerdNamespace, Name: "linkerd-proxy-injector-0", UID: "injector"}, bundle: bundle}
	defer in.stop()
	if first.File != first.ConfigMap {
		t.Fatalf("the recording starts with the file on bundle %q and the ConfigMap on %q: a pod starts on the ConfigMap's value", first.File, first.ConfigMap)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rec.Namespace, Annotations: rec.NamespaceAnnotations}}
	cmNow, fileNow := first.ConfigMap, first.File
	for _, a := range rec.Admissions {
		if a.ConfigMap != cmNow {
			cm := trustRoots(a.ConfigMap)
			if _, err := client.CoreV1().ConfigMaps(DefaultLinkerdNamespace).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := idx.Update(cm); err != nil {
				t.Fatal(err)
			}
			in.configMapChanged() // what the simulator's ConfigMap informer handler does
			cmNow = a.ConfigMap
		}
		if a.File != fileNow {
			if a.File != cmNow {
				t.Fatalf("%s: the file holds bundle %q, the ConfigMap %q: a kubelet refreshes the file to the ConfigMap's value", a.Moment, a.File, cmNow)
			}
			clk.Step(refresh) // the kubelet refreshes the volume
			fileNow = a.File
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + a.Layout, Namespace: rec.Namespace, Labels: map[string]string{"app": "web"}, Annotations: a.PodAnnotations},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
		}
		got := observeInjection(injectWithPatch(t, m, pod, ns, in.view()))
		for _, d := range diffAdmission(got, a) {
			t.Errorf("%s, %s (ConfigMap %s, file %s): %s differs from real Linkerd %s", a.Moment, a.Layout, a.ConfigMap, a.File, d, rec.Linkerd)
		}
	}
}

func readInjectorRecording(t *testing.T) injectorRecording {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "linkerd-proxy-injector", "config-change.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec injectorRecording
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// observeInjection reads what the recording records of an injected pod.
func observeInjection(pod *corev1.Pod) injectorAdmission {
	a := injectorAdmission{ProxyPlace: "(none)", RestartPolicy: "(none)", TrustAnchors: "(unset)",
		TrustRootSHA256: pod.Annotations[AnnotationTrustRootHash]}
	if p := ProxyOf(pod); p != nil {
		a.ProxyPlace, a.RestartPolicy, a.TrustAnchors = proxyPlace(pod), restartPolicy(p), envValue(p, EnvTrustAnchors)
	}
	return a
}

// diffAdmission names each field of what the injector wrote where got differs from want.
func diffAdmission(got, want injectorAdmission) []string {
	var diffs []string
	for _, f := range []struct{ name, got, want string }{
		{"proxy's place", got.ProxyPlace, want.ProxyPlace},
		{"proxy restartPolicy", got.RestartPolicy, want.RestartPolicy},
		{"env " + EnvTrustAnchors, got.TrustAnchors, want.TrustAnchors},
		{"annotation " + AnnotationTrustRootHash, got.TrustRootSHA256, want.TrustRootSHA256},
	} {
		if f.got != f.want {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %q, linkerd %q", f.name, f.got, f.want))
		}
	}
	return diffs
}

func TestDiffAdmissionNamesTheField(t *testing.T) {
	want := injectorAdmission{ProxyPlace: "initContainers, after 0 of the pod's own", RestartPolicy: "Always", TrustAnchors: "A\n", TrustRootSHA256: "h"}
	if d := diffAdmission(want, want); len(d) != 0 {
		t.Fatalf("identical admissions differ: %v", d)
	}
	for field, mutate := range map[string]func(*injectorAdmission){
		"proxy's place":                         func(a *injectorAdmission) { a.ProxyPlace = "containers, after 0 of the pod's own" },
		"proxy restartPolicy":                   func(a *injectorAdmission) { a.RestartPolicy = "(none)" },
		"env " + EnvTrustAnchors:                func(a *injectorAdmission) { a.TrustAnchors = "B\n" },
		"annotation " + AnnotationTrustRootHash: func(a *injectorAdmission) { a.TrustRootSHA256 = "" },
	} {
		got := want
		mutate(&got)
		if d := diffAdmission(got, want); len(d) != 1 || !strings.HasPrefix(d[0], field+":") {
			t.Errorf("differences %q, want one naming %q", d, field)
		}
	}
}
