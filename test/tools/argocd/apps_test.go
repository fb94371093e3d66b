package argocd

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

type application struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Source struct {
			Chart string `json:"chart"`
		} `json:"source"`
		IgnoreDifferences []struct {
			Kind         string   `json:"kind"`
			JSONPointers []string `json:"jsonPointers"`
		} `json:"ignoreDifferences"`
		SyncPolicy struct {
			SyncOptions []string `json:"syncOptions"`
		} `json:"syncPolicy"`
	} `json:"spec"`
}

// The example's Applications sync in the order the README promises: the PKI, the CRDs, the
// operator (which bootstraps the trust bundle), then Linkerd, which ignores restartedAt.
func TestApplicationsSyncInOrder(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "manifests", "argocd", "apps")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Applications in %s: %v", dir, err)
	}
	wave := map[string]int{}
	apps := map[string]application{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var app application
		// The struct is partial: unknown fields are expected.
		if err := yaml.Unmarshal(data, &app); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if app.Kind != "Application" {
			t.Fatalf("%s: kind %q", f, app.Kind)
		}
		w, err := strconv.Atoi(app.Metadata.Annotations["argocd.argoproj.io/sync-wave"])
		if err != nil {
			t.Fatalf("%s: sync wave: %v", f, err)
		}
		wave[app.Metadata.Name], apps[app.Metadata.Name] = w, app
	}
	order := []string{"linkerd-cert-manager", "trust-rotation-operator-crds", "trust-rotation-operator", "linkerd-control-plane"}
	for i := 1; i < len(order); i++ {
		if wave[order[i-1]] >= wave[order[i]] {
			t.Errorf("%s (wave %d) must sync before %s (wave %d)", order[i-1], wave[order[i-1]], order[i], wave[order[i]])
		}
	}
	lcp := apps["linkerd-control-plane"]
	found := false
	for _, d := range lcp.Spec.IgnoreDifferences {
		for _, p := range d.JSONPointers {
			found = found || (d.Kind == "Deployment" && p == "/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt")
		}
	}
	if !found {
		t.Error("linkerd-control-plane does not ignore kubectl.kubernetes.io/restartedAt")
	}
	respect := false
	for _, o := range lcp.Spec.SyncPolicy.SyncOptions {
		respect = respect || o == "RespectIgnoreDifferences=true"
	}
	if !respect {
		t.Error("linkerd-control-plane does not respect its ignoreDifferences on sync")
	}
}
