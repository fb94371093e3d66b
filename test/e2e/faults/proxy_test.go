package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// faultProxy is a reverse proxy in front of the apiserver, used only by tests: the operator's
// kubeconfig points at it (plain HTTP on loopback, no credentials) and it forwards with the
// credentials of the kubeconfig it was given, failing a share of the requests instead: 409
// Conflict for writes, 500 or 503 for any request. Watches pass through once established.
type faultProxy struct {
	srv        *http.Server
	Kubeconfig string
	mu         sync.Mutex
	rng        *rand.Rand
	conflict   float64 // share of writes answered 409
	serverErr  float64 // share of requests answered 500/503
	Injected   atomic.Int64
	Requests   atomic.Int64
}

func startFaultProxy(t *testing.T, upstreamKubeconfig string, rng *rand.Rand) *faultProxy {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", upstreamKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{rng: rng}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = rt
	rp.FlushInterval = -1 // stream watches
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Requests.Add(1)
		if code, reason := p.decide(r); code != 0 {
			p.Injected.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Message: "injected by the test's fault proxy", Reason: reason, Code: int32(code),
			})
			return
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })

	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: "http://" + ln.Addr().String()}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	p.Kubeconfig = filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

// set changes the failure shares.
func (p *faultProxy) set(conflict, serverErr float64) {
	p.mu.Lock()
	p.conflict, p.serverErr = conflict, serverErr
	p.mu.Unlock()
}

func (p *faultProxy) decide(r *http.Request) (int, metav1.StatusReason) {
	if r.URL.Query().Get("watch") == "true" {
		return 0, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	write := r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodPost || r.Method == http.MethodDelete
	x := p.rng.Float64()
	switch {
	case write && x < p.conflict:
		return http.StatusConflict, metav1.StatusReasonConflict
	case x < p.conflict+p.serverErr:
		if p.rng.IntN(2) == 0 {
			return http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
		}
		return http.StatusInternalServerError, metav1.StatusReasonInternalError
	}
	return 0, ""
}

// TestAPIFaults runs a rotation with 20% of the operator's writes answered 409 Conflict and 10%
// of all its requests answered 500/503 by a fault-injecting proxy (seeded; the seed is logged),
// and restarts the kube-apiserver in the middle of it. Expected: the operator retries, the
// rotation completes with no repeated act and 0 violations.
func TestAPIFaults(t *testing.T) {
	e := SharedEnv(t)
	sd := seed(t)
	t.Logf("seed %d (TRUST_ROTATION_SEED=%d reproduces the proxy's choices)", sd, sd)
	proxy := startFaultProxy(t, e.Release.Kubeconfig, rand.New(rand.NewPCG(sd, 1)))
	proxy.set(0.2, 0.1)

	var l *Ledger
	RepeatOnReissue(t, func() string {
		start := time.Now()
		sup := NewSupervisor(t, e)
		sup.Start("", "--kubeconfig", proxy.Kubeconfig)
		sup.args = append(sup.args, "--kubeconfig", proxy.Kubeconfig)
		defer sup.Stop()
		l = NewLedger(t, e)
		defer l.Close()
		restarted := false
		Drive(t, e, sup, DriveOpts{onPoll: func(tar *v1alpha1.TrustAnchorRotation) {
			if restarted || stepOf(tar) != "refresh-control-plane-certificates" && stepOf(tar) != "renew-workload-certificates" {
				return
			}
			restarted = true
			ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			if err := e.Cluster.RestartAPIServer(ctx); err != nil {
				t.Fatalf("restarting the apiserver: %v", err)
			}
			t.Logf("restarted the kube-apiserver at step %s in %s", stepOf(tar), time.Since(t0).Round(time.Millisecond))
		}})
		if !restarted {
			t.Error("the apiserver was never restarted")
		}
		CheckOracle(t, e, start)
		if why := l.Reissued(t, e, 1); why != "" {
			return why
		}
		l.CheckNoRepeats(t, false)
		return ""
	})
	msg := fmt.Sprintf("api faults: %d of %d proxied requests failed on purpose; %s", proxy.Injected.Load(), proxy.Requests.Load(), l.Summary())
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
	if proxy.Injected.Load() == 0 {
		t.Error("no fault was injected")
	}
}
