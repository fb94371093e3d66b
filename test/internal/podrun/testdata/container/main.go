// Command container reports how it runs, for podrun's test: its credentials, hostname and PID,
// what it can write, a volume's file, and answers from outside the sandbox (through its gateway
// and on loopback addresses of the machine); then it serves
// /healthz on :8080 until SIGTERM.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	host, _ := os.Hostname()
	fmt.Printf("uid=%d gid=%d groups=%v hostname=%s pid=%d\n", os.Getuid(), os.Getgid(), must(os.Getgroups()), host, os.Getpid())
	fmt.Printf("write /: %v\n", os.WriteFile("/written", nil, 0o644))
	fmt.Printf("write /scratch: %v\n", os.WriteFile("/scratch/written", nil, 0o644))
	b, err := os.ReadFile("/config/file")
	fmt.Printf("read /config/file: %q %v\n", b, err)
	if c, err := net.Dial("tcp", os.Getenv("OUTSIDE")); err != nil {
		fmt.Printf("outside: %v\n", err)
	} else {
		b, err := io.ReadAll(c)
		fmt.Printf("outside: %q %v\n", b, err)
		c.Close()
	}
	// A pod served on a loopback address of the machine (LOOPBACK, in a network the sandbox
	// routes), and one in a network it does not (UNROUTED): that one is the sandbox's own lo.
	for _, env := range []string{"LOOPBACK", "UNROUTED"} {
		if c, err := net.Dial("tcp", os.Getenv(env)); err != nil {
			fmt.Printf("%s: %v\n", strings.ToLower(env), err)
		} else {
			b, err := io.ReadAll(c)
			fmt.Printf("%s: %q %v\n", strings.ToLower(env), b, err)
			c.Close()
		}
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", ":8080")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("serving")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv := &http.Server{}
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	fmt.Println("terminated")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
