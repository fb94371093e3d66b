package probe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// newCert returns a certificate for cn, and its key: self-signed when parent is nil. Its DNS
// names are cn and names.
func newCert(t testing.TB, cn string, ca bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, names ...string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: ca, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, DNSNames: append([]string{cn}, names...)}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

// serveAdmin serves a leaf signed by issuer on a loopback port, answering only the SNI identity,
// like a proxy's admin port; it returns the port.
func serveAdmin(t testing.TB, identity string, issuer *x509.Certificate, issuerKey *ecdsa.PrivateKey) int32 {
	t.Helper()
	leaf, key := newCert(t, identity, false, issuer, issuerKey)
	_, port, _ := net.SplitHostPort(tlsServer(t, identity, []*x509.Certificate{leaf, issuer}, key, nil))
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// TestProbeAllReadsLiveIssuers probes pods on the active issuer, on an earlier issuer under the
// same (new) anchor, on an issuer under the old anchor, and one that does not answer, and counts
// convergence on the new anchor's path as the operator does.
func TestProbeAllReadsLiveIssuers(t *testing.T) {
	oldAnchor, oldAnchorKey := newCert(t, "root-old", true, nil, nil)
	newAnchor, newAnchorKey := newCert(t, "root-new", true, nil, nil)
	active, activeKey := newCert(t, "identity-new", true, newAnchor, newAnchorKey)
	earlier, earlierKey := newCert(t, "identity-new-earlier", true, newAnchor, newAnchorKey)
	old, oldKey := newCert(t, "identity-old", true, oldAnchor, oldAnchorKey)
	pod := func(name string, port int32) *podindex.Pod {
		return &podindex.Pod{Namespace: "app", Name: name, UID: name, Workload: "app/Deployment/" + name, Meshed: true, Alive: true, Running: true,
			IP: "127.0.0.1", AdminPort: port, Identity: name + ".app.serviceaccount.identity.linkerd.cluster.local"}
	}
	onActive := pod("on-active", 0)
	onActive.AdminPort = serveAdmin(t, onActive.Identity, active, activeKey)
	onEarlier := pod("on-earlier", 0)
	onEarlier.AdminPort = serveAdmin(t, onEarlier.Identity, earlier, earlierKey)
	onOld := pod("on-old", 0)
	onOld.AdminPort = serveAdmin(t, onOld.Identity, old, oldKey)
	closed := pod("closed", 1) // nothing listens on port 1
	pending := pod("pending", 0)
	pending.Running = false
	pods := []*podindex.Pod{onActive, onEarlier, onOld, closed, pending}

	var calls atomic.Int32
	results := ProbeAll(t.Context(), nil, pods, 2, 2*time.Second, func(*podindex.Pod, ProbeResult) { calls.Add(1) })
	if calls.Load() != 4 || len(results) != 4 {
		t.Fatalf("probed %d pods (%d results), want the 4 running ones", calls.Load(), len(results))
	}
	if r := results["app/on-active"]; r.Err != nil || r.Issuer != steps.Fingerprint(active) || len(r.Chain) != 1 {
		t.Errorf("on-active: %+v", r)
	}
	if r := results["app/on-old"]; r.Err != nil || r.Issuer != steps.Fingerprint(old) {
		t.Errorf("on-old: %+v", r)
	}
	if r := results["app/closed"]; r.Err == nil {
		t.Errorf("closed: probe succeeded")
	}

	c := NewCertificateCheck(newAnchor).Convergence(pods, results)
	if c.Converged != 2 || c.Target != 5 {
		t.Errorf("converged %d of %d, want 2 of 5: the pods on both issuers of the new anchor", c.Converged, c.Target)
	}
	reasons := map[string]string{}
	for _, p := range c.Pods {
		reasons[p.Name] = p.Reason
	}
	for name, want := range map[string]string{"on-old": "certificate issued by " + steps.Fingerprint(old)[:12] + ", which does not chain to " + steps.Fingerprint(newAnchor)[:12],
		"closed": "probe failed", "pending": "not running"} {
		if !strings.HasPrefix(reasons[name], want) {
			t.Errorf("pod %s: reason %q, want %q…", name, reasons[name], want)
		}
	}
	if c := NewCertificateCheck(oldAnchor).Convergence(pods, results); c.Converged != 1 {
		t.Errorf("against the old anchor: %d converged, want the pod on the old issuer alone", c.Converged)
	}
	if c := NewCertificateCheck(nil).Convergence(pods, results); c.Converged != 0 {
		t.Errorf("with no root: %d converged, want none", c.Converged)
	}
	live := LiveChains(pods, results)
	if len(live) != 3 || live[0].Example != "app/on-active" || live[2].Example != "app/on-old" || steps.Fingerprint(live[2].Certs[0]) != steps.Fingerprint(old) || live[2].Pods != 1 {
		t.Errorf("live chains %+v, want one per issuer, by pod name", live)
	}
}

// BenchmarkProbeAll probes pods whose admin port (one loopback server, both sides of every TLS
// handshake in this process) presents a P-256 leaf and its issuer, as a linkerd2-proxy does: the
// client's cost per probe plus the proxy's, the figure `linkerd trust inspect` is bound by when
// probes and proxies share cores.
func BenchmarkProbeAll(b *testing.B) {
	anchor, anchorKey := newCert(b, "root", true, nil, nil)
	issuer, issuerKey := newCert(b, "identity", true, anchor, anchorKey)
	const identity = "default.bench.serviceaccount.identity.linkerd.cluster.local"
	port := serveAdmin(b, identity, issuer, issuerKey)
	pods := make([]*podindex.Pod, 100)
	for i := range pods {
		pods[i] = meshedPod("bench", "p"+strconv.Itoa(i), "uid-"+strconv.Itoa(i), "127.0.0.1", port, identity)
	}
	check := NewCertificateCheck(anchor)
	cpu0 := processCPU(b)
	for b.Loop() {
		results := ProbeAll(b.Context(), nil, pods, 8, 5*time.Second, nil)
		if c := check.Convergence(pods, results); c.Converged != len(pods) {
			b.Fatalf("%d of %d pods converged: %v", c.Converged, len(pods), c.Pods)
		}
	}
	probes := float64(b.N * len(pods))
	b.ReportMetric(float64(b.Elapsed().Microseconds())/probes, "µs/probe")
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/probes, "cpu-µs/probe")
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

// TestProbesStartBeforeTheListEnds probes a first page of pods before the second is added, as
// inspect does while the apiserver lists the rest, and stops probing what is queued once the
// context ends.
func TestProbesStartBeforeTheListEnds(t *testing.T) {
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity", true, anchor, anchorKey)
	const identity = "default.app.serviceaccount.identity.linkerd.cluster.local"
	port := serveAdmin(t, identity, issuer, issuerKey)
	pod := func(name string) *podindex.Pod { return meshedPod("app", name, name, "127.0.0.1", port, identity) }

	probed := make(chan string, 10)
	p := StartProbes(t.Context(), nil, 2, 2*time.Second, func(pod *podindex.Pod, r ProbeResult) {
		if r.Err != nil {
			t.Errorf("pod %s: %v", pod.Key(), r.Err)
		}
		probed <- pod.Key()
	})
	pending := pod("pending")
	pending.Running = false
	p.Add(pod("first"), pending)
	if got := <-probed; got != "app/first" {
		t.Fatalf("probed %s, want app/first", got)
	}
	p.Add(pod("second"))
	results := p.Wait()
	if len(results) != 2 || results["app/second"].Issuer != steps.Fingerprint(issuer) {
		t.Errorf("results %v, want app/first and app/second on the issuer, and no probe of the pod not running", results)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	p = StartProbes(ctx, func(ctx context.Context, _, _ string) (net.Conn, error) {
		calls.Add(1)
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	}, 1, 2*time.Second, nil)
	p.Add(pod("a"), pod("b"), pod("c"))
	if results := p.Wait(); calls.Load() != 1 || len(results) != 1 || results["app/a"].Err == nil {
		t.Errorf("after the context ended: %d dials, results %v; want one failed probe and the rest left", calls.Load(), results)
	}
}
