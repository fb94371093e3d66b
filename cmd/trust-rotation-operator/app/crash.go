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
// "write" (right after the act's first write, whichever Writer method made it, the automations'
// included: the middle of an act that writes more than once) or "acted" (right after the act
// returned, before the status is projected). "<point>:<step>@<n>" names the n-th act of the
// step under one token (the checkpoint's acts), for a step that acts more than once, such as
// restart-identity scaling identity down and back up. "jump:<step>" names the moment right after
// the checkpoint of a jump decided at that step was saved (a rotation superseded by a newer
// anchor), before its Event and the status projection. The operator's main reads it at start-up
// into Options.CrashAt; when unset the hooks do nothing.
const CrashEnv = "TRUST_ROTATION_TEST_CRASH_AT"

// crashHook is the test-only fault hook of one controller (Options.CrashAt and Options.Crash).
type crashHook struct {
	// at is the point it crashes at, "<point>:<step>[@<n>]"; "" for none.
	at string
	// crash ends the process; killSelf unless a test replaces it.
	crash func()
	// step and acts are the step whose act runs and its act count, for the "write" point: set
	// when the checkpoint is saved (one reconcile at a time).
	step string
	acts int32
}

func newCrashHook(at string, crash func()) *crashHook {
	if crash == nil {
		crash = killSelf
	}
	return &crashHook{at: at, crash: crash}
}

// killSelf SIGKILLs the process, as a crash would, and never returns.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns: the signal is fatal
}

// point crashes when the hook names this point and step (and act).
func (h *crashHook) point(point, step string, acts int32) {
	if point == "save" {
		h.step, h.acts = step, acts
	}
	if h.at == "" || h.at != point+":"+step && h.at != fmt.Sprintf("%s:%s@%d", point, step, acts) {
		return
	}
	klog.Background().Info("Crashing at the requested point (test hook)", "point", point, "step", step, "act", acts)
	klog.Flush()
	h.crash()
}

// writer wraps w with the "write" crash point when the hook names one.
func (h *crashHook) writer(w steps.Writer) steps.Writer {
	if !strings.HasPrefix(h.at, "write:") {
		return w
	}
	return writeHook{Writer: w, hook: h}
}

// writeHook passes the "write" crash point after every write of the Writer, whether it failed
// or not: every method of steps.Writer is wrapped (TestWriteHookCoversEveryWriterMethod).
type writeHook struct {
	steps.Writer
	hook *crashHook
}

var _ steps.Writer = writeHook{}

// wrote passes the "write" point of the step whose act runs, and returns err.
func (h writeHook) wrote(err error) error {
	h.hook.point("write", h.hook.step, h.hook.acts)
	return err
}

func (h writeHook) WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error {
	return h.wrote(h.Writer.WritePreviousAnchor(ctx, cert))
}

func (h writeHook) WriteTrustRoots(ctx context.Context, bundle string) error {
	return h.wrote(h.Writer.WriteTrustRoots(ctx, bundle))
}

func (h writeHook) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	return h.wrote(h.Writer.RestartDeployment(ctx, namespace, name, token))
}

func (h writeHook) DeletePods(ctx context.Context, namespace string, names []string) error {
	return h.wrote(h.Writer.DeletePods(ctx, namespace, names))
}

func (h writeHook) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	return h.wrote(h.Writer.ScaleDeployment(ctx, namespace, name, replicas))
}

func (h writeHook) RestartWorkload(ctx context.Context, w steps.WorkloadRef, token string, annotations map[string]*string) error {
	return h.wrote(h.Writer.RestartWorkload(ctx, w, token, annotations))
}

func (h writeHook) AnnotateWorkload(ctx context.Context, w steps.WorkloadRef, annotations map[string]string) error {
	return h.wrote(h.Writer.AnnotateWorkload(ctx, w, annotations))
}

func (h writeHook) EvictPods(ctx context.Context, w steps.WorkloadRef, names []string) (int, error) {
	n, err := h.Writer.EvictPods(ctx, w, names)
	return n, h.wrote(err)
}

func (h writeHook) RenewCertificate(ctx context.Context, namespace, name string) error {
	return h.wrote(h.Writer.RenewCertificate(ctx, namespace, name))
}
