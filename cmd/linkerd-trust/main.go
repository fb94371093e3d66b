// Command linkerd-trust is the Linkerd CLI extension of the trust-rotation operator: `linkerd
// trust <command>` runs it. See package cli for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/linkerd/trust-rotation/cmd/linkerd-trust/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], &cli.Env{Out: os.Stdout, Err: os.Stderr, In: os.Stdin})
	stop()
	os.Exit(code)
}
