package reallinkerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/linkerd/trust-rotation/cmd/linkerd-trust/cli"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// update re-records testdata from Linkerd's own binaries (LINKERD_BIN, LINKERD_CONTROLLER_BIN)
// instead of replaying it.
var update = flag.Bool("update", false, "record testdata again with the real Linkerd binaries of LINKERD_BIN and LINKERD_CONTROLLER_BIN")

// recorder says what a recording test records from: Linkerd's CLI, its control-plane binary,
// and root (the controller runs in a private mount namespace).
type recorder struct {
	what            string // e.g. "the real identity controller"
	cli, controller bool
	root            bool
}

// recordingBinaries skips a recording test unless -update, naming the test that replays its
// recording without Linkerd's binaries, and fails it when -update lacks what it records from.
func recordingBinaries(t *testing.T, replayedBy string, r recorder) reallinkerd.Binaries {
	t.Helper()
	var envs []string
	if r.cli {
		envs = append(envs, reallinkerd.EnvCLI)
	}
	if r.controller {
		envs = append(envs, reallinkerd.EnvController)
	}
	asRoot, why := "", ""
	if r.root {
		asRoot, why = ", as root", " (the controller runs in a private mount namespace)"
	}
	if !*update {
		t.Skipf("replayed without Linkerd's binaries by %s; record with -update and %s set%s", replayedBy, strings.Join(envs, " and "), asRoot)
	}
	bins := reallinkerd.FromEnv()
	if (r.cli && bins.CLI == "") || (r.controller && bins.Controller == "") || (r.root && os.Geteuid() != 0) {
		t.Fatalf("-update records from %s: set %s%s%s", r.what, strings.Join(envs, " and "), asRoot, why)
	}
	return bins
}

// extensionName is the executable `linkerd check` looks for on PATH for the extension "trust".
const extensionName = "linkerd-trust"

// envInvocations names the file where the test binary, run as the extension, appends each
// invocation: the arguments Linkerd passed, what the extension printed, its exit code.
const envInvocations = "TRUST_ROTATION_RECORD_INVOCATIONS"

// TestMain runs the tests on a shared cluster; run through a link named linkerd-trust (as
// `linkerd check` runs it from PATH) the test binary is the extension itself, the CLI's own
// code, and records how it was called.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == extensionName {
		os.Exit(runAsExtension())
	}
	os.Exit(cluster.ForTest(m, cluster.Options{Nodes: 1}))
}

// invocation is one run of the extension by Linkerd.
type invocation struct {
	Args     []string `json:"args"`
	Stdout   string   `json:"stdout"`
	ExitCode int      `json:"exitCode"`
}

func runAsExtension() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var out bytes.Buffer
	args := os.Args[1:]
	code := cli.Main(ctx, args, &cli.Env{Out: io.MultiWriter(os.Stdout, &out), Err: os.Stderr})
	if path := os.Getenv(envInvocations); path != "" {
		if err := appendInvocation(path, invocation{Args: args, Stdout: out.String(), ExitCode: code}); err != nil {
			fmt.Fprintf(os.Stderr, "recording the invocation: %v\n", err)
			return 3
		}
	}
	return code
}

func appendInvocation(path string, inv invocation) error {
	b, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readInvocations(path string) ([]invocation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var invs []invocation
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var inv invocation
		if err := dec.Decode(&inv); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		invs = append(invs, inv)
	}
	return invs, nil
}
