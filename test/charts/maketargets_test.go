package charts

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/test/cluster"
)

// TestReleaseTargetsBuildOnlyTheirTools runs `make chart` and `make image` as a user does from a
// checkout, with no TRUST_ROTATION_TOOLS_BIN: each builds the one tool it runs (Helm, the image
// builder) and none of the test bed (etcd, Kubernetes, kwok, cert-manager). The tools cache holds
// only those two (taken from this machine's cache, so nothing is built here); a target that
// asked for the bed would build it into the cache, which the test then finds. make image builds
// for linux/amd64 and linux/arm64 by default.
func TestReleaseTargetsBuildOnlyTheirTools(t *testing.T) {
	ctx := testContext(t, 15*time.Minute)
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", "tools.sh"), "list").Output()
	if err != nil {
		t.Fatalf("scripts/tools.sh list: %v", err)
	}
	cache := t.TempDir()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line) // name version path
		if len(f) != 3 || (f[0] != "helm3" && f[0] != "oci") {
			continue
		}
		if _, err := os.Stat(filepath.Join(f[2], ".done")); err != nil {
			t.Skipf("%s is not built in this machine's tools cache (%v)", f[0], err)
		}
		if err := os.Symlink(f[2], filepath.Join(cache, filepath.Base(f[2]))); err != nil {
			t.Fatal(err)
		}
	}
	helms, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"TRUST_ROTATION_TOOLS_BIN=", "TRUST_ROTATION_CACHE=" + cache}
	dir := t.TempDir()
	runMake(t, ctx, helms[0], env, "chart", "CHART_DIR="+filepath.Join(dir, "charts"))
	runMake(t, ctx, helms[0], env, "image", "IMAGE_BASE=local", "IMAGE_DIR="+filepath.Join(dir, "image"))

	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); !strings.HasPrefix(name, "helm3-") && !strings.HasPrefix(name, "oci-") {
			t.Errorf("the tools cache gained %s: make chart or make image built more than its tool", name)
		}
	}
	charts, _ := filepath.Glob(filepath.Join(dir, "charts", "*.tgz"))
	if len(charts) != 2 {
		t.Errorf("make chart packaged %v, want both charts", charts)
	}
	if got, want := imagePlatforms(t, filepath.Join(dir, "image", "oci")), []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Errorf("make image built %v, want %v by default", got, want)
	}
	// The operator the image ships has no crash hook: only a -tags crashpoints build reads the
	// end-to-end tests' variable, whose name is then in the binary.
	operators, _ := filepath.Glob(filepath.Join(dir, "image", "bin", "*", "trust-rotation-operator"))
	if len(operators) != 2 {
		t.Fatalf("make image built the operators %v, want one per platform", operators)
	}
	for _, bin := range operators {
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(app.CrashEnv)) {
			t.Errorf("%s reads %s: the released operator has the tests' crash hook", bin, app.CrashEnv)
		}
	}
}

// imagePlatforms reads the platforms of the image index an OCI layout holds.
func imagePlatforms(t *testing.T, layout string) []string {
	t.Helper()
	type index struct {
		Manifests []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Platform  *struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	read := func(path string) index {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var ix index
		if err := json.Unmarshal(b, &ix); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return ix
	}
	// The layout lists the image's index, and the SBOMs attached to it as referrers.
	var indexes []string
	for _, m := range read(filepath.Join(layout, "index.json")).Manifests {
		if m.MediaType == "application/vnd.oci.image.index.v1+json" {
			indexes = append(indexes, m.Digest)
		}
	}
	if len(indexes) != 1 {
		t.Fatalf("the layout's index.json lists the image indexes %v, want the image's alone", indexes)
	}
	algo, hex, _ := strings.Cut(indexes[0], ":")
	var platforms []string
	for _, m := range read(filepath.Join(layout, "blobs", algo, hex)).Manifests {
		if m.Platform != nil && m.Platform.OS != "unknown" {
			platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		}
	}
	slices.Sort(platforms)
	return platforms
}
