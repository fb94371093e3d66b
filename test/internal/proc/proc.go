// Package proc runs a binary — the operator, mostly — as a process of its own, the way the
// tests, the demo and the bench need it: output to a log file, an admin address on loopback,
// stopped by its PID (SIGTERM, then SIGKILL), never left behind.
package proc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Process is a started binary.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	// LogPath is the file that receives the process's stdout and stderr.
	LogPath string
}

// Start runs bin with args, the current environment plus env, and stdout and stderr appended
// to logPath (created or truncated).
func Start(bin string, args, env []string, logPath string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return StartCommand(cmd, logPath)
}

// StartCommand starts cmd, prepared by the caller (its environment, extra files, namespaces),
// with stdout and stderr appended to logPath (created or truncated). Like every process this
// package starts, it is killed should its parent die without stopping it (StartOrphanProof).
func StartCommand(cmd *exec.Cmd, logPath string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), LogPath: logPath}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := StartOrphanProof(p.cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// StartOrphanProof starts cmd with Pdeathsig=SIGKILL, so that the kernel kills it if this process
// dies without stopping it: a test binary killed by its timeout must not leave an operator or an
// apiserver behind, holding ports, files and the test bed's lock. Linux sends that signal when
// the parent *thread* exits, and the Go runtime may retire threads, so every process is forked
// from one goroutine locked to its OS thread for the life of the program.
func StartOrphanProof(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	spawnRequests <- func() { errc <- cmd.Start() }
	return <-errc
}

// spawnRequests feeds StartOrphanProof's goroutine, locked to its OS thread and never unlocked.
var spawnRequests = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread()
		for f := range spawnRequests {
			f()
		}
	}()
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode is the process's exit status once it has exited (-1 when a signal ended it); it
// waits for the exit.
func (p *Process) ExitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM (an operator leading releases its Lease) and, if the process has not exited
// within grace, SIGKILL; it returns once the process is gone, and whether it had to be killed.
func (p *Process) Stop(grace time.Duration) (killed bool) {
	if p.Exited() {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return false
	case <-timer.C:
		p.Kill()
		return true
	}
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// LogTail returns the last lines of the process's log.
func (p *Process) LogTail(lines int) string {
	data, _ := os.ReadFile(p.LogPath)
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// FreeAddr returns a loopback address with a port free at the time of the call, for a process's
// listener (its --admin-addr).
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Get returns the body of GET http://addr<path>; a status other than 200 is an error that
// carries the body.
func Get(ctx context.Context, addr, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, err
}
