// Package version is the version of both binaries, trust-rotation-operator and linkerd-trust.
// Release builds stamp it:
//
//	go build -ldflags "-X github.com/linkerd/trust-rotation/cmd/internal/version.Version=v0.1.0" ./cmd/...
//
// as make image does. Unstamped, it is the module version or the VCS revision Go recorded in
// the build info, so that a binary built from a checkout still says what it was built from.
package version

import "runtime/debug"

// Version is set at build time; see the package comment.
var Version = ""

// String returns the stamped version, else the module version, else "dev-<revision>", else
// "dev".
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev-" + s.Value[:12]
		}
	}
	return "dev"
}
