package cluster

import (
	"fmt"
	"io"
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
// suite in its budget sees where the time goes in any CI log.

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

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
