package kube

import (
	"context"
	"net"
	"sync/atomic"
	"time"
)

// DialFunc dials a connection, as rest.Config.Dial does.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// ReadCoalescer paces the reads of the connections it dials, once started: a connection that
// has read everything its peer sent reads again no sooner than Every after that read. Meanwhile
// the kernel queues what arrives, and the next read takes it all at once.
//
// It is for a watch whose events trickle in. While thousands of pods roll, an event comes every
// few milliseconds, and each one read on its own wakes the process for it: at ten milliseconds
// apart, that wake-up cost about as much again as reading and decoding the event did
// (BenchmarkPodWatch). Read every Every instead, an event waits Every at most. A read that fills
// the connection's buffer does not pace the next one: a backlog is read at full speed.
type ReadCoalescer struct {
	Every   time.Duration
	started atomic.Bool
	// wait waits d; nil waits on a timer (tests replace it).
	wait func(d time.Duration)
}

// Start begins pacing reads. Until then the connections read as they would unwrapped: a
// watch's initial list streams in at full speed.
func (c *ReadCoalescer) Start() { c.started.Store(true) }

// Dial wraps dial: the connections it returns read at the pace of c.
func (c *ReadCoalescer) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &coalescedConn{Conn: conn, c: c}, nil
	}
}

// coalescedConnBuffer is the size of a coalescedConn's buffer: more than a tenth of a second of
// the pod events of a 10,000-pod rollout.
const coalescedConnBuffer = 64 << 10

// coalescedConn is a connection of a ReadCoalescer. It reads into a buffer of its own: the TLS
// client above it asks for about one record at a time, which would be a system call per event
// however many the kernel holds. Read is called by one goroutine at a time (the TLS client's),
// so its fields need no lock.
type coalescedConn struct {
	net.Conn
	c    *ReadCoalescer
	buf  []byte
	r, w int // buf[r:w] is read from the connection but not yet returned
	// drained is when the last read from the connection returned less than buf holds: the
	// peer's data had run out. Zero when it filled buf.
	drained time.Time
}

func (cc *coalescedConn) Read(p []byte) (int, error) {
	if cc.r == cc.w {
		if err := cc.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, cc.buf[cc.r:cc.w])
	cc.r += n
	return n, nil
}

// fill reads what the peer sent into the empty buffer, once Every has passed since the
// connection last drained.
func (cc *coalescedConn) fill() error {
	if !cc.drained.IsZero() && cc.c.started.Load() {
		if d := cc.c.Every - time.Since(cc.drained); d > 0 {
			cc.c.waitFor(d)
		}
	}
	if cc.buf == nil {
		cc.buf = make([]byte, coalescedConnBuffer)
	}
	n, err := cc.Conn.Read(cc.buf)
	cc.r, cc.w = 0, n
	cc.drained = time.Time{}
	if n < len(cc.buf) {
		cc.drained = time.Now()
	}
	if n > 0 {
		return nil // a connection's error comes back on the next read
	}
	return err
}

func (c *ReadCoalescer) waitFor(d time.Duration) {
	if c.wait != nil {
		c.wait(d)
		return
	}
	t := time.NewTimer(d)
	<-t.C
}
