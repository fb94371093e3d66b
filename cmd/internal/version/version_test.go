package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// make image stamps the version into both binaries: built with its -ldflags (VERSION_VAR and
// VERSION substituted), each binary prints that version, not "dev".
func TestMakeImageStampsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	root := filepath.Join("..", "..", "..")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`go build -trimpath -ldflags "([^"]*)"`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile's image target has no go build -trimpath -ldflags \"...\"")
	}
	v := regexp.MustCompile(`(?m)^VERSION_VAR := (\S+)$`).FindSubmatch(makefile)
	if v == nil {
		t.Fatal("the Makefile sets no VERSION_VAR")
	}
	const want = "v9.8.7-test"
	ldflags := strings.NewReplacer("$(VERSION_VAR)", string(v[1]), "$(VERSION)", want).Replace(string(m[1]))
	if !strings.Contains(ldflags, "-X "+string(v[1])+"="+want) {
		t.Fatalf("the Makefile's -ldflags %q do not set %s to $(VERSION)", m[1], v[1])
	}
	out := t.TempDir()
	build := exec.Command("go", "build", "-ldflags="+ldflags, "-o", out+string(filepath.Separator), "./cmd/trust-rotation-operator", "./cmd/linkerd-trust")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags=%q: %v\n%s", ldflags, err, b)
	}
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{"linkerd-trust", []string{"version", "--short"}, want + "\n"},
		{"linkerd-trust", []string{"version", "--client"}, "linkerd-trust version: " + want + "\n"},
		{"trust-rotation-operator", []string{"--version"}, "trust-rotation-operator version: " + want + "\n"},
	} {
		got, err := exec.Command(filepath.Join(out, c.bin), c.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", c.bin, c.args, err, got)
		}
		if string(got) != c.want {
			t.Errorf("%s %v printed %q, want %q", c.bin, c.args, got, c.want)
		}
	}
}

// make release-binaries, for the host's platform only: each binary is named
// <binary>-<version>-<os>-<arch>, says its version, and sha256sums.txt lists exactly them in
// the format `sha256sum -c` checks.
func TestMakeReleaseBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	goenv, err := exec.Command("go", "env", "GOOS", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	osArch := strings.Fields(string(goenv))
	platform := osArch[0] + "/" + osArch[1]
	const version = "v9.8.7-release"
	dir := t.TempDir()
	root := filepath.Join("..", "..", "..")
	mk := exec.Command("make", "--no-print-directory", "release-binaries", "VERSION="+version, "RELEASE_DIR="+dir,
		"CLI_PLATFORMS="+platform, "OPERATOR_PLATFORMS="+platform)
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release-binaries: %v\n%s", err, out)
	}
	suffix := "-" + version + "-" + osArch[0] + "-" + osArch[1]
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{"linkerd-trust", []string{"version", "--client"}, "linkerd-trust version: " + version + "\n"},
		{"trust-rotation-operator", []string{"--version"}, "trust-rotation-operator version: " + version + "\n"},
	} {
		got, err := exec.Command(filepath.Join(dir, c.bin+suffix), c.args...).CombinedOutput()
		if err != nil || string(got) != c.want {
			t.Errorf("%s %v: %q, %v; want %q", c.bin+suffix, c.args, got, err, c.want)
		}
	}
	sums, err := os.ReadFile(filepath.Join(dir, "sha256sums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			listed = append(listed, f[1])
		}
	}
	if want := []string{"linkerd-trust" + suffix, "trust-rotation-operator" + suffix}; strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Errorf("sha256sums.txt lists %q, want %q:\n%s", listed, want, sums)
	}
	if sha, err := exec.LookPath("sha256sum"); err == nil {
		check := exec.Command(sha, "-c", "sha256sums.txt")
		check.Dir = dir
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c: %v\n%s", err, out)
		}
	}
}
