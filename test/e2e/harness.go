// Package e2e runs the operator and the CLI end to end on the local test cluster (test/cluster)
// with the real cert-manager issuing Linkerd's PKI (test/pki) and the Linkerd mesh simulator
// with its mTLS oracle (test/meshsim). The helpers here are shared by the end-to-end tests.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binary builds (once per test binary) the named command of this module and returns its path.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := cluster.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		binDir, buildErr = os.MkdirTemp("", "trust-rotation-e2e-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./cmd/trust-rotation-operator", "./cmd/linkerd-trust")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			// The CLI may not exist yet in a partial tree; build the operator alone then.
			cmd = exec.Command("go", "build", "-o", binDir+"/", "./cmd/trust-rotation-operator")
			cmd.Dir = root
			if out2, err2 := cmd.CombinedOutput(); err2 != nil {
				buildErr = fmt.Errorf("go build: %v\n%s\n%s", err2, out, out2)
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// CleanupBinaries removes the binaries Binary built; call it from TestMain.
func CleanupBinaries() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Operator is a trust-rotation-operator process running out of cluster.
type Operator struct {
	t         testing.TB
	cmd       *exec.Cmd
	done      chan struct{}
	AdminAddr string
	LogPath   string
}

// StartOperatorWithEnv runs the operator binary with kubeconfig, args and extra environment
// variables ("POD_NAMESPACE=linkerd", as a Deployment's pod has them), logging to a file in the
// test's temp dir. It is killed at the end of the test if still running.
func StartOperatorWithEnv(t testing.TB, env []string, kubeconfig string, args ...string) *Operator {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	o := &Operator{t: t, AdminAddr: "127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	logFile, err := os.CreateTemp(t.TempDir(), "operator-*.log")
	if err != nil {
		t.Fatal(err)
	}
	o.LogPath = logFile.Name()
	all := append([]string{"--kubeconfig", kubeconfig, "--admin-addr", o.AdminAddr, "-v=2"}, args...)
	o.cmd = exec.Command(Binary(t, "trust-rotation-operator"), all...)
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	o.cmd.Env = append(os.Environ(), env...)
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = o.cmd.Wait()
		logFile.Close()
		close(o.done)
	}()
	t.Cleanup(func() {
		o.Kill()
		if t.Failed() {
			o.DumpLog(80)
		}
	})
	return o
}

// Kill ends the operator with SIGKILL, as a crash would, and waits for it to exit.
func (o *Operator) Kill() {
	if o.cmd.Process != nil {
		_ = o.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-o.done
}

// Stop asks the operator to stop (SIGTERM) and waits for it to exit.
func (o *Operator) Stop() {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	<-o.done
}

// Exited reports whether the process has exited.
func (o *Operator) Exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// DumpLog writes the last lines of the operator's log to the test log.
func (o *Operator) DumpLog(lines int) {
	data, _ := os.ReadFile(o.LogPath)
	o.t.Logf("operator log (%s), last %d lines:\n%s", o.LogPath, lines, tail(string(data), lines))
}

// Metrics returns the operator's /metrics text.
func (o *Operator) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.AdminAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// WaitRotation waits until the TrustAnchorRotation satisfies cond, reporting its phase and
// blocking message when it times out.
func WaitRotation(ctx context.Context, tars *client.Client, name string, timeout time.Duration, what string,
	cond func(*v1alpha1.TrustAnchorRotation) bool) (*v1alpha1.TrustAnchorRotation, error) {
	var last *v1alpha1.TrustAnchorRotation
	err := poll.Until(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		tar, err := tars.Get(ctx, name)
		if err != nil {
			return false, poll.Pending("getting TrustAnchorRotation %s: %v", name, err)
		}
		last = tar
		if cond(tar) {
			return true, nil
		}
		return false, poll.Pending("phase %s, step %s: %q", tar.Status.Phase, stepOf(tar), tar.Status.BlockingMessage)
	})
	return last, err
}

// WaitPhase waits until the rotation is in phase.
func WaitPhase(ctx context.Context, tars *client.Client, name string, phase v1alpha1.Phase, timeout time.Duration) (*v1alpha1.TrustAnchorRotation, error) {
	return WaitRotation(ctx, tars, name, timeout, "phase "+string(phase), func(t *v1alpha1.TrustAnchorRotation) bool {
		return t.Status.Phase == phase
	})
}

func stepOf(tar *v1alpha1.TrustAnchorRotation) string {
	if tar.Status.Checkpoint == nil {
		return ""
	}
	return tar.Status.Checkpoint.Step
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			lines++
			if lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}
