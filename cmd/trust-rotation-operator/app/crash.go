package app

import (
	"context"
	"crypto/x509"
	"fmt"
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
// or "acted" (right after the act returned, before the status is projected). "<point>:<step>@<n>"
// names the n-th act of the step under one token (the checkpoint's acts), for a step that acts
// more than once, such as restart-identity scaling identity down and back up. It is read at
// start-up; when unset the hooks do nothing.
const CrashEnv = "TRUST_ROTATION_TEST_CRASH_AT"

var crashAt = os.Getenv(CrashEnv)

// currentStep and currentActs are the step whose act runs and its act count, for the "write"
// point (one reconcile at a time).
var (
	currentStep string
	currentActs int32
)

// crashPoint kills the process when the hook names this point and step (and act).
func crashPoint(point, step string, acts int32) {
	if point == "save" {
		currentStep, currentActs = step, acts
	}
	if crashAt == "" || crashAt != point+":"+step && crashAt != fmt.Sprintf("%s:%s@%d", point, step, acts) {
		return
	}
	klog.Background().Info("Crashing at the requested point (test hook)", "point", point, "step", step, "act", acts)
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
	crashPoint("write", currentStep, currentActs)
	return err
}

func (h writeHook) WriteTrustRoots(ctx context.Context, bundle string) error {
	err := h.Writer.WriteTrustRoots(ctx, bundle)
	crashPoint("write", currentStep, currentActs)
	return err
}

func (h writeHook) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	err := h.Writer.RestartDeployment(ctx, namespace, name, token)
	crashPoint("write", currentStep, currentActs)
	return err
}

func (h writeHook) DeletePods(ctx context.Context, namespace string, names []string) error {
	err := h.Writer.DeletePods(ctx, namespace, names)
	crashPoint("write", currentStep, currentActs)
	return err
}

func (h writeHook) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	err := h.Writer.ScaleDeployment(ctx, namespace, name, replicas)
	crashPoint("write", currentStep, currentActs)
	return err
}
