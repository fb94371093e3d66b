package meshsim

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// proxy simulates one linkerd2-proxy: the identity client (certify.rs) and the admin server on
// podIP:4191 that terminates TLS for the pod's own identity.
type proxy struct {
	mesh      *Mesh
	pod       PodRef
	podIP     string
	port      int32
	workload  string // owning Deployment, "" if none
	component string // linkerd.io/control-plane-component, "" for application pods
	identity  string
	// serviceAccount is the pod's: the real identity checks the proxy's token against it.
	serviceAccount string
	roots          *rootSet
	rootsPEM       string
	minRef         time.Duration
	maxRef         time.Duration
	key            *ecdsa.PrivateKey
	started        time.Time

	mu          sync.Mutex
	chain       []*x509.Certificate
	tlsCert     *tls.Certificate
	expiry      time.Time
	lastRefresh time.Time
	refreshes   int
	rejections  int
	failures    int
	lastErr     string
	timer       clock.Timer
	listener    net.Listener
	stopped     bool
	certifying  bool          // a refresh is under way
	done        chan struct{} // closed by stop
}

// start brings the proxy up: roots into the oracle, admin listener, first certification now.
func (p *proxy) start() {
	p.mesh.oracle.setRoots(p.pod, p.roots)
	p.listen(0)
	p.mu.Lock()
	p.timer = p.mesh.clock.AfterFunc(0, p.refresh)
	p.mu.Unlock()
}

// stop ends the proxy (its pod was deleted or stopped running).
func (p *proxy) stop() {
	p.mu.Lock()
	if !p.stopped {
		close(p.done)
	}
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	l := p.listener
	p.listener = nil
	p.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	p.mesh.oracle.remove(p.pod.UID)
	p.mesh.refreshErrs.Delete(p.pod.UID)
}

// refresh is one iteration of the identity client's loop: certify, then sleep RefreshIn of the
// expiry of the certificate held (the new one on success, the old one on failure).
func (p *proxy) refresh() {
	p.mu.Lock()
	if p.stopped || p.certifying {
		p.mu.Unlock()
		return
	}
	p.certifying = true
	p.mu.Unlock()

	err := p.certify()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.certifying = false
	if p.stopped {
		return
	}
	if err != nil {
		p.failures++
		p.lastErr = err.Error()
		klog.V(2).InfoS("Failed to obtain identity", "pod", p.pod, "err", err)
		p.mesh.refreshErrs.Store(p.pod.UID, fmt.Sprintf("its proxy's last refresh failed (%d failures so far): %s", p.failures, p.lastErr))
	} else {
		p.mesh.refreshErrs.Delete(p.pod.UID)
	}
	next := RefreshIn(p.mesh.clock.Now(), p.expiry, p.minRef, p.maxRef)
	if p.timer != nil {
		p.timer.Stop() // one refresh loop, even if certifyNow raced this one
	}
	p.timer = p.mesh.clock.AfterFunc(next, p.refresh)
}

func (p *proxy) certify() error {
	chain, err := p.mesh.certify(p)
	if err != nil {
		return err
	}
	now := p.mesh.clock.Now()
	expiry := chain[0].NotAfter
	if !expiry.After(now) {
		return errors.New("certificate already expired")
	}
	// set_certificate (meshtls store.rs) validates the new chain for the proxy's own name against
	// its OWN roots; on error the old TLS configuration stays in place.
	if err := verifyChain(chain, p.roots, p.identity, now); err != nil {
		p.mu.Lock()
		p.rejections++
		p.mu.Unlock()
		return fmt.Errorf("rejecting certificate that does not validate against the proxy's trust roots: %w", err)
	}
	cert := &tls.Certificate{PrivateKey: p.key, Leaf: chain[0]}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.chain, p.tlsCert, p.expiry = chain, cert, expiry
	p.lastRefresh = now
	p.refreshes++
	p.lastErr = ""
	p.mu.Unlock()
	p.mesh.oracle.setChain(p.pod, chain)
	return nil
}

// certifyNow makes a proxy that holds no certificate yet retry at once, rather than after
// MIN_REFRESH: for the identity pod's own proxy when its identity container starts serving
// (Mesh.identityServing).
func (p *proxy) certifyNow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.certifying || p.chain != nil {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timer = p.mesh.clock.AfterFunc(0, p.refresh)
}

// listen binds podIP:port. A new pod may reuse the IP of a pod whose proxy is still closing, so
// binding is retried until the proxy stops.
func (p *proxy) listen(attempt int) {
	addr := net.JoinHostPort(p.podIP, strconv.Itoa(int(p.port)))
	l, err := net.Listen("tcp", addr)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		if l != nil {
			_ = l.Close()
		}
		return
	}
	if err != nil {
		delay := time.Duration(attempt+1) * 100 * time.Millisecond
		if delay > 2*time.Second {
			delay = 2 * time.Second
		}
		if attempt%20 == 0 {
			klog.InfoS("Proxy admin listener not bound yet; retrying", "pod", p.pod, "addr", addr, "err", err)
		}
		p.mesh.clock.AfterFunc(delay, func() { p.listen(attempt + 1) })
		return
	}
	p.listener = l
	p.mesh.admin.serve(l, p)
}

// tlsConfig is the admin server's TLS: the live chain only for SNI = the pod's identity (the
// rustls cert resolver returns no certificate otherwise, failing the handshake); client
// certificates are optional and verified against the proxy's own roots.
func (p *proxy) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  p.roots.pool,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == "" {
				return nil, errors.New("no SNI: no certificate")
			}
			if hello.ServerName != p.identity {
				return nil, fmt.Errorf("local certificate is not valid for SNI %q", hello.ServerName)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.tlsCert == nil {
				return nil, errors.New("no identity certificate yet")
			}
			return p.tlsCert, nil
		},
	}
}

// adminServer serves every proxy's admin port from one http.Server: each pod listener's
// connections are sniffed (TLS client hello or plain HTTP, as the proxy's admin server detects
// TLS) and handed to the shared server through a channel listener.
type adminServer struct {
	ctx    context.Context
	conns  chan net.Conn
	srv    *http.Server
	mu     sync.Mutex
	byAddr map[string]*proxy
	wg     sync.WaitGroup
}

// klogWriter writes the admin server's own error log at klog verbosity 4.
type klogWriter struct{}

func (klogWriter) Write(p []byte) (int, error) {
	klog.V(4).InfoS("Admin server", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

func newAdminServer(ctx context.Context) *adminServer {
	a := &adminServer{ctx: ctx, conns: make(chan net.Conn), byAddr: map[string]*proxy{}}
	// A refused handshake (wrong SNI, no certificate yet) is the proxy's behaviour, not an
	// error of the simulator: log it at V(4), not on stderr.
	a.srv = &http.Server{Handler: http.HandlerFunc(a.handle), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(klogWriter{}, "", 0)}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		_ = a.srv.Serve(&chanListener{ctx: ctx, conns: a.conns})
	}()
	return a
}

// close stops the shared server; the caller has cancelled ctx and closed every pod listener.
func (a *adminServer) close() {
	_ = a.srv.Close()
	a.wg.Wait()
}

func (a *adminServer) serve(l net.Listener, p *proxy) {
	a.mu.Lock()
	a.byAddr[l.Addr().String()] = p
	a.mu.Unlock()
	cfg := p.tlsConfig()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			if a.byAddr[l.Addr().String()] == p {
				delete(a.byAddr, l.Addr().String())
			}
			a.mu.Unlock()
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				if a.misbehave(c, p) {
					return
				}
				a.sniff(c, cfg)
			}()
		}
	}()
}

func (a *adminServer) sniff(c net.Conn, cfg *tls.Config) {
	// Stop closes connections still being sniffed.
	stopClose := context.AfterFunc(a.ctx, func() { _ = c.Close() })
	defer stopClose()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var conn net.Conn = &peekedConn{Conn: c, r: br}
	if first[0] == 0x16 { // TLS handshake record
		conn = tls.Server(conn, cfg)
	}
	select {
	case a.conns <- conn:
	case <-a.ctx.Done():
		_ = c.Close()
	}
}

func (a *adminServer) handle(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	var p *proxy
	if local != nil {
		a.mu.Lock()
		p = a.byAddr[local.String()]
		a.mu.Unlock()
	}
	if p == nil {
		http.Error(w, "no proxy", http.StatusNotFound)
		return
	}
	p.mu.Lock()
	expiry, last, n, ready := p.expiry, p.lastRefresh, p.refreshes, p.tlsCert != nil
	p.mu.Unlock()
	switch r.URL.Path {
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP control_identity_cert_expiration_timestamp_seconds Time when the this proxy's current mTLS identity certificate will expire (in seconds since the UNIX epoch).\n")
		fmt.Fprintf(w, "# TYPE control_identity_cert_expiration_timestamp_seconds gauge\n")
		fmt.Fprintf(w, "control_identity_cert_expiration_timestamp_seconds %d\n", unixOrZero(expiry))
		fmt.Fprintf(w, "# HELP control_identity_cert_refresh_timestamp_seconds Time when the this proxy's current mTLS identity certificate was last updated.\n")
		fmt.Fprintf(w, "# TYPE control_identity_cert_refresh_timestamp_seconds gauge\n")
		fmt.Fprintf(w, "control_identity_cert_refresh_timestamp_seconds %d\n", unixOrZero(last))
		fmt.Fprintf(w, "# HELP control_identity_cert_refreshes_total The total number of times this proxy's mTLS identity certificate has been refreshed by the Identity service.\n")
		fmt.Fprintf(w, "# TYPE control_identity_cert_refreshes_total counter\n")
		fmt.Fprintf(w, "control_identity_cert_refreshes_total %d\n", n)
	case "/ready":
		if !ready {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	case "/live":
		fmt.Fprintln(w, "live")
	default:
		http.NotFound(w, r)
	}
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// chanListener is a net.Listener fed by a channel.
type chanListener struct {
	ctx   context.Context
	conns chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}
func (l *chanListener) Close() error   { return nil }
func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
