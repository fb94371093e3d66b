package proc

import (
	"path/filepath"
	"strings"
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
