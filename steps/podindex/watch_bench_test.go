package podindex

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/steps/kube"
)

// watchServerEnv makes the test binary a watch server (TestMain): BenchmarkPodWatch runs its
// apiserver in a process of its own, so that the benchmark's CPU is the client's alone.
const watchServerEnv = "OBSERVE_BENCH_WATCH_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(watchServerEnv) != "" {
		serveWatchStream()
		return
	}
	os.Exit(m.Run())
}

// watchFrames are the protobuf watch stream of pods as the apiserver frames it (a big-endian
// length, then a WatchEvent whose object is a Pod's envelope): a meshed pod as a kubelet's status
// update leaves it, managed fields and all, with its resourceVersion moving on.
func watchFrames() ([][]byte, error) {
	var frames [][]byte
	for i := range 16 {
		pod := wirePods()["sidecar"]
		pod.APIVersion, pod.Kind = "v1", "Pod"
		pod.ResourceVersion = strconv.Itoa(1000 + i)
		for _, manager := range []string{"kube-controller-manager", "kube-scheduler", "kubelet"} {
			pod.ManagedFields = append(pod.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager,
				Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{` + strings.Repeat(`"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:status":{}},`, 8) + `}}}`)}})
		}
		var obj bytes.Buffer
		if err := protobuf.NewSerializer(kube.Scheme, kube.Scheme).Encode(pod, &obj); err != nil {
			return nil, err
		}
		raw, err := (&metav1.WatchEvent{Type: "MODIFIED", Object: runtime.RawExtension{Raw: obj.Bytes()}}).Marshal()
		if err != nil {
			return nil, err
		}
		frames = append(frames, binary.BigEndian.AppendUint32(nil, uint32(len(raw)))) //nolint:gosec // a few KB
		frames[i] = append(frames[i], raw...)
	}
	return frames, nil
}

// serveWatchStream serves an endless pod watch over TLS, HTTP/2 offered, flushing each event as
// the apiserver does when no other is queued: back to back, or one per interval watchServerEnv
// sets ("0" for none). It prints its URL and certificate, and serves until its standard input
// closes.
func serveWatchStream() {
	frames, err := watchFrames()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		w.WriteHeader(http.StatusOK)
		var tick <-chan time.Time
		if every, _ := time.ParseDuration(os.Getenv(watchServerEnv)); every > 0 {
			t := time.NewTicker(every)
			defer t.Stop()
			tick = t.C
		}
		for i := 0; ; i++ {
			if tick != nil {
				<-tick
			}
			if _, err := w.Write(frames[i%len(frames)]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	fmt.Println(srv.URL)
	_ = pem.Encode(os.Stdout, &pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

// BenchmarkPodWatch is the operator's CPU per pod event read off its pod watch (the transport,
// the framing and the WirePod decoder), over HTTP/2 as client-go negotiates by default and over
// HTTP/1.1, with events back to back (a burst: many events a read), one every millisecond and
// one every ten (each event wakes the reader: a rotation's pods roll at about a hundred events a
// second), the last also read every 100ms as the operator does (kube.ReadCoalescer); the
// apiserver runs in another process. In the default benchtime the 10ms cases read about a hundred
// events each: -benchtime 1000x gives steadier figures.
func BenchmarkPodWatch(b *testing.B) {
	for _, bc := range []struct {
		name     string
		protos   []string
		every    time.Duration
		coalesce time.Duration
	}{
		{"http2/burst", nil, 0, 0},
		{"http1.1/burst", []string{"http/1.1"}, 0, 0},
		{"http2/paced", nil, time.Millisecond, 0},
		{"http1.1/paced", []string{"http/1.1"}, time.Millisecond, 0},
		{"http1.1/paced10ms", []string{"http/1.1"}, 10 * time.Millisecond, 0},
		{"http1.1/paced10ms/coalesced100ms", []string{"http/1.1"}, 10 * time.Millisecond, 100 * time.Millisecond},
	} {
		b.Run(bc.name, func(b *testing.B) {
			protos := bc.protos
			url, ca := startWatchServer(b, bc.every)
			rc := &kube.ReadCoalescer{Every: bc.coalesce}
			cfg := &rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAData: ca, NextProtos: protos}}
			if bc.coalesce > 0 {
				cfg.Dial = rc.Dial((&net.Dialer{}).DialContext)
			}
			clients, err := kube.NewForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			lw, err := MeshedPodsListWatch(clients)
			if err != nil {
				b.Fatal(err)
			}
			w, err := lw.WatchWithContext(b.Context(), metav1.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			events := w.ResultChan()
			next := func() {
				e, ok := <-events
				if !ok {
					b.Fatal("the watch ended")
				}
				if _, ok := e.Object.(*WirePod); !ok {
					b.Fatalf("event %s of %T, want a WirePod", e.Type, e.Object)
				}
			}
			next() // the connection is up
			rc.Start()
			cpu0 := processCPU(b)
			for b.Loop() {
				next()
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/event")
		})
	}
}

// startWatchServer starts serveWatchStream in a process of its own, stopped at the end of b.
func startWatchServer(b *testing.B, every time.Duration) (url string, ca []byte) {
	cmd := exec.Command(os.Args[0]) //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), watchServerEnv+"="+every.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	r := bufio.NewReader(stdout)
	url, err = r.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	for !bytes.HasSuffix(ca, []byte("-----END CERTIFICATE-----\n")) {
		line, err := r.ReadBytes('\n')
		if err != nil {
			b.Fatalf("the watch server's certificate: %v", err)
		}
		ca = append(ca, line...)
	}
	return strings.TrimSpace(url), ca
}

// processCPU is the CPU time the process has used, user and system: on shared cores a probe's
// cost, where its wall time is the neighbours' too.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
