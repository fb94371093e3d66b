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
	"encoding/json"
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

// Mode names, on one line, what runs the bed's control plane and proxies, and whose verdicts
// the oracle gives.
func (b Binaries) Mode(ctx context.Context) string {
	mode := "control plane: simulated (test/meshsim); proxies simulated"
	if b.Real() {
		v, err := b.Version(ctx)
		if err != nil {
			v = "(version unknown: " + err.Error() + ")"
		}
		mode = fmt.Sprintf("control plane: linkerd %s identity and proxy-injector (%s); proxies simulated", v, EnvController)
	}
	if b.Verifier == "" {
		return mode + "; their verifier: the oracle's model of rustls-webpki (test/meshsim/webpki.go)"
	}
	v, err := b.VerifierVersion(ctx)
	if err != nil {
		v = "(version unknown: " + err.Error() + ")"
	}
	return fmt.Sprintf("%s; their verifier: %s (%s), the model beside it", mode, v, EnvVerifier)
}

// VerifierVersion starts the verifier and reads the line it introduces itself with, e.g.
// "rustls-webpki 0.103.13".
func (b Binaries) VerifierVersion(ctx context.Context) (string, error) {
	if b.Verifier == "" {
		return "", fmt.Errorf("%s is not set", EnvVerifier)
	}
	cmd := exec.CommandContext(ctx, b.Verifier)
	cmd.Stdin = strings.NewReader("") // it exits at the end of its input
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", b.Verifier, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return ParseVerifierHello([]byte(first))
}

// ParseVerifierHello reads the verifier's first line, {"verifier":"rustls-webpki","version":"…"}
// (docs/linkerd-versions.md), into "rustls-webpki <version>".
func ParseVerifierHello(line []byte) (string, error) {
	var hello struct{ Verifier, Version string }
	if err := json.Unmarshal(line, &hello); err != nil || hello.Verifier == "" || hello.Version == "" {
		return "", fmt.Errorf("the verifier did not introduce itself: %q (%v)", line, err)
	}
	return hello.Verifier + " " + hello.Version, nil
}
