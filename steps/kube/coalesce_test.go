package kube

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// queuedConn stands in for a socket: a read returns all that arrived (up to the reader's
// buffer), as a read of a TCP connection returns what the kernel holds.
type queuedConn struct {
	net.Conn
	mu      sync.Mutex
	arrived bytes.Buffer
	reads   int
}

func (q *queuedConn) arrive(s string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.arrived.WriteString(s)
}

func (q *queuedConn) Read(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reads++
	if q.arrived.Len() == 0 {
		return 0, io.EOF
	}
	return q.arrived.Read(p)
}

// pacedConn dials a queuedConn through a ReadCoalescer whose waits run during instead of
// sleeping, and counts them.
func pacedConn(t *testing.T, during func(q *queuedConn)) (*ReadCoalescer, *queuedConn, net.Conn, *int) {
	t.Helper()
	q := &queuedConn{}
	waits := 0
	rc := &ReadCoalescer{Every: time.Hour}
	rc.wait = func(d time.Duration) {
		if d <= 0 || d > time.Hour {
			t.Errorf("waited %v, want within (0, 1h]", d)
		}
		waits++
		during(q)
	}
	conn, err := rc.Dial(func(context.Context, string, string) (net.Conn, error) { return q, nil })(t.Context(), "tcp", "apiserver:443")
	if err != nil {
		t.Fatal(err)
	}
	return rc, q, conn, &waits
}

func readString(t *testing.T, conn net.Conn, size int) string {
	t.Helper()
	p := make([]byte, size)
	n, err := conn.Read(p)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(p[:n])
}

// TestReadCoalescerReadsWhatArrivedMeanwhile: once started, a connection that has caught up
// waits before its next read, and that read returns everything that arrived meanwhile.
func TestReadCoalescerReadsWhatArrivedMeanwhile(t *testing.T) {
	rc, q, conn, waits := pacedConn(t, func(q *queuedConn) {
		q.arrive("event-2;")
		q.arrive("event-3;")
	})
	q.arrive("event-1;")
	if got := readString(t, conn, 512); got != "event-1;" {
		t.Fatalf("first read = %q", got)
	}
	q.arrive("before-start;")
	if got := readString(t, conn, 512); got != "before-start;" || *waits != 0 {
		t.Fatalf("before Start: read %q after %d waits, want %q and none", got, *waits, "before-start;")
	}
	rc.Start()
	if got := readString(t, conn, 512); got != "event-2;event-3;" || *waits != 1 {
		t.Fatalf("after Start: read %q after %d waits, want both events after one", got, *waits)
	}
	if q.reads != 3 {
		t.Errorf("%d reads of the connection, want 3", q.reads)
	}
}

// TestReadCoalescerServesSmallReadsFromItsBuffer: what one read of the connection took is handed
// out to small reads (a TLS client's) without reading the connection or waiting again.
func TestReadCoalescerServesSmallReadsFromItsBuffer(t *testing.T) {
	rc, q, conn, waits := pacedConn(t, func(*queuedConn) {})
	rc.Start()
	q.arrive("abcdefgh")
	var got []string
	for range 4 {
		got = append(got, readString(t, conn, 2))
	}
	if strings.Join(got, ",") != "ab,cd,ef,gh" || q.reads != 1 || *waits != 0 {
		t.Fatalf("reads %q, %d of the connection, %d waits; want ab,cd,ef,gh from one read and no wait", got, q.reads, *waits)
	}
}

// TestReadCoalescerReadsABacklogAtFullSpeed: a read that fills the buffer leaves data behind in
// the kernel, so the next read does not wait.
func TestReadCoalescerReadsABacklogAtFullSpeed(t *testing.T) {
	rc, q, conn, waits := pacedConn(t, func(*queuedConn) {})
	rc.Start()
	q.arrive(strings.Repeat("x", coalescedConnBuffer+3))
	total := 0
	for total < coalescedConnBuffer+3 {
		total += len(readString(t, conn, 16<<10))
	}
	if *waits != 0 || q.reads != 2 {
		t.Fatalf("%d waits, %d reads of the connection for a backlog of a buffer and 3 bytes; want none and 2", *waits, q.reads)
	}
	if _, err := conn.Read(make([]byte, 8)); !errors.Is(err, io.EOF) || *waits != 1 {
		t.Fatalf("read after the backlog: err %v after %d waits, want EOF after one", err, *waits)
	}
}
