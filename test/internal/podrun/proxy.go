package podrun

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
)

// ServiceProxy stands in for kube-proxy: it forwards connections to a Service's ClusterIP and
// port to an endpoint. The ClusterIP must be an address of this machine for connections to
// arrive (a sandbox's Net.HostAddrs); the proxy listens with IP_FREEBIND, so it may start first.
type ServiceProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	sources map[string]int // connections by source IP
	conns   map[net.Conn]struct{}
}

// NewServiceProxy listens on clusterIP:port and forwards every connection to target.
func NewServiceProxy(ctx context.Context, clusterIP string, port int, target string) (*ServiceProxy, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	addr := net.JoinHostPort(clusterIP, fmt.Sprint(port))
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the Service proxy on %s: %w", addr, err)
	}
	p := &ServiceProxy{ln: ln, target: target, sources: map[string]int{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *ServiceProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		src, _, _ := net.SplitHostPort(in.RemoteAddr().String())
		p.mu.Lock()
		p.sources[src]++
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(in)
		}()
	}
}

// forward copies both ways between in and a new connection to the target until either ends.
func (p *ServiceProxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	p.conns[in], p.conns[out] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, in)
		in.Close()
		out.Close()
		close(done)
	}()
	_, _ = io.Copy(in, out)
	in.Close()
	out.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// Addr is the address the proxy listens on.
func (p *ServiceProxy) Addr() string { return p.ln.Addr().String() }

// Connections returns how many connections came from source IP ip.
func (p *ServiceProxy) Connections(ip net.IP) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sources[ip.String()]
}

// Close stops listening, ends every forwarded connection, and waits for its goroutines.
func (p *ServiceProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
