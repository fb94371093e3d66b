package cli

import (
	"context"
	"fmt"

	"github.com/linkerd/trust-rotation/cmd/internal/version"
)

func versionCommand(env *Env) *command {
	fs := newFlagSet("version")
	shortOut := fs.Bool("short", false, "print the version only")
	c := &command{
		name:    "version",
		short:   "Print the version of linkerd-trust",
		long:    "Print the version of linkerd-trust.",
		example: "  linkerd trust version --short",
		flags:   fs,
	}
	c.run = func(_ context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("version takes no arguments, got %q", args)
		}
		if *shortOut {
			fmt.Fprintln(env.Out, version.String())
			return nil
		}
		fmt.Fprintf(env.Out, "%s version: %s\n", binary, version.String())
		return nil
	}
	return c
}

// metadataCommand answers Linkerd's extension discovery: `linkerd check` runs the checks of an
// extension whose metadata says "checks": "always", even when no namespace carries its label.
func metadataCommand(env *Env) *command {
	fs := newFlagSet("_extension-metadata")
	c := &command{
		name:   "_extension-metadata",
		short:  "Print the Linkerd extension metadata",
		long:   "Print the metadata linkerd reads to discover this extension: its name, and that linkerd check always runs its checks.",
		hidden: true,
		flags:  fs,
	}
	c.run = func(_ context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("_extension-metadata takes no arguments, got %q", args)
		}
		_, err := fmt.Fprintln(env.Out, `{"name":"linkerd-trust","checks":"always"}`)
		return err
	}
	return c
}
