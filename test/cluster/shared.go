package cluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// One cluster per test binary: starting one takes ~15 s, so every test of a package shares it.
// It is started on first use (so `go test -short` and tests that do not need it pay nothing) and
// stopped by ForTest after all tests ran.
var shared struct {
	mu      sync.Mutex
	enabled bool // ForTest is running
	ctx     context.Context
	cancel  context.CancelFunc // aborts a start in progress when the binary is interrupted
	opts    Options
	c       *Cluster
	err     error // the first start failure, reported to every later caller
	times   timings
}

// ForTest runs the tests of a package that uses Shared and stops the shared cluster afterwards.
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.ForTest(m, cluster.Options{})) }
//
// If the test binary is interrupted (SIGINT, SIGTERM) the cluster is stopped before it exits; if
// it is killed outright, the kernel kills the components (see spawner). If tests failed, the tail
// of the component logs is printed, because the logs go with the cluster's work directory, and
// then the messages of the failed tests once more (see failureSummary). Last, it prints how long
// the tests took and the slowest of them (see timings).
func ForTest(m *testing.M, opts Options) int {
	shared.mu.Lock()
	shared.enabled, shared.opts = true, opts
	shared.ctx, shared.cancel = context.WithCancel(context.Background())
	shared.mu.Unlock()
	defer shared.cancel()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "cluster: %v: stopping the shared test cluster\n", sig)
		shared.cancel() // a Start in progress gives up and cleans up after itself
		stopShared(false)
		os.Exit(2)
	}()

	summary := teeStdout()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	stopShared(code != 0)
	summary.finish()
	shared.times.render(os.Stdout)
	if err := shared.times.appendTo(os.Getenv(TimingsFileEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: writing the tests' timings: %v\n", err)
	}
	return code
}

func stopShared(printLogs bool) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c == nil {
		return
	}
	if printLogs {
		fmt.Fprintf(os.Stderr, "--- tail of the shared test cluster's component logs ---\n%s", shared.c.LogTail(40))
	}
	if err := shared.c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: stopping the shared test cluster: %v\n", err)
	}
	shared.c = nil
}

// Shared returns the test binary's shared cluster, starting it on first use. It skips the test
// under -short (these tests start real processes and take seconds) and fails it if the cluster
// cannot start or ForTest is not in use.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: needs a real local cluster (etcd, kube-apiserver, kwok, cert-manager); run without -short")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.enabled {
		t.Fatal("cluster.Shared needs TestMain to call cluster.ForTest, which stops the cluster after the tests")
	}
	shared.times.track(t)
	if shared.c == nil && shared.err == nil {
		begin := time.Now()
		shared.c, shared.err = Start(shared.ctx, shared.opts)
		shared.times.start = time.Since(begin)
	}
	if shared.err != nil {
		t.Fatalf("shared test cluster: %v", shared.err)
	}
	return shared.c
}

// DumpLogsOnFailure registers a cleanup that prints the tail of c's component logs if the test
// failed, which is usually the fastest way to see why an object never became ready.
func DumpLogsOnFailure(t testing.TB, c *Cluster) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tail of the component logs (full logs in %s):\n%s", c.LogDir(), c.LogTail(15))
		}
	})
}
