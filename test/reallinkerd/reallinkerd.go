// Package reallinkerd is the test bed's switch between the Linkerd simulator (test/meshsim) and
// Linkerd's own code, and the home of the recordings of what real Linkerd did, which CI replays
// against the simulator and the extension.
//
// The Go module proxy serves no github.com/linkerd/linkerd2 and no registry reachable from CI
// ships Linkerd's binaries, so the project takes them by path: LINKERD_BIN is the `linkerd` CLI
// (linkerd2 ./cli) and LINKERD_CONTROLLER_BIN the control-plane binary (linkerd2
// ./controller/cmd, whose subcommands are identity, proxy-injector, destination...). Without
// them the bed runs on the simulator and the recording tests replay testdata; with them set and
// `go test -update`, the recording tests drive the real binaries and write testdata again.
package reallinkerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The environment variables that switch the bed to real Linkerd.
const (
	EnvCLI        = "LINKERD_BIN"
	EnvController = "LINKERD_CONTROLLER_BIN"
	// EnvVerifier names the proxy's verifier, rustls-webpki as linkerd2-proxy calls it, behind
	// the line protocol of docs/linkerd-versions.md (meshsim.RealVerifier): with it, the
	// oracle's every verdict comes from the real verifier, the model checked beside it.
	EnvVerifier = "WEBPKI_VERIFIER_BIN"
)

// Binaries are the paths of Linkerd's own binaries; an empty path means that part of Linkerd
// stays simulated.
type Binaries struct {
	CLI, Controller string
	// Verifier is the proxy's verifier (WEBPKI_VERIFIER_BIN), independent of the other two.
	Verifier string
}

// FromEnv reads LINKERD_BIN, LINKERD_CONTROLLER_BIN and WEBPKI_VERIFIER_BIN.
func FromEnv() Binaries {
	return Binaries{CLI: os.Getenv(EnvCLI), Controller: os.Getenv(EnvController), Verifier: os.Getenv(EnvVerifier)}
}

// Real reports whether both binaries are set: the bed runs Linkerd's own control plane.
func (b Binaries) Real() bool { return b.CLI != "" && b.Controller != "" }

// Version is the linkerd2 version the CLI reports (`linkerd version --client --short`), e.g.
// edge-26.8.3: the version stamped into the binary when it was built.
func (b Binaries) Version(ctx context.Context) (string, error) {
	if b.CLI == "" {
		return "", fmt.Errorf("%s is not set", EnvCLI)
	}
	out, err := exec.CommandContext(ctx, b.CLI, "version", "--client", "--short").Output()
	if err != nil {
		return "", fmt.Errorf("%s version --client --short: %w", b.CLI, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" || strings.ContainsAny(v, " \n") {
		return "", fmt.Errorf("%s version --client --short printed %q, not a version", b.CLI, out)
	}
	return v, nil
}

// Mode names, on one line, what runs the bed's control plane and proxies.
func (b Binaries) Mode(ctx context.Context) string {
	if !b.Real() {
		return "control plane: simulated (test/meshsim); proxies simulated"
	}
	v, err := b.Version(ctx)
	if err != nil {
		v = "(version unknown: " + err.Error() + ")"
	}
	return fmt.Sprintf("control plane: linkerd %s identity and proxy-injector (%s); proxies simulated", v, EnvController)
}
