package app

import (
	"context"
	"crypto/x509"
	"os"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
)

// CrashEnv names the environment variable of a test-only fault hook: the end-to-end tests set
// it to "<point>:<step>" to make the operator kill itself with SIGKILL, as a crash would, at
// that point of that step — "save" (right after the checkpoint is saved, before the act),
// "write" (right after the act's first write: the middle of an act that writes more than once)
// or "acted" (right after the act returned, before the status is projected). It is read at
// start-up; when unset the hooks do nothing.
const CrashEnv = "TRUST_ROTATION_TEST_CRASH_AT"

var crashAt = os.Getenv(CrashEnv)

// currentStep is the step whose act runs, for the "write" point (one reconcile at a time).
var currentStep string

// crashPoint kills the process when the hook names this point and step.
func crashPoint(point, step string) {
	if point == "save" {
		currentStep = step
	}
	if crashAt == "" || crashAt != point+":"+step {
		return
	}
	klog.Background().Info("Crashing at the requested point (test hook)", "point", point, "step", step)
	klog.Flush()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns: the signal is fatal
}

// crashWriter wraps w with the "write" crash point when the hook is set.
func crashWriter(w steps.Writer) steps.Writer {
	if !strings.HasPrefix(crashAt, "write:") {
		return w
	}
	return writeHook{w}
}

type writeHook struct{ steps.Writer }

func (h writeHook) WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error {
	err := h.Writer.WritePreviousAnchor(ctx, cert)
	crashPoint("write", currentStep)
	return err
}

func (h writeHook) WriteTrustRoots(ctx context.Context, bundle string) error {
	err := h.Writer.WriteTrustRoots(ctx, bundle)
	crashPoint("write", currentStep)
	return err
}

func (h writeHook) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	err := h.Writer.RestartDeployment(ctx, namespace, name, token)
	crashPoint("write", currentStep)
	return err
}

func (h writeHook) DeletePods(ctx context.Context, namespace string, names []string) error {
	err := h.Writer.DeletePods(ctx, namespace, names)
	crashPoint("write", currentStep)
	return err
}
