package app

import (
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

// writer wraps w with the "write" crash point when the hook names one: it passes the point
// after every write of the Writer, whether it failed or not.
func (h *crashHook) writer(w steps.Writer) steps.Writer {
	if !strings.HasPrefix(h.at, "write:") {
		return w
	}
	return observeWrites(w, func(bool) { h.point("write", h.step, h.acts) })
}
