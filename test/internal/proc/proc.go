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
// with stdout and stderr appended to logPath (created or truncated).
func StartCommand(cmd *exec.Cmd, logPath string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), LogPath: logPath}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
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

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

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
