package reallinkerd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/linkerd/trust-rotation/test/internal/proc"
)

// Controller is one run of a subcommand of Linkerd's control-plane binary (identity,
// proxy-injector), in a mount namespace of its own where its ConfigMap and Secret volumes are
// laid out as a kubelet lays them out, under /var/run/linkerd. It needs root (unshare --mount).
// The recordings and the bed's real-Linkerd mode (meshsim.Config.Linkerd) run the
// controllers through it.
type Controller struct {
	cmd    *exec.Cmd
	src    string
	onLine func(string)

	mu      sync.Mutex
	out     bytes.Buffer
	partial []byte
	done    chan struct{}
	swaps   int
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

// StartController runs bin with args, its files (keyed "<volume dir>/<file>", relative to
// /var/run/linkerd) laid out as volumes. onLine, when set, is called with each line the
// controller logs, in order. Like every process the bed starts, it dies with its parent.
func StartController(bin string, args []string, files map[string][]byte, onLine func(string)) (*Controller, error) {
	src, err := os.MkdirTemp("", "linkerd-controller-volumes-")
	if err != nil {
		return nil, err
	}
	for rel, b := range files {
		path := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			os.RemoveAll(src)
			return nil, err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			os.RemoveAll(src)
			return nil, err
		}
	}
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", volumeSetup, "sh", bin}, args...)...)
	cmd.Env = append(os.Environ(), "SRC="+src)
	c := &Controller{cmd: cmd, src: src, onLine: onLine, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c, c
	if err := proc.StartOrphanProof(cmd); err != nil {
		os.RemoveAll(src)
		return nil, fmt.Errorf("starting %s %v: %w", bin, args, err)
	}
	go func() {
		_ = cmd.Wait()
		os.RemoveAll(src)
		close(c.done)
	}()
	return c, nil
}

// Write collects the controller's output, and hands each complete line to onLine.
func (c *Controller) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(b)
	c.partial = append(c.partial, b...)
	var lines []string
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(c.partial[:i]))
		c.partial = c.partial[i+1:]
	}
	c.mu.Unlock()
	if c.onLine != nil {
		for _, l := range lines {
			c.onLine(l)
		}
	}
	return len(b), nil
}

// Log is everything the controller printed so far.
func (c *Controller) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// Done is closed once the controller exited.
func (c *Controller) Done() <-chan struct{} { return c.done }

// PID is the controller's process id.
func (c *Controller) PID() int { return c.cmd.Process.Pid }

var runningVersion = regexp.MustCompile(`running version ([^" ]+)`)

// Version is the version the controller logged at start, "" before it did.
func (c *Controller) Version() string {
	if m := runningVersion.FindStringSubmatch(c.Log()); m != nil {
		return m[1]
	}
	return ""
}

// Refresh writes a volume's files as a kubelet refreshes a ConfigMap or Secret volume: a new
// directory, then the ..data link renamed onto it.
func (c *Controller) Refresh(volume string, files map[string][]byte) error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited: its volumes are gone", c.cmd.Path)
	default:
	}
	c.mu.Lock()
	c.swaps++
	gen := fmt.Sprintf("..%d", c.swaps+1)
	c.mu.Unlock()
	dir := filepath.Join("/proc", strconv.Itoa(c.cmd.Process.Pid), "root", "run", "linkerd", volume)
	if err := os.Mkdir(filepath.Join(dir, gen), 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, gen, name), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.Symlink(gen, filepath.Join(dir, "..data_tmp")); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
}

// Stop kills the controller, as a kubelet kills a deleted pod's container once its grace period
// is over, and waits for it to exit.
func (c *Controller) Stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}
