package reallinkerd_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/linkerd/trust-rotation/test/internal/proc"
)

// controllerProc is one run of a subcommand of Linkerd's control-plane binary (identity,
// proxy-injector), in a mount namespace of its own where its ConfigMap and Secret volumes are
// laid out as a kubelet lays them out, under /var/run/linkerd.
type controllerProc struct {
	cmd   *exec.Cmd
	addr  string // its gRPC or webhook address
	admin string // its admin (metrics, readiness) address
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan struct{}
	swaps int
}

func (p *controllerProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *controllerProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

var runningVersion = regexp.MustCompile(`running version ([^" ]+)`)

// version is the version the controller logged at start.
func (p *controllerProc) version() string {
	if m := runningVersion.FindStringSubmatch(p.log()); m != nil {
		return m[1]
	}
	return ""
}

// volumeSetup lays out, under /run/linkerd (/var/run/linkerd), each volume of $SRC as a kubelet
// lays out a ConfigMap or Secret volume: the files in ..1, a ..data link to it, and a link per
// file through ..data. $SRC/<volume dir>/<file> becomes /run/linkerd/<volume dir>/<file>.
const volumeSetup = `set -e
mount -t tmpfs tmpfs /run
cd "$SRC"
for f in $(find . -type f); do
	rel=${f#./}; vol=/run/linkerd/$(dirname "$rel"); name=$(basename "$rel")
	mkdir -p "$vol/..1"
	cp "$rel" "$vol/..1/$name"
	[ -L "$vol/..data" ] || ln -s ..1 "$vol/..data"
	ln -s "..data/$name" "$vol/$name"
done
cd /
exec "$@"`

// startController runs bin with args, -kubeconfig, -addr and adminFlag set to free addresses,
// and files (keyed "<volume dir>/<file>", relative to /var/run/linkerd) laid out as volumes.
func startController(t *testing.T, bin string, args []string, kubeconfig, adminFlag string, files map[string][]byte) *controllerProc {
	t.Helper()
	src := t.TempDir()
	for rel, b := range files {
		path := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]string{}, args...), "-kubeconfig="+kubeconfig, "-addr="+addr, adminFlag+"="+admin)
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", volumeSetup, "sh", bin}, all...)...)
	cmd.Env = append(os.Environ(), "SRC="+src)
	p := &controllerProc{cmd: cmd, addr: addr, admin: admin, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

// refresh writes a volume's files as a kubelet refreshes a ConfigMap or Secret volume: a new
// directory, then the ..data link renamed onto it.
func (p *controllerProc) refresh(t *testing.T, volume string, files map[string][]byte) {
	t.Helper()
	p.swaps++
	dir := filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "root", "run", "linkerd", volume)
	gen := fmt.Sprintf("..%d", p.swaps+1)
	if err := os.Mkdir(filepath.Join(dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, gen, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(gen, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func (p *controllerProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
