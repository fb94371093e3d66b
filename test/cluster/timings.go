package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A package of tests on the shared cluster runs for minutes, inside a `make test` that has a
// budget (README); without -v, go test prints only the package's total. timings keeps how long
// each top-level test ran, from its first Shared call to the end of its cleanups (its share of
// the cluster's start included), and ForTest prints the slowest, so that whoever must keep the
// suite in its budget sees where the time goes in any CI log. go test shows a passing package's
// output only under -v, so ForTest also appends the line to the file TimingsFileEnv names, which
// scripts/test-lanes.sh prints at the end of `make test`.

// TimingsFileEnv names the environment variable that holds the file ForTest appends its line of
// timings to, prefixed with the package's directory; unset, it appends to none.
const TimingsFileEnv = "TRUST_ROTATION_TEST_TIMINGS"

// timingsShown is how many of the slowest tests ForTest prints.
const timingsShown = 10

type timings struct {
	mu      sync.Mutex
	started map[string]bool
	took    []testTime
	start   time.Duration // the shared cluster's start
}

type testTime struct {
	name string
	took time.Duration
}

// track records t's time once, if it is a top-level test.
func (tm *timings) track(t testing.TB) {
	name := t.Name()
	if strings.Contains(name, "/") {
		return
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.started == nil {
		tm.started = map[string]bool{}
	}
	if tm.started[name] {
		return
	}
	tm.started[name] = true
	begin := time.Now()
	t.Cleanup(func() {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		tm.took = append(tm.took, testTime{name: name, took: time.Since(begin)})
	})
}

// render writes the tests' total and the slowest of them to w; nothing when no test ran on the
// shared cluster.
func (tm *timings) render(w io.Writer) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if len(tm.took) == 0 {
		return
	}
	var total time.Duration
	for _, x := range tm.took {
		total += x.took
	}
	slowest := slices.Clone(tm.took)
	slices.SortStableFunc(slowest, func(a, b testTime) int { return int(b.took - a.took) })
	if len(slowest) > timingsShown {
		slowest = slowest[:timingsShown]
	}
	names := make([]string, len(slowest))
	for i, x := range slowest {
		names[i] = fmt.Sprintf("%s %s", x.name, round(x.took))
	}
	fmt.Fprintf(w, "--- %d tests on the shared cluster took %s (its start %s); the slowest: %s ---\n",
		len(tm.took), round(total), round(tm.start), strings.Join(names, ", "))
}

// appendTo appends what render writes to the file named by the environment (TimingsFileEnv),
// after the package's directory; nothing when it is unset or no test ran on the cluster.
func (tm *timings) appendTo(path string) error {
	if path == "" {
		return nil
	}
	var line strings.Builder
	tm.render(&line)
	if line.Len() == 0 {
		return nil
	}
	dir, err := os.Getwd() // go test runs a package's tests in its directory
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// One write of one line: two lanes append to the same file.
	_, err = f.WriteString(moduleRelative(dir) + ": " + line.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// moduleRelative is dir relative to the module's root (the nearest go.mod above it), dir itself
// when there is none.
func moduleRelative(dir string) string {
	for root := dir; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			if rel, err := filepath.Rel(root, dir); err == nil {
				return rel
			}
			return dir
		}
		parent := filepath.Dir(root)
		if parent == root {
			return dir
		}
		root = parent
	}
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
