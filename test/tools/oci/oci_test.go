package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A static binary of this machine's platform, with build information, under the two names the
// image ships.
func staticBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() { println(\"hello\") }\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bins := filepath.Join(dir, "bin", "linux_amd64")
	for _, b := range []string{"trust-rotation-operator", "linkerd-trust"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bins, b), ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	return filepath.Join(dir, "bin")
}

// The image built on the local base, pushed to go-containerregistry's registry and pulled back
// by digest, is what the chart expects: user 65532, the operator as the entrypoint, both
// binaries, a nonroot entry in /etc/passwd, a sticky /tmp, CA certificates, and an SPDX SBOM
// referring to it.
func TestBuildPushExport(t *testing.T) {
	bins := staticBinaries(t)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "layout")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if err := build([]string{"--out", out, "--bin-dir", bins, "--base", "local", "--ca-certs", ca, "--version", "v1.2.3"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true)))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/linkerd/trust-rotation"
	stdout := os.Stdout
	r, w, _ := os.Pipe()
	os.Stdout = w
	err := push([]string{"--layout", out, "--image", repo})
	os.Stdout = stdout
	w.Close()
	printed, _ := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(strings.TrimSpace(string(printed)))
	if err != nil {
		t.Fatalf("push printed %q: %v", printed, err)
	}
	tagged, err := remote.Head(ref.Context().Tag("v1.2.3"))
	if err != nil || tagged.Digest.String() != ref.DigestStr() {
		t.Errorf("the tag v1.2.3 is %v (%v), want %s", tagged, err, ref.DigestStr())
	}

	img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/trust-rotation-operator" ||
		cf.Config.WorkingDir != "/home/nonroot" || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("config %+v", cf.Config)
	}
	if cf.Created.Unix() != 1700000000 {
		t.Errorf("created %s, want SOURCE_DATE_EPOCH's", cf.Created)
	}
	files := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		if h.Name == "etc/passwd" {
			b, _ := io.ReadAll(tr)
			if !strings.Contains(string(b), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd:\n%s", b)
			}
		}
	}
	for path, mode := range map[string]int64{
		"usr/local/bin/trust-rotation-operator": 0o755, "usr/local/bin/linkerd-trust": 0o755,
		"tmp": 0o1777, "etc/ssl/certs/ca-certificates.crt": 0o644, "home/nonroot": 0o700,
	} {
		h := files[path]
		if h == nil {
			t.Errorf("the image has no /%s", path)
			continue
		}
		if h.Mode&0o7777 != mode {
			t.Errorf("/%s has mode %o, want %o", path, h.Mode&0o7777, mode)
		}
	}
	if h := files["home/nonroot"]; h != nil && (h.Uid != 65532 || h.Gid != 65532) {
		t.Errorf("/home/nonroot is owned by %d:%d, want 65532:65532", h.Uid, h.Gid)
	}

	// The SBOM refers to the platform's image.
	imgDigest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := remote.Referrers(ref.Context().Digest(imgDigest.String()))
	if err != nil {
		t.Fatal(err)
	}
	im, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d referrers of %s, want the SBOM", len(im.Manifests), imgDigest)
	}
	sbom, err := remote.Image(ref.Context().Digest(im.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := sbom.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != spdxMediaType || m.Subject == nil || m.Subject.Digest != imgDigest || len(m.Layers) != 1 {
		t.Fatalf("SBOM manifest %+v", m)
	}
	layers, err := sbom.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var doc spdxDocument
	if err := json.NewDecoder(rc).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range doc.Packages {
		names = append(names, p.Name)
	}
	if doc.SPDXVersion != "SPDX-2.3" || !strings.Contains(strings.Join(names, " "), "stdlib") || !strings.Contains(strings.Join(names, " "), "linkerd-trust") {
		t.Errorf("SBOM %s lists %v", doc.SPDXVersion, names)
	}

	// Reproducible: the same inputs give the same index.
	again := filepath.Join(t.TempDir(), "layout")
	if err := build([]string{"--out", again, "--bin-dir", bins, "--base", "local", "--ca-certs", ca, "--version", "v1.2.3"}); err != nil {
		t.Fatal(err)
	}
	a, _ := layout.ImageIndexFromPath(out)
	b, _ := layout.ImageIndexFromPath(again)
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of the same inputs differ: %s, %s", da, db)
	}
}

// A binary that needs a dynamic loader would not start on the base: refused.
func TestBuildRefusesDynamicBinaries(t *testing.T) {
	bins := filepath.Join(t.TempDir(), "linux_amd64")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Skip(err)
	}
	data, err := os.ReadFile(ls)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"trust-rotation-operator", "linkerd-trust"} {
		if err := os.WriteFile(filepath.Join(bins, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	err = build([]string{"--out", filepath.Join(t.TempDir(), "layout"), "--bin-dir", filepath.Dir(bins), "--base", "local", "--version", "v1"})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("building on %s: %v, want a refusal of a dynamically linked binary", ls, err)
	}
}
