//go:build crashpoints

package main

import (
	"os"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
)

// crashAt reads the end-to-end tests' fault hook (app.CrashEnv) from the environment. Only a
// binary built with -tags crashpoints, as the tests build it, has this reading; a released one
// ignores the variable (crashpoints_off.go).
func crashAt() string { return os.Getenv(app.CrashEnv) }
