package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/test/cluster"
)

// make sign signs what a release pushes with sigstore's cosign, the real tool: this test pushes
// the image and both charts to a registry of the test bed (alone, without a cluster) with make
// image and make chart, signs them with make sign and a throwaway key pair (the release signs
// keyless, which needs GitHub's OIDC and sigstore's public services), and verifies each with
// `cosign verify --key`: the image's index, the image of each platform, and both charts. An
// unsigned digest, and a signed one checked against another key, fail verification; make sign
// refuses to sign an image of another repository than IMAGE.
func TestSignWithCosign(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds and pushes the image, and runs a registry and cosign")
	}
	ctx := testContext(t, 30*time.Minute) // a cold build of cosign takes minutes
	bin, err := cluster.BinDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg, err := cluster.StartRegistry(ctx, bin, filepath.Join(dir, "registry"), filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Stop(); err != nil {
			t.Error(err)
		}
	})
	helms, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := helms[0]
	pub := publish(t, ctx, reg.Addr, h, t.TempDir())
	charts := chartRefs(t, pub)
	platforms := platformImages(t, ctx, pub)

	cs := newCosign(t, ctx)
	signer, other := cs.keyPair("signer"), cs.keyPair("other")

	// Before make sign, nothing verifies: the digest is unsigned.
	if out, err := cs.verify(signer, pub.Image); err == nil || !strings.Contains(err.Error(), "no signatures found") {
		t.Fatalf("cosign verify of the unsigned %s: %v, want no signatures found:\n%s", pub.Image, err, out)
	} else {
		t.Logf("before make sign, cosign verify %s fails: %v", pub.Image, err)
	}

	sign := func(image string) []string {
		return []string{"sign", "COSIGN_KEY=" + signer + ".key", "COSIGN_TLOG=false",
			"IMAGE=" + image, "CHART_REPO=" + pub.Charts, "IMAGE_DIR=" + pub.ImageDir, "CHART_DIR=" + pub.ChartDir}
	}
	// A reference of another repository than IMAGE is refused, and signs nothing.
	if out, err := cs.make(sign(reg.Addr + "/another/repository")...); err == nil || !strings.Contains(out, "not an image of IMAGE="+reg.Addr+"/another/repository") {
		t.Errorf("make sign with another IMAGE: %v, want a refusal naming IMAGE:\n%s", err, out)
	}
	if out, err := cs.verify(signer, pub.Image); err == nil || !strings.Contains(err.Error(), "no signatures found") {
		t.Fatalf("after a refused make sign, cosign verify %s: %v, want no signatures found:\n%s", pub.Image, err, out)
	}

	out, err := cs.make(sign(pub.Repository)...)
	if err != nil {
		t.Fatalf("make sign: %v\n%s", err, out)
	}
	t.Logf("make sign:\n%s", out)
	for _, ref := range append(append([]string{pub.Image}, platforms...), charts...) {
		out, err := cs.verify(signer, ref)
		if err != nil {
			t.Errorf("cosign verify --key %s.pub %s: %v", filepath.Base(signer), ref, err)
			continue
		}
		// cosign prints the payloads it verified: each names the digest it signs.
		var payloads []struct {
			Critical struct {
				Image struct {
					Digest string `json:"docker-manifest-digest"`
				} `json:"image"`
			} `json:"critical"`
		}
		if err := json.Unmarshal([]byte(out), &payloads); err != nil || len(payloads) == 0 {
			t.Errorf("cosign verify %s printed no payload (%v):\n%s", ref, err, out)
			continue
		}
		_, digest, _ := strings.Cut(ref, "@")
		for _, p := range payloads {
			if p.Critical.Image.Digest != digest {
				t.Errorf("cosign verify %s: a signature of %s", ref, p.Critical.Image.Digest)
			}
		}
		t.Logf("cosign verify --key %s.pub %s: verified", filepath.Base(signer), ref)
	}
	// Another key does not verify what the signer signed.
	for _, ref := range []string{pub.Image, charts[0]} {
		if out, err := cs.verify(other, ref); err == nil || !strings.Contains(err.Error(), "failed to verify signature") {
			t.Errorf("cosign verify %s with a key that did not sign it: %v, want failed to verify signature:\n%s", ref, err, out)
		} else {
			t.Logf("cosign verify --key %s.pub %s fails: %v", filepath.Base(other), ref, err)
		}
	}
}

// chartRefs returns what make chart recorded it pushed: both charts, by digest, in pub.Charts.
func chartRefs(t *testing.T, pub published) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pub.ChartDir, "refs"))
	if err != nil {
		t.Fatalf("make chart recorded no references: %v", err)
	}
	refs := strings.Fields(string(b))
	for _, name := range []string{CRDChart, OperatorChart} {
		found := false
		for _, ref := range refs {
			repo, digest, _ := strings.Cut(ref, "@")
			found = found || (repo == strings.TrimPrefix(pub.Charts, "oci://")+"/"+name && digestRE.MatchString(digest))
		}
		if !found {
			t.Fatalf("make chart's references %q lack %s/%s@<digest>", refs, pub.Charts, name)
		}
	}
	if len(refs) != 2 {
		t.Fatalf("make chart's references %q: want the two charts", refs)
	}
	return refs
}

// platformImages returns the references of the images of pub's index, one for each of make
// image's default PLATFORMS (linux/amd64 and linux/arm64), as the registry serves the index.
func platformImages(t *testing.T, ctx context.Context, pub published) []string {
	t.Helper()
	registry, repo, _ := strings.Cut(pub.Repository, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+registry+"/v2/"+repo+"/manifests/"+pub.Digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var index struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&index); err != nil {
		t.Fatalf("the index %s: %v", pub.Image, err)
	}
	var refs, platforms []string
	for _, m := range index.Manifests {
		refs = append(refs, pub.Repository+"@"+m.Digest)
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if got := strings.Join(platforms, ","); got != "linux/amd64,linux/arm64" {
		t.Fatalf("the index %s holds images for %q, want make image's default platforms linux/amd64,linux/arm64", pub.Image, got)
	}
	return refs
}

// cosignRunner runs the cosign make sign uses, with a configuration of its own: no Docker
// credentials, sigstore's TUF cache in a temporary directory.
type cosignRunner struct {
	t        *testing.T
	ctx      context.Context
	bin, dir string
	env      []string
}

// cosignPassword encrypts the test's throwaway keys, as `cosign generate-key-pair` asks.
const cosignPassword = "throwaway"

func newCosign(t *testing.T, ctx context.Context) *cosignRunner {
	t.Helper()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	build := exec.CommandContext(ctx, filepath.Join(root, "scripts", "tools.sh"), "path", "cosign")
	build.Stdout, build.Stderr = &out, &errb
	if err := build.Run(); err != nil {
		t.Fatalf("scripts/tools.sh path cosign: %v\n%s", err, errb.String())
	}
	dir := t.TempDir()
	c := &cosignRunner{t: t, ctx: ctx, bin: filepath.Join(strings.TrimSpace(out.String()), "cosign"), dir: dir,
		env: []string{"COSIGN_PASSWORD=" + cosignPassword, "DOCKER_CONFIG=" + filepath.Join(dir, "docker"), "TUF_ROOT=" + filepath.Join(dir, "tuf")}}
	out2, err := c.run("version", "--json")
	if err != nil {
		t.Fatalf("cosign version: %v", err)
	}
	var version struct{ GitVersion string }
	if err := json.Unmarshal([]byte(out2), &version); err != nil || version.GitVersion == "" {
		t.Fatalf("cosign version --json: %v:\n%s", err, out2)
	}
	t.Logf("cosign %s, %s", version.GitVersion, c.bin)
	return c
}

func (c *cosignRunner) run(args ...string) (string, error) {
	cmd := exec.CommandContext(c.ctx, c.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// keyPair generates a key pair, <name>.key and <name>.pub, and returns their path without the
// extension.
func (c *cosignRunner) keyPair(name string) string {
	c.t.Helper()
	prefix := filepath.Join(c.dir, name)
	if _, err := c.run("generate-key-pair", "--output-key-prefix", prefix); err != nil {
		c.t.Fatalf("cosign generate-key-pair: %v", err)
	}
	return prefix
}

// verify runs `cosign verify --key <key>.pub ref`, without the transparency log this test's
// signatures are not in, and returns what it printed.
func (c *cosignRunner) verify(key, ref string) (string, error) {
	return c.run("verify", "--key", key+".pub", "--insecure-ignore-tlog=true", ref)
}

// make runs make with cosign's environment and returns its output and error.
func (c *cosignRunner) make(args ...string) (string, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(c.ctx, "make", append([]string{"--no-print-directory", "-C", root}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}
