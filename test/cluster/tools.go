package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ToolsBinEnv names the environment variable holding the directory of component binaries (the
// output of `scripts/tools.sh bin-dir`). The Makefile sets it; when it is unset, BinDir runs the
// script itself.
const ToolsBinEnv = "TRUST_ROTATION_TOOLS_BIN"

// modulePath identifies the repository's root go.mod (the tools modules under test/tools have
// other paths).
const modulePath = "github.com/linkerd/trust-rotation"

// requiredTools are the files a bin dir must hold for a cluster to start.
var requiredTools = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
	"cert-manager-controller", "kwok-stages", "cert-manager-crds",
}

// BinDir returns the directory of component binaries: $TRUST_ROTATION_TOOLS_BIN, or else the
// output of scripts/tools.sh bin-dir, which builds whatever is missing (a cold build takes many
// minutes; its progress goes to stderr).
func BinDir(ctx context.Context) (string, error) {
	dir := os.Getenv(ToolsBinEnv)
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", fmt.Errorf("locating scripts/tools.sh (set %s to skip this): %w", ToolsBinEnv, err)
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "tools.sh"), "bin-dir")
		cmd.Dir = root
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("scripts/tools.sh bin-dir failed: %w", err)
		}
		dir = strings.TrimSpace(out.String())
	}
	for _, name := range requiredTools {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("tools directory %s is incomplete: %w", dir, err)
		}
	}
	return dir, nil
}

// ModuleRoot finds the repository root by walking up from the working directory to the go.mod
// of this module, so that tests (which run in their package directory) and commands find
// scripts/ the same way.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isModule(data, modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

func isModule(gomod []byte, path string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == path
		}
	}
	return false
}
