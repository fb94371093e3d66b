package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// namedTB is a testing.TB of another name whose cleanups run when asked.
type namedTB struct {
	testing.TB
	name     string
	cleanups []func()
}

func (n *namedTB) Name() string     { return n.name }
func (n *namedTB) Cleanup(f func()) { n.cleanups = append(n.cleanups, f) }
func (n *namedTB) end() {
	for _, f := range n.cleanups {
		f()
	}
}

func TestTimingsSlowestFirst(t *testing.T) {
	var tm timings
	var quiet strings.Builder
	tm.render(&quiet)
	if quiet.String() != "" {
		t.Errorf("no test ran, yet: %q", quiet.String())
	}

	top := &namedTB{TB: t, name: "TestTop"}
	tm.track(top)
	tm.track(top) // a second Shared call of the same test
	sub := &namedTB{TB: t, name: "TestTop/sub"}
	tm.track(sub)
	top.end()
	sub.end()
	if len(tm.took) != 1 || tm.took[0].name != "TestTop" {
		t.Fatalf("tracked %+v, want TestTop once and not its subtest", tm.took)
	}

	tm.took = nil
	for i := range 12 {
		tm.took = append(tm.took, testTime{name: "Test" + string(rune('A'+i)), took: time.Duration(i+1) * time.Second})
	}
	tm.start = 15 * time.Second
	var got strings.Builder
	tm.render(&got)
	want := "--- 12 tests on the shared cluster took 1m18s (its start 15s); the slowest: TestL 12s, TestK 11s, TestJ 10s, TestI 9s, TestH 8s, " +
		"TestG 7s, TestF 6s, TestE 5s, TestD 4s, TestC 3s ---\n"
	if got.String() != want {
		t.Errorf("got\n%s\nwant\n%s", got.String(), want)
	}
}

// TestTimingsAppendedToTheFile: the line goes to the file the environment names, after the
// package's directory in the module, and appends to what is there (two lanes share the file).
func TestTimingsAppendedToTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timings")
	if err := os.WriteFile(path, []byte("test/e2e: earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var none timings
	if err := none.appendTo(path); err != nil {
		t.Fatal(err)
	}
	tm := timings{took: []testTime{{name: "TestA", took: 2 * time.Second}}, start: time.Second}
	if err := tm.appendTo(""); err != nil {
		t.Fatalf("no file named: %v", err)
	}
	if err := tm.appendTo(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "test/e2e: earlier\ntest/cluster: --- 1 tests on the shared cluster took 2s (its start 1s); the slowest: TestA 2s ---\n"
	if string(got) != want {
		t.Errorf("file holds\n%s\nwant\n%s", got, want)
	}
}
