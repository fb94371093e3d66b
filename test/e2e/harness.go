// Package e2e runs the operator and the CLI end to end on the local test cluster (test/cluster)
// with the real cert-manager issuing Linkerd's PKI (test/pki) and the Linkerd mesh simulator
// with its mTLS oracle (test/meshsim). The helpers here are shared by the end-to-end tests.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/internal/proc"
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
		// -tags crashpoints: the operator reads the fault hook (app.CrashEnv) the fault tests set.
		cmd := exec.Command("go", "build", "-tags", "crashpoints", "-o", binDir+"/", "./cmd/trust-rotation-operator", "./cmd/linkerd-trust")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			// The CLI may not exist yet in a partial tree; build the operator alone then.
			cmd = exec.Command("go", "build", "-tags", "crashpoints", "-o", binDir+"/", "./cmd/trust-rotation-operator")
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
	*proc.Process
	t         testing.TB
	AdminAddr string
	// elects is false for an operator run with --leader-elect=false; identity is its
	// --leader-election-identity, "" for the default (hostname_pid).
	elects   bool
	identity string
}

// StartOperatorWithEnv runs the operator binary with kubeconfig, args and extra environment
// variables ("POD_NAMESPACE=linkerd", as a Deployment's pod has them), logging to a file in the
// test's temp dir. At the end of the test it is stopped as Kubernetes stops a pod (SIGTERM, then
// SIGKILL after a grace period): it gives its leader Lease up, so the next test's operator leads
// at once instead of reading a status the killed one left while the Lease runs out.
func StartOperatorWithEnv(t testing.TB, env []string, kubeconfig string, args ...string) *Operator {
	t.Helper()
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{"--kubeconfig", kubeconfig, "--admin-addr", addr, "-v=2"}, args...)
	logPath := filepath.Join(t.TempDir(), "operator.log")
	p, err := proc.Start(Binary(t, "trust-rotation-operator"), all, env, logPath)
	if err != nil {
		t.Fatal(err)
	}
	o := &Operator{Process: p, t: t, AdminAddr: addr, elects: true}
	for i, a := range args {
		switch {
		case a == "--leader-elect=false":
			o.elects = false
		case strings.HasPrefix(a, "--leader-election-identity="):
			o.identity = strings.TrimPrefix(a, "--leader-election-identity=")
		case a == "--leader-election-identity" && i+1 < len(args):
			o.identity = args[i+1]
		}
	}
	t.Cleanup(func() {
		if o.Process.Stop(operatorGrace) {
			t.Logf("the operator ignored SIGTERM for %s: killed it", operatorGrace)
		}
		if t.Failed() {
			o.DumpLog(80)
		}
	})
	return o
}

// WaitLeading waits until the operator holds its leader Lease (the chart's name, in namespace):
// its identity, hostname_pid by default, ends in its PID. An operator that elects no leader
// (--leader-elect=false) leads from its start.
func (o *Operator) WaitLeading(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	if !o.elects {
		return nil
	}
	suffix := "_" + strconv.Itoa(o.PID())
	if o.identity != "" {
		suffix = o.identity
	}
	return poll.Until(ctx, time.Minute, "the operator leading", func(ctx context.Context) (bool, error) {
		if o.Exited() {
			return false, fmt.Errorf("the operator exited (code %d) before it led:\n%s", o.ExitCode(), o.LogTail(20))
		}
		l, err := kube.CoordinationV1().Leases(namespace).Get(ctx, "trust-rotation-operator", metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("reading Lease %s/trust-rotation-operator: %v", namespace, err)
		}
		if h := l.Spec.HolderIdentity; h == nil || !strings.HasSuffix(*h, suffix) {
			return false, poll.Pending("Lease %s/trust-rotation-operator held by %v", namespace, l.Spec.HolderIdentity)
		}
		return true, nil
	})
}

// operatorGrace is how long a stopped operator may take to exit: the chart's pod's
// terminationGracePeriodSeconds, Kubernetes' default.
const operatorGrace = 30 * time.Second

// Stop asks the operator to stop (SIGTERM) and waits for it to exit.
func (o *Operator) Stop() {
	if o.Process.Stop(operatorGrace) {
		o.t.Logf("the operator ignored SIGTERM for %s: killed it", operatorGrace)
	}
}

// DumpLog writes the last lines of the operator's log to the test log.
func (o *Operator) DumpLog(lines int) {
	o.t.Logf("operator log (%s), last %d lines:\n%s", o.LogPath, lines, o.LogTail(lines))
}

// Metrics returns the operator's /metrics text.
func (o *Operator) Metrics(ctx context.Context) (string, error) {
	b, err := proc.Get(ctx, o.AdminAddr, "/metrics")
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
