package probe

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/fips140"
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
// SNI identity, and signing the handshake with key, which need not be the leaf's; it returns
// the address.
func tlsServer(t testing.TB, identity string, chain []*x509.Certificate, key crypto.Signer, configure func(*tls.Config)) string {
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

// TestReadChain reads chains from crypto/tls servers, whole and in pieces, and names what a
// server answered when it does not present one.
func TestReadChain(t *testing.T) {
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
		{"no certificate for the SNI", "other.ns.serviceaccount.identity.linkerd.cluster.local", nil, "tls: internal error"},
		{"TLS 1.2 only", identity, func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }, "tls: protocol version not supported"},
		{"no P-256", identity, func(c *tls.Config) { c.CurvePreferences = []tls.CurveID{tls.X25519} }, "tls: handshake failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tlsServer(t, identity, chain, leafKey, tc.configure)
			_, err := ReadChain(t.Context(), dial, addr, tc.sni, 5*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "TLS handshake with SNI "+tc.sni) {
				t.Fatalf("got %v, want an error naming the SNI and %q", err, tc.want)
			}
			if rejectedChain(err) {
				t.Fatalf("%v: a server that presents no chain is a failed probe, not a rejected chain", err)
			}
		})
	}

	t.Run("not TLS", func(t *testing.T) {
		addr := tcpServer(t, func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		})
		// The connection stays open until the test ends: the answer alone must end the probe.
		_, err := ReadChain(t.Context(), dial, addr, identity, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "does not look like a TLS handshake") {
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

// TestReadChainRejectsWhatIsNotThePods: a chain whose leaf names another identity, and a pod's
// real chain presented by a server that does not hold its key, are not read as the pod's.
func TestReadChainRejectsWhatIsNotThePods(t *testing.T) {
	const identity = "web.app.serviceaccount.identity.linkerd.cluster.local"
	const other = "db.app.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(t, identity, false, issuer, issuerKey)
	otherLeaf, otherKey := newCert(t, other, false, issuer, issuerKey)
	_, strangerKey := newCert(t, "stranger", false, nil, nil)
	dial := (&net.Dialer{}).DialContext

	t.Run("another identity", func(t *testing.T) {
		// The server answers the pod's SNI with its own, valid, chain: another workload's.
		addr := tlsServer(t, identity, []*x509.Certificate{otherLeaf, issuer}, otherKey, nil)
		chain, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
		var rejected *ChainRejectedError
		if !errors.As(err, &rejected) || rejected.Proof != nil || chain != nil {
			t.Fatalf("got %v (%d certificates), want the chain rejected for its identity", err, len(chain))
		}
		if want := "presents identity " + other + ", expected " + identity; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	})

	t.Run("no DNS name", func(t *testing.T) {
		if got, want := (&ChainRejectedError{Expected: identity}).Error(), "presents a certificate with no DNS name, expected identity "+identity; got != want {
			t.Errorf("error %q, want %q", got, want)
		}
	})

	t.Run("the pod's chain without its key", func(t *testing.T) {
		// The chain is the pod's own (anyone can read it from its admin port); the server signs
		// the handshake with another key, so its CertificateVerify does not verify.
		addr := tlsServer(t, identity, []*x509.Certificate{leaf, issuer}, strangerKey, nil)
		chain, err := ReadChain(t.Context(), dial, addr, identity, 5*time.Second)
		var rejected *ChainRejectedError
		if !errors.As(err, &rejected) || rejected.Proof == nil || chain != nil {
			t.Fatalf("got %v (%d certificates), want the chain rejected for want of proof", err, len(chain))
		}
		if want := "presents a certificate for " + identity + " without proving it holds its key (tls: invalid signature by the server certificate"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q, want it to start with %q", err, want)
		}
		// The same server with the leaf's key is the pod.
		if _, err := ReadChain(t.Context(), dial, tlsServer(t, identity, []*x509.Certificate{leaf, issuer}, leafKey, nil), identity, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReadChainFromOpenSSL reads chains from OpenSSL's s_server, another TLS stack than the
// crypto/tls the other tests serve with: offering every TLS 1.3 suite; preferring
// ChaCha20-Poly1305 to AES-128-GCM, as a server on a machine without AES instructions does; and
// offering ChaCha20-Poly1305 only, as linkerd2-proxy did before it accepted AES. A FIPS client
// offers no ChaCha20-Poly1305: under GODEBUG=fips140=only the last one is refused.
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
		aes          bool // whether the server accepts an AES suite
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
			if !tc.aes && fips140.Enabled() {
				if err == nil || rejectedChain(err) {
					t.Fatalf("got %v, want the handshake refused: a FIPS client cannot use ChaCha20-Poly1305", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\ns_server: %s", err, stderr.String())
			}
			sameChain(t, chain, []*x509.Certificate{leaf, issuer})
		})
	}
}

// TestReadChainFromServerWithoutAES reads the chain of a crypto/tls server on a machine without
// AES instructions, where crypto/tls prefers ChaCha20-Poly1305 when the client offers it. The
// server runs in a child process of the test binary with GODEBUG=cpu.aes=off.
func TestReadChainFromServerWithoutAES(t *testing.T) {
	if fips140.Enabled() {
		t.Skip("a FIPS client offers no ChaCha20-Poly1305: the server chooses AES whatever its machine")
	}
	const identity = "default.ns.serviceaccount.identity.linkerd.cluster.local"
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity", true, anchor, anchorKey)
	leaf, leafKey := newCert(t, identity, false, issuer, issuerKey)
	addr := startChainProcess(t, []*x509.Certificate{leaf, issuer}, leafKey, "GODEBUG=cpu.aes=off")

	// The condition is real: offered both, the server chooses ChaCha20-Poly1305.
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: identity, InsecureSkipVerify: true}) //nolint:gosec // a test server
	if err != nil {
		t.Fatal(err)
	}
	suite := conn.ConnectionState().CipherSuite
	_ = conn.Close()
	if suite != tls.TLS_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("the server without AES instructions chose %s", tls.CipherSuiteName(suite))
	}
	chain, err := ReadChain(t.Context(), (&net.Dialer{}).DialContext, addr, identity, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sameChain(t, chain, []*x509.Certificate{leaf, issuer})
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
