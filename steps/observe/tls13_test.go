package observe

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tlsServer serves chain on a loopback port with the given TLS configuration, answering only
// SNI identity; it returns the address.
func tlsServer(t testing.TB, identity string, chain []*x509.Certificate, key *ecdsa.PrivateKey, configure func(*tls.Config)) string {
	t.Helper()
	cert := &tls.Certificate{PrivateKey: key}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	cfg := &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if h.ServerName != identity {
			return nil, fmt.Errorf("no certificate for SNI %q", h.ServerName)
		}
		return cert, nil
	}}
	if configure != nil {
		configure(cfg)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// tcpServer accepts connections on a loopback port, calls handle with each and keeps it open
// until the test ends; it returns the address.
func tcpServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
			go func() { <-done; c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// byteConn returns at most one byte per Read: records and handshake messages arrive in pieces.
type byteConn struct{ net.Conn }

func (c byteConn) Read(b []byte) (int, error) { return c.Conn.Read(b[:min(len(b), 1)]) }

func sameChain(t *testing.T, got, want []*x509.Certificate) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d certificates, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Raw, want[i].Raw) {
			t.Fatalf("certificate %d differs from the one presented", i)
		}
	}
}

// TestReadChainTLS13 reads chains from crypto/tls servers, whole and in pieces, and names what a
// server answered when it does not present one.
func TestReadChainTLS13(t *testing.T) {
	const identity = "default.ns.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(t, identity, false, issuer, issuerKey)
	chain := []*x509.Certificate{leaf, issuer}
	dial := (&net.Dialer{}).DialContext

	t.Run("chain", func(t *testing.T) {
		addr := tlsServer(t, identity, chain, leafKey, nil)
		got, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sameChain(t, got, chain)
		// The issuer is parsed once and shared; the leaf is the pod's own.
		again, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if again[1] != got[1] || again[0] == got[0] {
			t.Fatal("the issuer should be parsed once and the leaf each time")
		}
	})

	t.Run("one byte per read", func(t *testing.T) {
		addr := tlsServer(t, identity, chain, leafKey, nil)
		bytewise := func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return byteConn{c}, nil
		}
		got, err := ReadChain(t.Context(), bytewise, addr, identity, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sameChain(t, got, chain)
	})

	t.Run("certificate message over several records", func(t *testing.T) {
		// 1,500 names make a leaf of about 48 KB: crypto/tls splits its flight into records of
		// 16 KB, so the Certificate message is reassembled from at least three.
		names := make([]string, 1500)
		for i := range names {
			names[i] = "name-" + strconv.Itoa(i) + ".example.cluster.local"
		}
		big, bigKey := newCert(t, identity, false, issuer, issuerKey, names...)
		if len(big.Raw) < 2*(1<<14) {
			t.Fatalf("the leaf is %d bytes: too short to span records", len(big.Raw))
		}
		addr := tlsServer(t, identity, []*x509.Certificate{big, issuer}, bigKey, nil)
		got, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sameChain(t, got, []*x509.Certificate{big, issuer})
	})

	for _, tc := range []struct {
		name      string
		sni       string
		configure func(*tls.Config)
		want      string
	}{
		{"no certificate for the SNI", "other.ns.serviceaccount.identity.linkerd.cluster.local", nil, "TLS alert internal_error"},
		{"TLS 1.2 only", identity, func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }, "TLS alert protocol_version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tlsServer(t, identity, chain, leafKey, tc.configure)
			_, err := ReadChain(t.Context(), dial, addr, tc.sni, 5*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "TLS handshake with SNI "+tc.sni) {
				t.Fatalf("got %v, want an error naming the SNI and %q", err, tc.want)
			}
		})
	}

	// A server that accepts none of what readChainTLS13 offers answers handshake_failure, and
	// ReadChain reads its chain again with crypto/tls.
	t.Run("no P-256, through crypto/tls", func(t *testing.T) {
		addr := tlsServer(t, identity, chain, leafKey, func(c *tls.Config) { c.CurvePreferences = []tls.CurveID{tls.X25519} })
		if _, err := readChainWith(t.Context(), dial, addr, identity, readChainTLS13); !errors.Is(err, alertError(alertHandshakeFailure)) {
			t.Fatalf("readChainTLS13: got %v, want handshake_failure", err)
		}
		got, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sameChain(t, got, chain)
	})

	t.Run("not TLS", func(t *testing.T) {
		addr := tcpServer(t, func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		})
		// The connection stays open until the test ends: the answer alone must end the probe.
		_, err := ReadChain(t.Context(), dial, addr, identity, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "not TLS") {
			t.Fatalf("got %v, want the answer named not TLS", err)
		}
	})

	t.Run("silent server", func(t *testing.T) {
		addr := tcpServer(t, func(net.Conn) {})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := ReadChain(ctx, dial, addr, identity, time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want the probe ended by its context", err)
		}
		_, err = ReadChain(t.Context(), dial, addr, identity, 100*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the probe ended by its timeout", err)
		}
	})
}

// BenchmarkReadChain reads a chain with each reader from the same crypto/tls server. Both sides
// run in the process, so the difference between the readers is the client's.
func BenchmarkReadChain(b *testing.B) {
	const identity = "default.bench.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(b, "root", true, nil, nil)
	issuer, issuerKey := newCert(b, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(b, identity, false, issuer, issuerKey)
	addr := tlsServer(b, identity, []*x509.Certificate{leaf, issuer}, leafKey, nil)
	dial := (&net.Dialer{}).DialContext
	for _, reader := range []struct {
		name string
		read func(net.Conn, string) ([]*x509.Certificate, error)
	}{{"tls13", readChainTLS13}, {"crypto-tls", readChainCryptoTLS}} {
		b.Run(reader.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, err := readChainWith(b.Context(), dial, addr, identity, reader.read); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/probe")
		})
	}
}

// TestServerHelloChoices checks how a ServerHello's choices are read: anything malformed or not
// offered is an error.
func TestServerHelloChoices(t *testing.T) {
	share := make([]byte, 65)
	share[0] = 4
	random := make([]byte, 32)
	hello := func(suite uint16, version uint16, group uint16) []byte {
		b := []byte{0x03, 0x03}
		b = append(b, random...)
		b = append(b, 0, byte(suite>>8), byte(suite), 0)
		var exts []byte
		exts = append(exts, 0, extensionSupportedVersions, 0, 2, byte(version>>8), byte(version))
		exts = append(exts, 0, extensionKeyShare, 0, byte(len(share)+4), byte(group>>8), byte(group), 0, byte(len(share)))
		exts = append(exts, share...)
		b = append(b, byte(len(exts)>>8), byte(len(exts)))
		return append(b, exts...)
	}
	if got, err := parseServerHello(hello(suiteTLSAES128GCMSHA256, versionTLS13, groupP256)); err != nil || !bytes.Equal(got, share) {
		t.Fatalf("AES-128-GCM: %v", err)
	}
	random = helloRetryRandom[:]
	retry := hello(suiteTLSAES128GCMSHA256, versionTLS13, groupP256)
	if _, err := parseServerHello(retry); err == nil || !strings.Contains(err.Error(), "HelloRetryRequest") {
		t.Fatalf("HelloRetryRequest: got %v", err)
	}
	random = make([]byte, 32)
	for name, b := range map[string][]byte{
		"AES-256-GCM":       hello(0x1302, versionTLS13, groupP256),
		"ChaCha20-Poly1305": hello(0x1303, versionTLS13, groupP256),
		"TLS 1.2":           hello(suiteTLSAES128GCMSHA256, versionTLS12, groupP256),
		"X25519 share":      hello(suiteTLSAES128GCMSHA256, versionTLS13, 0x001d),
		"truncated":         hello(suiteTLSAES128GCMSHA256, versionTLS13, groupP256)[:60],
		"trailing bytes":    append(hello(suiteTLSAES128GCMSHA256, versionTLS13, groupP256), 0),
	} {
		if _, err := parseServerHello(b); err == nil {
			t.Errorf("%s: got %v, want an error", name, err)
		}
	}
}

// TestReadChainFromOpenSSL reads chains from OpenSSL's s_server, another TLS stack than the
// crypto/tls the other tests serve with: offering every TLS 1.3 suite; preferring
// ChaCha20-Poly1305 to AES-128-GCM, as a server on a machine without AES instructions does; and
// offering ChaCha20-Poly1305 only, as linkerd2-proxy did before it accepted AES, which ReadChain
// reads through crypto/tls.
func TestReadChainFromOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	const identity = "default.ns.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(t, identity, false, issuer, issuerKey)
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "key.pem"), "PRIVATE KEY", keyDER)
	writePEM(t, filepath.Join(dir, "leaf.pem"), "CERTIFICATE", leaf.Raw)
	writePEM(t, filepath.Join(dir, "issuer.pem"), "CERTIFICATE", issuer.Raw)

	for _, tc := range []struct {
		name, suites string
		serverPref   bool
		// tls13 is whether readChainTLS13 reads the chain itself, without crypto/tls.
		tls13 bool
	}{
		{"every suite", "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256", false, true},
		{"ChaCha20-Poly1305 preferred", "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256", true, true},
		{"ChaCha20-Poly1305 only", "TLS_CHACHA20_POLY1305_SHA256", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			args := []string{"s_server", "-tls1_3", "-ciphersuites", tc.suites,
				"-accept", "127.0.0.1:" + port, "-cert", "leaf.pem", "-key", "key.pem", "-cert_chain", "issuer.pem"}
			if tc.serverPref {
				args = append(args, "-serverpref")
			}
			cmd := exec.Command(openssl, args...)
			cmd.Dir = dir
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			// s_server stops at the end of its input: it gets one that ends with the test.
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stdin.Close() })
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			// s_server prints ACCEPT once it listens.
			listening := make(chan struct{})
			go func() {
				scanner := bufio.NewScanner(stdout)
				for scanner.Scan() {
					if scanner.Text() == "ACCEPT" {
						close(listening)
						break
					}
				}
				_, _ = io.Copy(io.Discard, stdout)
			}()
			select {
			case <-listening:
			case <-time.After(30 * time.Second):
				t.Fatalf("s_server did not listen: %s", stderr.String())
			}
			dial, addr := (&net.Dialer{}).DialContext, "127.0.0.1:"+port
			chain, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
			if err != nil {
				t.Fatalf("%v\ns_server: %s", err, stderr.String())
			}
			sameChain(t, chain, []*x509.Certificate{leaf, issuer})
			_, err = readChainWith(t.Context(), dial, addr, identity, readChainTLS13)
			if tc.tls13 && err != nil || !tc.tls13 && !errors.Is(err, alertError(alertHandshakeFailure)) {
				t.Fatalf("readChainTLS13: got %v, want it to read the chain: %v", err, tc.tls13)
			}
		})
	}
}

// TestReadChainFromServerWithoutAES reads the chain of a crypto/tls server on a machine without
// AES instructions, where crypto/tls prefers ChaCha20-Poly1305 when the client offers it. The
// server runs in a child process of the test binary with GODEBUG=cpu.aes=off.
func TestReadChainFromServerWithoutAES(t *testing.T) {
	if dir := os.Getenv("OBSERVE_TEST_SERVER_DIR"); dir != "" {
		serveFromDir(t, dir)
		return
	}
	const identity = "default.ns.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(t, identity, false, issuer, issuerKey)
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "key.pem"), "PRIVATE KEY", keyDER)
	writePEM(t, filepath.Join(dir, "chain.pem"), "CERTIFICATE", leaf.Raw)
	f, err := os.OpenFile(filepath.Join(dir, "chain.pem"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = pem.Encode(f, &pem.Block{Type: "CERTIFICATE", Bytes: issuer.Raw})
	_ = f.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestReadChainFromServerWithoutAES$")
	cmd.Env = append(os.Environ(), "OBSERVE_TEST_SERVER_DIR="+dir, "GODEBUG=cpu.aes=off")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the server stops at the end of its input
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("the server did not listen: %q, %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	// The condition is real: offered both, the server chooses ChaCha20-Poly1305.
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: identity, InsecureSkipVerify: true, //nolint:gosec // a test server
		CipherSuites: []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_CHACHA20_POLY1305_SHA256}})
	if err != nil {
		t.Fatal(err)
	}
	suite := conn.ConnectionState().CipherSuite
	_ = conn.Close()
	if suite != tls.TLS_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("the server without AES instructions chose %s", tls.CipherSuiteName(suite))
	}
	chain, err := readChainWith(t.Context(), (&net.Dialer{}).DialContext, addr, identity, readChainTLS13)
	if err != nil {
		t.Fatal(err)
	}
	sameChain(t, chain, []*x509.Certificate{leaf, issuer})
}

// serveFromDir serves dir's chain.pem and key.pem over TLS on a loopback port, prints the
// address, and stops at the end of its standard input.
func serveFromDir(t *testing.T, dir string) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "chain.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
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

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
