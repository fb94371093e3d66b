package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/test/internal/proc"
)

// process is one component the cluster started. Every component gets its own log file, runs in
// its own process group (so a Ctrl-C in the terminal reaches the owner, which stops the
// components in order, rather than every component at once), and is reaped by a goroutine that
// records how it ended.
type process struct {
	name    string
	cmd     *exec.Cmd
	logFile string
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // how it exited; valid after done is closed
}

// PID returns the process id.
func (p *process) PID() int { return p.cmd.Process.Pid }

// exited reports an error naming the component if it is no longer running.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) exited: %v; see %s", p.name, p.PID(), p.err, p.logFile)
	default:
		return nil
	}
}

// startProcess starts bin with args, logging to logFile.
func startProcess(name, bin string, args []string, logFile string) (*process, error) {
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	defer out.Close() // the child holds its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(out, "# %s %s %q\n", time.Now().Format(time.RFC3339), bin, args)

	// Killed by the kernel should the owner die without stopping it (a test binary killed by
	// a timeout, a SIGKILL'd testbed).
	if err := proc.StartOrphanProof(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	klog.V(2).InfoS("Started component", "component", name, "pid", p.PID(), "log", logFile)
	return p, nil
}

// stop sends SIGTERM to the process (by its PID) and waits up to grace for it to exit, then sends
// SIGKILL and waits for the kernel to reap it. It returns an error only if the process could not
// be stopped; a component that dies of the signal is what stop asked for.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sending SIGTERM to %s (pid %d): %w", p.name, p.PID(), err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	klog.InfoS("Component ignored SIGTERM; killing it", "component", p.name, "pid", p.PID(), "grace", grace)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sending SIGKILL to %s (pid %d): %w", p.name, p.PID(), err)
	}
	// SIGKILL cannot be caught; the wait is bounded by the kernel tearing the process down.
	<-p.done
	return nil
}
