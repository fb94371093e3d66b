package probe

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tlsServerEnv makes the test binary a TLS server (TestMain) serving the chain.pem and key.pem of
// the directory it names: BenchmarkReadChain reads from a server in a process of its own, so
// that the CPU time and the allocations it measures are the probe's alone.
const tlsServerEnv = "OBSERVE_BENCH_TLS_SERVER"

// serveChainProcess serves, with crypto/tls's defaults, the chain and key of dir on a loopback
// port, prints "listening on <address>" and stops at the end of its standard input.
func serveChainProcess(dir string) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "chain.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	fmt.Printf("listening on %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startChainProcess runs serveChainProcess in a child process of the test binary with chain and
// the leaf's key, until the test ends, and returns its address.
func startChainProcess(tb testing.TB, chain []*x509.Certificate, key any, env ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	var chainPEM []byte
	for _, c := range chain {
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(filepath.Join(dir, "chain.pem"), chainPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), tlsServerEnv+"="+dir), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the server stops at the end of its input
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		tb.Fatalf("the server did not listen: %q, %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return addr
}

// BenchmarkReadChain reads a proxy's chain (a P-256 leaf and its issuer) the way every probe
// does, handshake completed, from a crypto/tls server with its defaults in another process: the
// CPU time and the allocations measured are the probe's client side alone, whatever the key
// exchange and the cipher suite the server would prefer.
func BenchmarkReadChain(b *testing.B) {
	const identity = "default.bench.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(b, "root", true, nil, nil)
	issuer, issuerKey := newCert(b, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(b, identity, false, issuer, issuerKey)
	addr := startChainProcess(b, []*x509.Certificate{leaf, issuer}, leafKey)
	dial := (&net.Dialer{}).DialContext
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		if _, err := ReadChain(b.Context(), dial, addr, identity, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/probe")
}
