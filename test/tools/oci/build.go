package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's shape, as distroless's static:nonroot has it and the chart's security context
// expects: user and group 65532, its home the working directory, binaries in /usr/local/bin.
const (
	nonroot  = 65532
	home     = "/home/nonroot"
	binDir   = "/usr/local/bin"
	pathEnv  = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	certFile = "/etc/ssl/certs/ca-certificates.crt"
	// LocalBase names the base this tool makes from this machine rather than pulls.
	localBase = "local"
)

type buildOptions struct {
	out, bins, base, caCerts, version, source, revision string
	platforms, binaries                                 []string
	created                                             time.Time
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var o buildOptions
	var platforms, binaries string
	fs.StringVar(&o.out, "out", "", "the OCI layout to write (replaced)")
	fs.StringVar(&o.bins, "bin-dir", "", "the binaries, one directory per platform: <bin-dir>/<os>_<arch>/<binary>")
	fs.StringVar(&binaries, "binaries", "trust-rotation-operator,linkerd-trust", "the binaries to ship; the first is the entrypoint")
	fs.StringVar(&platforms, "platforms", "linux/amd64", "comma-separated os/arch list")
	fs.StringVar(&o.base, "base", "", `the base image, pinned by digest (name:tag@sha256:...), or "local": a base made here (see localBaseLayer)`)
	fs.StringVar(&o.caCerts, "ca-certs", certFile, "with --base=local: the CA bundle to ship (Debian's ca-certificates)")
	fs.StringVar(&o.version, "version", "", "the version the binaries are stamped with; the layout's tag")
	fs.StringVar(&o.source, "source", "", "the source repository URL (org.opencontainers.image.source)")
	fs.StringVar(&o.revision, "revision", "", "the source revision (org.opencontainers.image.revision)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.out == "" || o.bins == "" || o.base == "" || o.version == "" {
		return fmt.Errorf("--out, --bin-dir, --base and --version are required")
	}
	o.platforms, o.binaries = strings.Split(platforms, ","), strings.Split(binaries, ",")
	// Reproducible: every time in the image is SOURCE_DATE_EPOCH's, or the epoch.
	o.created = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		o.created = time.Unix(sec, 0).UTC()
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var sboms []v1.Image
	for _, p := range o.platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return err
		}
		img, sbom, err := o.image(*plat)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
		sboms = append(sboms, sbom)
	}
	idx = mutate.Annotations(idx, o.labels()).(v1.ImageIndex)

	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	l, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return err
	}
	if err := l.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version})); err != nil {
		return err
	}
	for _, s := range sboms {
		if err := l.AppendImage(s); err != nil {
			return err
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", o.out, d)
	return nil
}

func (o *buildOptions) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   o.binaries[0],
		"org.opencontainers.image.version": o.version,
		"org.opencontainers.image.created": o.created.Format(time.RFC3339),
	}
	if o.source != "" {
		l["org.opencontainers.image.source"] = o.source
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	if o.base != localBase {
		l["org.opencontainers.image.base.name"] = o.base
	}
	return l
}

// image assembles one platform's image and its SBOM.
func (o *buildOptions) image(plat v1.Platform) (v1.Image, v1.Image, error) {
	base, err := o.baseImage(plat)
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(o.bins, plat.OS+"_"+plat.Architecture)
	var files []file
	var infos []*buildinfo.BuildInfo
	for _, b := range o.binaries {
		path := filepath.Join(dir, b)
		info, err := o.checkBinary(path)
		if err != nil {
			return nil, nil, err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, file{path: binDir + "/" + b, mode: 0o755, data: data})
		infos = append(infos, info)
	}
	app, err := o.layer(files)
	if err != nil {
		return nil, nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: app, History: v1.History{
		Created: v1.Time{Time: o.created}, CreatedBy: "oci build: " + strings.Join(o.binaries, ", ") + " to " + binDir,
	}})
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: o.created}
	cfg := &cf.Config
	cfg.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.Entrypoint = []string{binDir + "/" + o.binaries[0]}
	cfg.Cmd = nil
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = home
	}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	for k, v := range o.labels() {
		cfg.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, nil, err
	}
	img = mutate.Annotations(img, o.labels()).(v1.Image)
	sbom, err := o.sbom(img, plat, infos)
	return img, sbom, err
}

// checkBinary refuses a binary the image must not ship: dynamically linked (the base has no
// libc) or built with cgo. (Its version stamp is not in its build information: -trimpath leaves
// -ldflags out; make image checks it by running the binary.)
func (o *buildOptions) checkBinary(path string) (*buildinfo.BuildInfo, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (build it first: make image builds it)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", path)
		}
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: reading its build information: %w", path, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		return nil, fmt.Errorf("%s was built with CGO_ENABLED=%q; want 0", path, settings["CGO_ENABLED"])
	}
	return info, nil
}

// baseImage is the base for plat: pulled by digest, or made here.
func (o *buildOptions) baseImage(plat v1.Platform) (v1.Image, error) {
	if o.base != localBase {
		ref, err := name.NewDigest(o.base)
		if err != nil {
			return nil, fmt.Errorf("the base %q is not pinned by digest (name:tag@sha256:...): %w", o.base, err)
		}
		return remote.Image(ref, remote.WithPlatform(plat))
	}
	ca, err := os.ReadFile(o.caCerts)
	if err != nil {
		return nil, fmt.Errorf("the base's CA certificates: %w (install Debian's ca-certificates, or pass --ca-certs)", err)
	}
	layer, err := o.localBaseLayer(ca)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.created}, CreatedBy: "oci build: a static base (passwd, group, CA certificates, /tmp, " + home + ")",
	}})
	if err != nil {
		return nil, err
	}
	return mutate.Config(img, v1.Config{
		User:       strconv.Itoa(nonroot),
		WorkingDir: home,
		Env:        []string{pathEnv, "SSL_CERT_FILE=" + certFile},
	})
}

// localBaseLayer is what a static Go binary needs of distroless's static:nonroot, made from this
// machine: the users (root, nobody, nonroot 65532) and groups, CA certificates, a resolver
// configuration that consults /etc/hosts first, a world-writable /tmp and nonroot's home.
func (o *buildOptions) localBaseLayer(ca []byte) (v1.Layer, error) {
	return o.layer([]file{
		{path: "/etc", mode: 0o755 | os.ModeDir},
		{path: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n")},
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "/etc/ssl", mode: 0o755 | os.ModeDir},
		{path: "/etc/ssl/certs", mode: 0o755 | os.ModeDir},
		{path: certFile, mode: 0o644, data: ca},
		{path: "/home", mode: 0o755 | os.ModeDir},
		{path: home, mode: 0o700 | os.ModeDir, uid: nonroot, gid: nonroot},
		{path: "/root", mode: 0o700 | os.ModeDir},
		{path: "/tmp", mode: 0o777 | os.ModeDir | os.ModeSticky},
	})
}

// file is an entry of a layer.
type file struct {
	path     string
	mode     os.FileMode
	uid, gid int
	data     []byte
}

// layer makes an OCI layer of files, every time o.created; parent directories of files under
// binDir are added as root's 0755.
func (o *buildOptions) layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, f := range files {
		for _, d := range parents(f.path) {
			if seen[d] || containsDir(files, d) {
				continue
			}
			seen[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: o.created, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: f.path[1:], Mode: int64(f.mode.Perm()), Uid: f.uid, Gid: f.gid, ModTime: o.created, Format: tar.FormatPAX}
		if f.mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		seen[f.path] = true
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

func parents(p string) []string {
	var out []string
	for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

func containsDir(files []file, d string) bool {
	for _, f := range files {
		if f.path == d {
			return true
		}
	}
	return false
}
