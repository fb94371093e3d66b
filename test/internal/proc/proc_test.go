package proc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func start(t *testing.T, script string) *Process {
	t.Helper()
	p, err := Start("/bin/sh", []string{"-c", script}, []string{"GREETING=hello"}, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestStopEndsAProcessThatHeedsSIGTERM(t *testing.T) {
	p := start(t, `echo "$GREETING"; echo ready; exec sleep 60`)
	waitLog(t, p, "ready")
	if p.Stop(time.Minute) {
		t.Error("Stop killed a process that exits on SIGTERM")
	}
	if !p.Exited() {
		t.Error("Exited() is false after Stop")
	}
	if got := p.LogTail(1); got != "ready" {
		t.Errorf("LogTail(1) = %q, want ready", got)
	}
	if got := p.LogTail(5); got != "hello\nready" {
		t.Errorf("LogTail(5) = %q: want the environment passed and both lines", got)
	}
}

func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	p := start(t, `trap '' TERM; echo ready; while :; do sleep 1; done`)
	waitLog(t, p, "ready")
	if !p.Stop(100 * time.Millisecond) {
		t.Error("Stop did not report killing a process that ignores SIGTERM")
	}
	if !p.Exited() {
		t.Error("Exited() is false after Stop")
	}
}

// waitLog waits until the process logged line (it has installed its signal handling by then).
func waitLog(t *testing.T, p *Process, line string) {
	t.Helper()
	for !strings.Contains(p.LogTail(10), line) {
		select {
		case <-p.Done():
			t.Fatalf("exited before logging %q: %q", line, p.LogTail(10))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// orphanParentEnv makes the test binary, run again as a child, start a long sleep with Start,
// print its PID and wait to be killed.
const orphanParentEnv = "PROC_TEST_ORPHAN_PARENT"

func TestMain(m *testing.M) {
	if logPath := os.Getenv(orphanParentEnv); logPath != "" {
		p, err := Start("/bin/sleep", []string{"600"}, nil, logPath)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(p.PID())
		select {} // killed by the test
	}
	os.Exit(m.Run())
}

func TestAProcessDiesWithItsParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), orphanParentEnv+"="+filepath.Join(t.TempDir(), "log"))
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		_ = parent.Process.Kill()
		t.Fatalf("the parent printed %q (%v), not the child's PID", line, err)
	}
	child, _ := os.FindProcess(pid)
	t.Cleanup(func() { _ = child.Kill() })
	if err := child.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child (pid %d) is not running while its parent is: %v", pid, err)
	}
	_ = parent.Process.Kill() // dies without stopping its child, as a test binary on timeout
	_ = parent.Wait()
	// The child is not ours to reap: it is gone once signal 0 finds no process, or a zombie
	// (state Z) left to its new parent.
	deadline := time.Now().Add(time.Minute)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child (pid %d) outlived its killed parent by a minute: %s", pid, stat)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc: a process's end raises no event we can wait on
	}
}
