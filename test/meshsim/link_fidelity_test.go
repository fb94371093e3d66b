package meshsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// linkRecording is what the real `linkerd multicluster link-gen` rendered
// (testdata/linkerd-multicluster/link-gen.json, recorded by TestLinkerdMulticlusterLinkGen in
// test/reallinkerd with -update). The kubeconfig's shape is replayed by test/reallinkerd, which
// has a cluster to build one with.
type linkRecording struct {
	Comment string   `json:"comment"`
	Linkerd string   `json:"linkerd"`
	Command []string `json:"command"`
	Secrets []struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Type        string            `json:"type"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		DataKeys    []string          `json:"dataKeys"`
		Kubeconfig  json.RawMessage   `json:"kubeconfig"`
	} `json:"secrets"`
	Link struct {
		APIVersion  string            `json:"apiVersion"`
		Kind        string            `json:"kind"`
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
		Spec        map[string]any    `json:"spec"`
	} `json:"link"`
}

// TestLinkMatchesLinkerd replays the recording against LinkObjects, the objects the multicluster
// tests, the demo and the test bed link their clusters with (meshsim.Link), for the same
// target and gateway address: every credentials Secret (namespace and name, type, labels,
// annotations, data keys) and the Link (apiVersion, kind, namespace and name, and every field
// of its spec). The Link's linkerd.io/created-by annotation names the CLI's version and is
// not compared.
func TestLinkMatchesLinkerd(t *testing.T) {
	rec := readLinkRecording(t)
	target, gateway := flagValue(rec.Command, "--cluster-name"), flagValue(rec.Command, "--gateway-addresses")
	if target == "" || gateway == "" {
		t.Fatalf("the recorded command %q names no --cluster-name or --gateway-addresses", rec.Command)
	}
	secrets, link := LinkObjects(LinkOptions{Target: target, GatewayAddress: gateway, Kubeconfig: []byte("kubeconfig")})
	for _, d := range diffLink(rec, secrets, link) {
		t.Errorf("%s (real: linkerd %s, %s)", d, rec.Linkerd, strings.Join(rec.Command, " "))
	}
}

func readLinkRecording(t *testing.T) linkRecording {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "linkerd-multicluster", "link-gen.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec linkRecording
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// diffLink names each object and field where the simulator's link differs from the recording.
func diffLink(rec linkRecording, secrets []*corev1.Secret, link *unstructured.Unstructured) []string {
	var diffs []string
	differ := func(field string, got, want any) {
		g, w := canonical(got), canonical(want)
		if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %s, linkerd %s", field, g, w))
		}
	}
	byKey := map[string]*corev1.Secret{}
	for _, s := range secrets {
		byKey[s.Namespace+"/"+s.Name] = s
	}
	for _, want := range rec.Secrets {
		key := want.Namespace + "/" + want.Name
		got, ok := byKey[key]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("Secret %s: the simulator makes none", key))
			continue
		}
		delete(byKey, key)
		keys := make([]string, 0, len(got.Data))
		for k := range got.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		differ("Secret "+key+" type", string(got.Type), want.Type)
		differ("Secret "+key+" labels", got.Labels, want.Labels)
		differ("Secret "+key+" annotations", got.Annotations, want.Annotations)
		differ("Secret "+key+" data keys", keys, want.DataKeys)
	}
	for key := range byKey {
		diffs = append(diffs, fmt.Sprintf("Secret %s: the simulator makes it, linkerd does not", key))
	}
	l := rec.Link
	differ("Link apiVersion", link.GetAPIVersion(), l.APIVersion)
	differ("Link kind", link.GetKind(), l.Kind)
	differ("Link name", link.GetNamespace()+"/"+link.GetName(), l.Namespace+"/"+l.Name)
	spec, _, _ := unstructured.NestedMap(link.Object, "spec")
	fields := map[string]bool{}
	for k := range spec {
		fields[k] = true
	}
	for k := range l.Spec {
		fields[k] = true
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		differ("Link spec."+k, spec[k], l.Spec[k])
	}
	return diffs
}

// canonical is v as JSON, with empty maps and lists written as null: the recording keeps
// Kubernetes' omitted fields as null.
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	switch string(b) {
	case "{}", "[]":
		return "null"
	}
	return string(b)
}

func TestDiffLinkNamesTheField(t *testing.T) {
	rec := readLinkRecording(t)
	target, gateway := flagValue(rec.Command, "--cluster-name"), flagValue(rec.Command, "--gateway-addresses")
	for field, mutate := range map[string]func([]*corev1.Secret, *unstructured.Unstructured){
		"Secret linkerd-multicluster/cluster-credentials-" + target + " labels": func(s []*corev1.Secret, _ *unstructured.Unstructured) {
			s[0].Labels = map[string]string{"a": "b"}
		},
		"Secret linkerd/cluster-credentials-" + target + " annotations": func(s []*corev1.Secret, _ *unstructured.Unstructured) { s[1].Annotations = nil },
		"Link spec.probeSpec": func(_ []*corev1.Secret, l *unstructured.Unstructured) {
			unstructured.RemoveNestedField(l.Object, "spec", "probeSpec")
		},
		"Link spec.clusterCredentialsSecret": func(_ []*corev1.Secret, l *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(l.Object, "other", "spec", "clusterCredentialsSecret")
		},
	} {
		secrets, link := LinkObjects(LinkOptions{Target: target, GatewayAddress: gateway, Kubeconfig: []byte("kubeconfig")})
		if d := diffLink(rec, secrets, link); len(d) != 0 {
			t.Fatalf("the simulator differs before any change: %q", d)
		}
		mutate(secrets, link)
		if d := diffLink(rec, secrets, link); len(d) != 1 || !strings.HasPrefix(d[0], field+":") {
			t.Errorf("differences %q, want one naming %q", d, field)
		}
	}
}
