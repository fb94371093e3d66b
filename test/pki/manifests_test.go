package pki_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/pki"
)

// The PKI manifests the project ships (manifests/cert-manager) are the objects every test
// installs (Manifests with the default options), field for field.
func TestShippedPKIManifests(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "cert-manager", "linkerd-pki.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	want := pki.Manifests(pki.Options{})
	targets := []any{&cmapi.Issuer{}, &cmapi.Certificate{}, &cmapi.ClusterIssuer{}, &cmapi.Certificate{}}
	wants := []any{want.RootIssuer, want.TrustAnchor, want.IdentityClusterIssuer, want.IdentityIssuer}
	if len(docs) != len(targets) {
		t.Fatalf("manifests/cert-manager/linkerd-pki.yaml has %d documents, want %d", len(docs), len(targets))
	}
	for i, doc := range docs {
		if err := yaml.UnmarshalStrict([]byte(doc), targets[i]); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		if !equality.Semantic.DeepEqual(targets[i], wants[i]) {
			got, _ := yaml.Marshal(targets[i])
			exp, _ := yaml.Marshal(wants[i])
			t.Errorf("document %d differs from what the tests install:\n%s\nwant:\n%s", i+1, got, exp)
		}
	}
}

// The Linkerd values shipped for an external CA are the ones the Argo CD example gives Linkerd.
func TestShippedLinkerdValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "linkerd", "external-ca-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"identity": map[string]any{"externalCA": true, "issuer": map[string]any{"scheme": "kubernetes.io/tls"}}}
	if !reflect.DeepEqual(values, want) {
		t.Errorf("manifests/linkerd/external-ca-values.yaml is %v, want %v", values, want)
	}
	// The takeover's two helm upgrades are the --set values the operator's blocking messages
	// print (steps.State.HelmUpgrade): external-ca-values.yaml is the second.
	b, err = os.ReadFile(filepath.Join("..", "..", "manifests", "linkerd", "takeover-handover-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values = nil
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	s := &steps.State{Config: steps.DefaultConfig(),
		ControlPlane: map[string]steps.Deployment{"linkerd-identity": {IssuerScheme: steps.SchemeLinkerd}}}
	for _, c := range []struct {
		file, cmd string
		values    map[string]any
	}{
		{"takeover-handover-values.yaml", s.HandoverUpgrade(), values},
		{"external-ca-values.yaml", s.SchemeSwitch(), want},
	} {
		if got := setValues(t, c.cmd); !reflect.DeepEqual(got, c.values) {
			t.Errorf("manifests/linkerd/%s is %v; the operator asks for %v (%s)", c.file, c.values, got, c.cmd)
		}
	}
	app, err := os.ReadFile(filepath.Join("..", "..", "manifests", "argocd", "apps", "linkerd-control-plane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Spec struct {
			Source struct {
				Helm struct {
					ValuesObject map[string]any `json:"valuesObject"`
				} `json:"helm"`
			} `json:"source"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(app, &a); err != nil {
		t.Fatal(err)
	}
	if got := a.Spec.Source.Helm.ValuesObject["identity"]; !reflect.DeepEqual(got, want["identity"]) {
		t.Errorf("the Argo CD example gives Linkerd identity %v, the shipped values %v", got, want["identity"])
	}
}

// setValues are the values a helm command's --set flags give, nested as a values file holds them.
func setValues(t *testing.T, cmd string) map[string]any {
	t.Helper()
	out := map[string]any{}
	fields := strings.Fields(cmd)
	for i, f := range fields {
		if f != "--set" || i+1 == len(fields) {
			continue
		}
		key, value, _ := strings.Cut(fields[i+1], "=")
		m := out
		path := strings.Split(key, ".")
		for _, p := range path[:len(path)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		var v any = value
		if value == "true" {
			v = true
		}
		m[path[len(path)-1]] = v
	}
	return out
}
