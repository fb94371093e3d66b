package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
)

// closedPort returns a loopback address nothing listens on: a connect is refused at once.
func closedPort(t *testing.T) (string, int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	return addr.IP.String(), int32(addr.Port)
}

func TestReachDecidesOncePerRun(t *testing.T) {
	ctx := context.Background()
	direct := (&net.Dialer{}).DialContext
	forwarded := 0
	forwardOK := func(context.Context, string, string) (net.Conn, error) {
		forwarded++
		a, b := net.Pipe()
		b.Close()
		return a, nil
	}
	forwardRefused := func(context.Context, string, string) (net.Conn, error) {
		forwarded++
		return nil, errors.New(`pods "web-0" is forbidden: User "dev" cannot create resource "pods/portforward"`)
	}

	t.Run("the pod network answers: at each pod's IP, said nowhere", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addr := ln.Addr().(*net.TCPAddr)
		var r reach
		var note bytes.Buffer
		forwarded = 0
		r.decide(ctx, &podindex.Pod{Namespace: "web", Name: "web-0", IP: "127.0.0.1", AdminPort: int32(addr.Port)}, time.Second, direct, forwardOK, &note)
		if r.current() != reachDirect || note.Len() != 0 || forwarded != 0 {
			t.Fatalf("mode %d, note %q, %d port-forwards; want direct, silent, none", r.current(), note.String(), forwarded)
		}
	})

	t.Run("it does not: the port-forward, said in one line, then never decided again", func(t *testing.T) {
		ip, port := closedPort(t)
		var r reach
		var note bytes.Buffer
		forwarded = 0
		pod := &podindex.Pod{Namespace: "web", Name: "web-0", IP: ip, AdminPort: port}
		r.decide(ctx, pod, time.Second, direct, forwardOK, &note)
		if r.current() != reachForward || forwarded != 1 {
			t.Fatalf("mode %d after %d port-forwards, want port-forward after one", r.current(), forwarded)
		}
		line := note.String()
		if strings.Count(line, "\n") != 1 || !strings.Contains(line, "not reachable from here") || !strings.Contains(line, "port-forward") ||
			!strings.Contains(line, net.JoinHostPort(ip, strconv.Itoa(int(port)))) {
			t.Fatalf("note %q: want one line naming the address that failed and the port-forward", line)
		}
		r.decide(ctx, pod, time.Second, direct, forwardRefused, &note)
		if r.current() != reachForward || forwarded != 1 || note.String() != line {
			t.Fatalf("a second decision ran: mode %d, %d port-forwards, note %q", r.current(), forwarded, note.String())
		}
	})

	t.Run("neither answers: at each pod's IP, and both reasons said", func(t *testing.T) {
		ip, port := closedPort(t)
		var r reach
		var note bytes.Buffer
		r.decide(ctx, &podindex.Pod{Namespace: "web", Name: "web-0", IP: ip, AdminPort: port}, time.Second, direct, forwardRefused, &note)
		if r.current() != reachDirect {
			t.Fatalf("mode %d, want direct", r.current())
		}
		if line := note.String(); !strings.Contains(line, "web/web-0") || !strings.Contains(line, "refused") || !strings.Contains(line, "pods/portforward") {
			t.Fatalf("note %q: want the pod, the refused connect and the forbidden port-forward", line)
		}
	})

	t.Run("forced by --port-forward either way: no decision", func(t *testing.T) {
		for _, arg := range []string{"--port-forward", "--port-forward=false"} {
			fs := newFlagSet("inspect")
			pf := addProbeFlags(fs)
			if err := fs.Parse([]string{arg}); err != nil {
				t.Fatal(err)
			}
			if err := pf.validate(); err != nil {
				t.Fatal(err)
			}
			want := map[string]reachMode{"--port-forward": reachForward, "--port-forward=false": reachDirect}[arg]
			if pf.reach.current() != want {
				t.Errorf("%s: mode %d, want %d", arg, pf.reach.current(), want)
			}
		}
		fs := newFlagSet("inspect")
		pf := addProbeFlags(fs)
		if err := pf.validate(); err != nil || pf.reach.current() != reachAuto {
			t.Errorf("no flag: mode %d (%v), want decided on the first probe", pf.reach.current(), err)
		}
	})
}

func TestProbeTroubleSaysWhyAndWhatToDo(t *testing.T) {
	refused := errors.New("dial tcp 10.0.0.7:4191: connect: connection refused")
	if got := probeTrouble(map[string]probe.ProbeResult{"web/a": {Err: refused}, "web/b": {Issuer: "ab"}}, reachDirect); got != "" {
		t.Errorf("one pod answered, got %q", got)
	}
	if got := probeTrouble(map[string]probe.ProbeResult{}, reachDirect); got != "" {
		t.Errorf("nothing probed, got %q", got)
	}
	all := map[string]probe.ProbeResult{"web/b": {Err: errors.New("i/o timeout")}, "web/a": {Err: refused}}
	got := probeTrouble(all, reachDirect)
	for _, want := range []string{"2 probed", "web/a: dial tcp 10.0.0.7:4191: connect: connection refused", "--port-forward", "pods/portforward", "NetworkPolicies", "docs/troubleshooting.md#"} {
		if !strings.Contains(got, want) {
			t.Errorf("direct: %q does not say %q", got, want)
		}
	}
	got = probeTrouble(all, reachForward)
	for _, want := range []string{"through the apiserver's port-forward", "kubectl auth can-i create pods/portforward"} {
		if !strings.Contains(got, want) {
			t.Errorf("port-forward: %q does not say %q", got, want)
		}
	}
}
