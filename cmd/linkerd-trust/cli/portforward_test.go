package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/steps/podindex"
)

// TestPortForwardDialsConcurrently dials many pods at once through a port-forward server built
// on the library's SPDY upgrader, as the apiserver and a kubelet serve it: every connection must
// reach its own pod. A round tripper shared by the dials would hand one dial's connection to
// another (client-go's SPDY round tripper is single-use), and their streams would time out.
func TestPortForwardDialsConcurrently(t *testing.T) {
	const n = 32
	srv := httptest.NewTLSServer(http.HandlerFunc(servePortForward))
	defer srv.Close()
	// No dial goes on from its upgrade to its streams before every dial is upgraded, so the
	// dials overlap where a shared round tripper would mix them up: it would fail every time,
	// not once in a while.
	var upgraded sync.WaitGroup
	upgraded.Add(n)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				upgraded.Done()
				upgraded.Wait()
				return resp, err
			})
		}}
	d, err := newPortForwardDialer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods := make([]*podindex.Pod, n)
	for i := range pods {
		pods[i] = &podindex.Pod{Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), IP: fmt.Sprintf("10.0.0.%d", i+1)}
	}
	d.learn(pods)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := d.dial(ctx, "tcp", p.IP+":4191")
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			got, err := io.ReadAll(conn)
			if err != nil {
				errs <- fmt.Errorf("reading from %s: %w", p.Key(), err)
				return
			}
			if want := p.Key() + ":4191"; string(got) != want {
				errs <- fmt.Errorf("dialled %s, reached %q", want, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// servePortForward answers a pod's port-forward request as a kubelet does, over the library's
// SPDY upgrader: on each data stream it writes "namespace/name:port" and closes it.
func servePortForward(w http.ResponseWriter, req *http.Request) {
	// /api/v1/namespaces/<ns>/pods/<name>/portforward
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(parts) != 7 || parts[6] != "portforward" {
		http.NotFound(w, req)
		return
	}
	pod := parts[3] + "/" + parts[5]
	if _, err := httpstream.Handshake(req, w, []string{portForwardProtocol}); err != nil {
		return
	}
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, req, func(s httpstream.Stream, replySent <-chan struct{}) error {
		if s.Headers().Get(corev1.StreamType) != corev1.StreamTypeData {
			return nil
		}
		go func() {
			<-replySent
			fmt.Fprintf(s, "%s:%s", pod, s.Headers().Get(corev1.PortHeader))
			s.Close()
		}()
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	<-conn.CloseChan()
}
