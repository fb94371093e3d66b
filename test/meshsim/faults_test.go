package meshsim

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// TestProxyFaults checks the admin-port faults without a cluster: RefuseTLS closes at once, Hang
// holds the connection (counted) until the fault is cleared, and a pod's fault overrides its
// Deployment's.
func TestProxyFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &Mesh{}
	a := &adminServer{ctx: ctx}
	p := &proxy{mesh: m, pod: PodRef{Namespace: "ns", Name: "web-1", UID: types.UID("u1")}, workload: "web", done: make(chan struct{})}

	conn := func() (server, client net.Conn) { return net.Pipe() }
	taken := func(f func() bool) <-chan bool {
		ch := make(chan bool, 1)
		go func() { ch <- f() }()
		return ch
	}
	const wait = 10 * time.Second

	s, c := conn()
	if a.misbehave(s, p) {
		t.Fatal("a healthy proxy's connection was taken")
	}
	_ = s.Close()
	_ = c.Close()

	m.SetWorkloadProxyFault("ns", "web", ProxyFaultRefuseTLS)
	s, c = conn()
	if !a.misbehave(s, p) {
		t.Fatal("RefuseTLS did not take the connection")
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("RefuseTLS: read %v, want EOF", err)
	}

	m.SetProxyFault(p.pod.UID, ProxyFaultHang) // overrides the Deployment's RefuseTLS
	s, c = conn()
	done := taken(func() bool { return a.misbehave(s, p) })
	if err := poll.Until(ctx, wait, "the connection to hang", func(context.Context) (bool, error) {
		return m.HungConnections(p.pod.UID) == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	m.SetWorkloadProxyFault("ns", "web", ProxyFaultNone) // the pod's own fault still holds
	select {
	case <-done:
		t.Fatal("Hang released the connection while the pod's fault held")
	default:
	}
	m.SetProxyFault(p.pod.UID, ProxyFaultNone)
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("Hang returned the connection to be served")
		}
	case <-time.After(wait):
		t.Fatal("clearing the fault did not release the hung connection")
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("released connection: read %v, want EOF", err)
	}
	if n := m.HungConnections(p.pod.UID); n != 0 {
		t.Fatalf("%d hung connections after release", n)
	}

	// A proxy that stops releases its hung connections.
	m.SetProxyFault(p.pod.UID, ProxyFaultHang)
	s, _ = conn()
	done = taken(func() bool { return a.misbehave(s, p) })
	close(p.done) // as stop does (stop itself needs the oracle)
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("stopping the proxy did not release the hung connection")
	}
}
