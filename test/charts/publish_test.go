package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/podrun"
)

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// published is what publish pushed to the test bed's registry.
type published struct {
	// Image is the operator image, <registry>/<repository>@<digest>.
	Image string
	// Repository and Digest are Image's parts, as the chart's image.repository and image.digest.
	Repository, Digest string
	// Charts is the charts' OCI repository, oci://<registry>/<path>, and ChartVersion their
	// version.
	Charts, ChartVersion string
	// AppVersion is the operator chart's appVersion: the version make image stamps.
	AppVersion string
	// ImageDir and ChartDir are make image's IMAGE_DIR and make chart's CHART_DIR: what make
	// sign signs is recorded there.
	ImageDir, ChartDir string
}

// publishedToBed is what publish pushed to the registry of this package's cluster, which lives
// as long as the package's tests: the tests that need an image share one build.
var publishedToBed *published

// publishOnce is publish, once per cluster.
func publishOnce(t *testing.T, ctx context.Context, c *cluster.Cluster, h Helm) published {
	t.Helper()
	if publishedToBed == nil || !strings.HasPrefix(publishedToBed.Repository, c.Registry()+"/") {
		if c.Registry() == "" {
			t.Fatal("the cluster has no registry (cluster.Options.Registry)")
		}
		// The build's directory is the cluster's, not this test's: the tests that come later
		// read IMAGE_DIR/ref and CHART_DIR/refs too.
		dir, err := os.MkdirTemp(c.WorkDir(), "publish-")
		if err != nil {
			t.Fatal(err)
		}
		p := publish(t, ctx, c.Registry(), h, dir)
		publishedToBed = &p
	}
	return *publishedToBed
}

// publish publishes the operator image and both charts to the registry reg (host:port, the test
// bed's) the way a release does, with the Makefile's own targets: `make image` (the image built
// without a Docker engine, on a base made here: IMAGE_BASE=local) pushed with IMAGE, and `make
// chart` (helm package and helm push) with CHART_REPO.
// make's output directories are under dir.
func publish(t *testing.T, ctx context.Context, reg string, h Helm, dir string) published {
	t.Helper()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	repo := reg + "/linkerd/trust-rotation"
	make := func(args ...string) string { t.Helper(); return runMake(t, ctx, h, nil, args...) }
	make("image", "IMAGE_BASE=local", "IMAGE="+repo, "IMAGE_DIR="+filepath.Join(dir, "image"))
	ref, err := os.ReadFile(filepath.Join(dir, "image", "ref"))
	if err != nil {
		t.Fatalf("make image IMAGE=%s wrote no reference: %v", repo, err)
	}
	image := strings.TrimSpace(string(ref))
	pushed, digest, _ := strings.Cut(image, "@")
	if pushed != repo || !digestRE.MatchString(digest) {
		t.Fatalf("make image IMAGE=%s printed %q, want %s@sha256:<digest>", repo, image, repo)
	}
	p := published{Image: image, Repository: repo, Digest: digest, Charts: "oci://" + reg + "/charts",
		ImageDir: filepath.Join(dir, "image"), ChartDir: filepath.Join(dir, "charts")}
	make("chart", "CHART_DIR="+p.ChartDir, "CHART_REPO="+p.Charts, "HELM_PUSH_FLAGS=--plain-http")
	checkReleaseManifest(t, ctx, h, p)

	// Both charts are released together, at one version (Install pins it for both).
	for _, name := range []string{CRDChart, OperatorChart} {
		chart, err := os.ReadFile(filepath.Join(root, "charts", name, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(chart, &meta); err != nil {
			t.Fatal(err)
		}
		if p.ChartVersion != "" && (meta.Version != p.ChartVersion || meta.AppVersion != p.AppVersion) {
			t.Fatalf("chart %s is at %s (app %s), the other at %s (app %s): release them together", name, meta.Version, meta.AppVersion, p.ChartVersion, p.AppVersion)
		}
		p.ChartVersion, p.AppVersion = meta.Version, meta.AppVersion
	}
	t.Logf("published %s and the charts %s at %s", p.Image, p.Charts, p.ChartVersion)
	return p
}

// runMake runs make in the module's root with args, helm's directories in h.Home and env added
// to the environment, and returns its output; a failure fails the test.
func runMake(t *testing.T, ctx context.Context, h Helm, env []string, args ...string) string {
	t.Helper()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", root}, args...)...)
	cmd.Env = append(append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"),
	), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("make %s: %s", args[0], time.Since(began).Round(time.Millisecond))
	return out.String()
}

// pullImage pulls ref as a container runtime does before it starts a container — the image of
// this machine's platform, its layers applied in order — with test/tools/oci's export (`crane
// export`'s flattening), unpacked with owners and modes as the layers hold them, and returns it
// with its configuration (entrypoint, cmd, environment, working directory, user).
func pullImage(t *testing.T, ctx context.Context, ref string) podrun.Image {
	t.Helper()
	bin, err := cluster.BinDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.json")
	export := exec.CommandContext(ctx, filepath.Join(bin, "oci"), "export", "--config", cfgPath, ref)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", root, "--same-owner", "--same-permissions", "--numeric-owner")
	var exportErr, untarErr bytes.Buffer
	export.Stderr, untar.Stderr = &exportErr, &untarErr
	if untar.Stdin, err = export.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := export.Run(); err != nil {
		_ = untar.Wait()
		t.Fatalf("pulling %s: %v\n%s", ref, err, exportErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", ref, err, untarErr.String())
	}
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cf struct {
		Config struct {
			Entrypoint, Cmd, Env []string
			WorkingDir, User     string
		} `json:"config"`
	}
	if err := json.Unmarshal(b, &cf); err != nil {
		t.Fatalf("the configuration of %s: %v", ref, err)
	}
	uid, gid, err := numericUser(root, cf.Config.User)
	if err != nil {
		t.Fatalf("the image %s: %v", ref, err)
	}
	return podrun.Image{
		Root: root, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Env: cf.Config.Env,
		WorkingDir: cf.Config.WorkingDir, UID: uid, GID: gid,
	}
}

// numericUser resolves an image's USER, "uid" or "uid:gid", as runc does: without a group, the
// user's group in the image's /etc/passwd, else 0. (A name is refused: a runAsNonRoot check
// needs a number, and this image uses numbers.)
func numericUser(root, user string) (uid, gid uint32, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	n, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("USER %q is not numeric", user)
	}
	uid = uint32(n)
	if passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd")); err == nil {
		for _, line := range strings.Split(string(passwd), "\n") {
			if f := strings.Split(line, ":"); len(f) >= 4 && f[2] == u {
				if m, err := strconv.ParseUint(f[3], 10, 32); err == nil {
					gid = uint32(m)
				}
			}
		}
	}
	if hasGroup {
		m, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("USER %q: the group is not numeric", user)
		}
		gid = uint32(m)
	}
	return uid, gid, nil
}

// checkReleaseManifest runs `make release-manifest` after make image pushed p.Image: the
// manifest holds the CRD first, then the operator chart's objects, its Deployment on p.Image by
// digest, and no Helm hook.
func checkReleaseManifest(t *testing.T, ctx context.Context, h Helm, p published) {
	t.Helper()
	dir := t.TempDir()
	runMake(t, ctx, h, nil, "release-manifest", "IMAGE_DIR="+p.ImageDir, "RELEASE_DIR="+dir)
	b, err := os.ReadFile(filepath.Join(dir, "trust-rotation-operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatalf("the release manifest does not decode: %v", err)
	}
	if len(objs) == 0 || objs[0].GetKind() != "CustomResourceDefinition" || objs[0].GetName() != "trustanchorrotations.trust.linkerd.io" {
		t.Fatalf("the release manifest does not start with the TrustAnchorRotation CRD")
	}
	dep := Find(objs, "Deployment", "trust-rotation-operator")
	if dep == nil {
		t.Fatal("the release manifest has no operator Deployment")
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 || containers[0].(map[string]any)["image"] != p.Image {
		t.Errorf("the release manifest's operator runs %v, want %s", containers, p.Image)
	}
	for _, o := range objs {
		if _, hook := o.GetAnnotations()["helm.sh/hook"]; hook {
			t.Errorf("the release manifest holds the Helm hook %s %s", o.GetKind(), o.GetName())
		}
	}
}
