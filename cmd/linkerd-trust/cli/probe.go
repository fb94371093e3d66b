package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"

	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
)

// portForwardProtocol is the apiserver's port-forward subprotocol (client-go tools/portforward).
const portForwardProtocol = "portforward.k8s.io"

// probeFlags tune the live-certificate probes of inspect and plan.
type probeFlags struct {
	concurrency int
	timeout     time.Duration
	portForward bool
	fs          *pflag.FlagSet
	// reach is how this run reaches the pods, decided on its first probe unless --port-forward
	// is given either way.
	reach reach
}

func addProbeFlags(fs *pflag.FlagSet) *probeFlags {
	p := &probeFlags{fs: fs}
	fs.IntVar(&p.concurrency, "concurrency", 20, "live-certificate probes to run at once")
	durationVar(fs, &p.timeout, "timeout", 5*time.Second, "timeout of one live-certificate probe")
	fs.BoolVar(&p.portForward, "port-forward", false, "reach each pod's linkerd-admin port through the apiserver's port-forward (true), or at its IP (false); by default at its IP when the pod network is reachable from here, else through the port-forward")
	return p
}

func (p *probeFlags) validate() error {
	if p.concurrency < 1 {
		return usagef("--concurrency must be at least 1")
	}
	if p.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	if p.fs != nil && p.fs.Changed("port-forward") {
		p.reach.mode = reachDirect
		if p.portForward {
			p.reach.mode = reachForward
		}
	}
	return nil
}

// prober probes the live certificates of pods; progress, when set, is called after each probe.
type prober func(ctx context.Context, pods []*podindex.Pod, progress func(done, total int)) map[string]probe.ProbeResult

// liveProbes probes the live certificates of meshed pods as the pod list's pages arrive
// (observe.ReadFeeding): with ten thousand pods, the list takes most of a second that the
// probes, bound by TLS handshakes, no longer wait for.
type liveProbes struct {
	ctx      context.Context
	cancel   context.CancelFunc
	probes   *probe.Probes      // nil with env.Probe (tests), which probes in wait
	forward  *portForwardDialer // unless the probes go at each pod's IP
	reach    *reach
	timeout  time.Duration
	note     io.Writer // where the decision of reach is said
	test     prober
	progress func(done, total int)
	total    atomic.Int64
}

// startProbes starts the probes of inspect and plan; the caller feeds them the pods with feed,
// and calls wait for the results and stop once done (stop after wait is harmless).
func (e *Env) startProbes(ctx context.Context, cl *Clients, pf *probeFlags, progress func(done, total int)) (*liveProbes, error) {
	ctx, cancel := context.WithCancel(ctx)
	lp := &liveProbes{ctx: ctx, cancel: cancel, test: e.Probe, progress: progress, reach: &pf.reach, timeout: pf.timeout, note: e.Err}
	if e.Probe != nil {
		return lp, nil
	}
	direct := (&net.Dialer{}).DialContext
	if pf.reach.current() != reachDirect {
		if cl.REST == nil {
			cancel()
			return nil, errors.New("reaching pods through the port-forward needs a Kubernetes client configuration")
		}
		d, err := newPortForwardDialer(cl.REST)
		if err != nil {
			cancel()
			return nil, err
		}
		lp.forward = d
	}
	// Every probe dials as the run decided, on the first page of pods, before it started them.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if lp.reach.current() == reachForward {
			return lp.forward.dial(ctx, network, addr)
		}
		return direct(ctx, network, addr)
	}
	var done atomic.Int64
	lp.probes = probe.StartProbes(ctx, dial, pf.concurrency, pf.timeout, func(*podindex.Pod, probe.ProbeResult) {
		n := done.Add(1)
		if progress != nil {
			progress(int(n), int(lp.total.Load()))
		}
	})
	return lp, nil
}

// feed hands a page of listed pods to the probes. With no --port-forward, the first pod to
// probe decides how the run reaches them all (reach.decide) before any probe starts.
func (lp *liveProbes) feed(page []*podindex.Pod) {
	if lp.probes == nil {
		return
	}
	for _, p := range page {
		if probe.Probeable(p) {
			lp.total.Add(1)
			if p.IP != "" && lp.reach.current() == reachAuto {
				lp.forward.learn([]*podindex.Pod{p})
				lp.reach.decide(lp.ctx, p, lp.timeout, (&net.Dialer{}).DialContext, lp.forward.dial, lp.note)
			}
		}
	}
	if lp.forward != nil {
		lp.forward.learn(page)
	}
	lp.probes.Add(page...)
}

// trouble says why when every probe failed, and what to do (probeTrouble).
func (lp *liveProbes) trouble(results map[string]probe.ProbeResult) string {
	return probeTrouble(results, lp.reach.current())
}

// wait returns the results of the probes of every pod fed; pods are all of them, for env.Probe.
func (lp *liveProbes) wait(pods []*podindex.Pod) map[string]probe.ProbeResult {
	defer lp.cancel()
	if lp.test != nil {
		return lp.test(lp.ctx, pods, lp.progress)
	}
	return lp.probes.Wait()
}

// stop ends the probes, unfinished when the command failed before it needed them.
func (lp *liveProbes) stop() {
	lp.cancel()
	if lp.probes != nil {
		lp.probes.Wait()
	}
}

// portForwardDialer reaches "podIP:port" through the apiserver's port-forward subresource of
// the pod with that IP, the way `kubectl port-forward` (and `linkerd identity`) do, without a
// local listener: each dial is one SPDY connection with one data stream. It learns the pods as
// they are listed.
//
// Each dial builds its own round tripper: client-go's SPDY round tripper keeps the connection of
// its last RoundTrip in a field that NewConnection reads (k8s.io/streaming's SpdyRoundTripper
// says so), so two dials sharing one could wrap each other's connection, and the streams opened
// on it would wait for replies that go to the other (seen as "Timeout occurred").
type portForwardDialer struct {
	cfg  *rest.Config
	kube kubernetes.Interface

	mu   sync.Mutex
	byIP map[string]*podindex.Pod
}

func newPortForwardDialer(cfg *rest.Config) (*portForwardDialer, error) {
	if _, _, err := spdy.RoundTripperFor(cfg); err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &portForwardDialer{cfg: cfg, kube: kube, byIP: map[string]*podindex.Pod{}}, nil
}

// learn records the IPs of pods.
func (d *portForwardDialer) learn(pods []*podindex.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range pods {
		if p.IP != "" {
			d.byIP[p.IP] = p
		}
	}
}

func (d *portForwardDialer) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	p, ok := d.byIP[host]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no meshed pod has IP %s", host)
	}
	url := d.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(d.cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s: %w", p.Key(), err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	type result struct {
		conn httpstream.Connection
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		conn, _, err := dialer.Dial(portForwardProtocol)
		ch <- result{conn, err}
	}()
	var conn httpstream.Connection
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to pod %s: %w", p.Key(), r.err)
		}
		conn = r.conn
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
	return openForwardedPort(conn, p.Key(), port)
}

// openForwardedPort opens the error and data streams of one port-forward request.
func openForwardedPort(conn httpstream.Connection, pod, port string) (net.Conn, error) {
	if _, err := strconv.Atoi(port); err != nil {
		conn.Close()
		return nil, fmt.Errorf("invalid port %q", port)
	}
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, port)
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s: error stream: %w", pod, err)
	}
	errStream.Close() // nothing is sent on it; the server reports failures there
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s: data stream: %w", pod, err)
	}
	c := &forwardedConn{conn: conn, data: data, pod: pod}
	go func() {
		msg, _ := io.ReadAll(errStream)
		if len(msg) > 0 {
			c.setErr(fmt.Errorf("port-forward to pod %s port %s: %s", pod, port, msg))
			conn.Close()
		}
	}()
	return c, nil
}

// forwardedConn is a net.Conn over a port-forward data stream. Deadlines are not supported:
// the TLS handshake that uses it is bounded by its context, which closes the connection.
type forwardedConn struct {
	conn httpstream.Connection
	data httpstream.Stream
	pod  string

	mu  sync.Mutex
	err error
}

func (c *forwardedConn) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *forwardedConn) wrap(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil && err != nil {
		return c.err
	}
	return err
}

func (c *forwardedConn) Read(b []byte) (int, error) {
	n, err := c.data.Read(b)
	return n, c.wrap(err)
}

func (c *forwardedConn) Write(b []byte) (int, error) {
	n, err := c.data.Write(b)
	return n, c.wrap(err)
}

func (c *forwardedConn) Close() error {
	c.data.Reset()
	return c.conn.Close()
}

func (c *forwardedConn) LocalAddr() net.Addr                { return forwardAddr("local") }
func (c *forwardedConn) RemoteAddr() net.Addr               { return forwardAddr(c.pod) }
func (c *forwardedConn) SetDeadline(time.Time) error        { return nil }
func (c *forwardedConn) SetReadDeadline(time.Time) error    { return nil }
func (c *forwardedConn) SetWriteDeadline(t time.Time) error { return nil }

type forwardAddr string

func (a forwardAddr) Network() string { return "port-forward" }
func (a forwardAddr) String() string  { return string(a) }
