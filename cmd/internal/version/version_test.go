package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Dockerfile's build stamps the version into both binaries: built with its own -ldflags
// (VERSION substituted), each binary prints that version, not "dev".
func TestDockerfileStampsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	root := filepath.Join("..", "..", "..")
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-ldflags="([^"]*)"`).FindSubmatch(dockerfile)
	if m == nil {
		t.Fatal("the Dockerfile's go build has no -ldflags=\"...\"")
	}
	const want = "v9.8.7-test"
	ldflags := strings.ReplaceAll(string(m[1]), "${VERSION}", want)
	if ldflags == string(m[1]) {
		t.Fatalf("the Dockerfile's -ldflags %q do not use ${VERSION}", m[1])
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
		{"linkerd-trust", []string{"version"}, "linkerd-trust version: " + want + "\n"},
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
