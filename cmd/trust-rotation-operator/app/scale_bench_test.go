// Package scale measures, in process, what the operator's own path costs at the scaleSizes the bed
// cannot host: 10,000, 50,000 and 150,000 meshed pods. See BenchmarkOperatorScale.
package app

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

var (
	scaleSizes = flag.String("scale.pods", "10000,50000,150000", "meshed pods of each run of BenchmarkOperatorScale, comma-separated")
	scaleRate  = flag.Int("scale.rate", 1000, "pods the synthetic cluster replaces a second while it restarts the Deployments")
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(scaleClusterEnv); dir != "" {
		runScaleCluster(dir)
		os.Exit(0)
	}
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() != "" {
		// The operator reads its pods with a watch-list, client-go's default, which this
		// package's tests turn off for their fake clientsets (automation_test.go): a benchmark
		// run measures the operator as it runs. client-go reads its feature gates from the
		// environment on their first use, after this.
		_ = os.Unsetenv("KUBE_FEATURE_WatchListClient")
	}
	os.Exit(m.Run())
}

// scaleFigures are one size's results, for the growth table printed after the last size.
type scaleFigures struct {
	pods                                    int
	retainedPerPod                          float64
	firstCount, firstCountCPU               time.Duration
	rotationCPU                             time.Duration
	events, probes, reconciles, firstProbes int64
	rotationWall                            time.Duration
	snapshotCPU                             time.Duration
	firstCountRSS, peakRSS                  uint64
	workloads                               int
}

// BenchmarkOperatorScale runs the operator's pod path — the meshed pods' informer (watch-list
// decoded off the wire as WirePods), the pod index, the live-certificate tracker and its probes
// (crypto/tls handshakes against every pod's own leaf), and the State read of every reconcile
// (observe.Snapshotter) and the status projection (steps.Project), with the operator's pacing of
// them (churn), — against a synthetic cluster
// in another process (scale_cluster_test.go), and prints, per size:
//
//   - the heap retained per meshed pod once every pod is counted, beyond the idle process;
//   - a failover's first full count: from the informer's start to every pod probed and counted
//     converged, wall time and CPU;
//   - a rotation's cost as the pod path sees it: two rolling restarts of every Deployment (the
//     standard rotation restarts each workload twice), the trust root switched between them,
//     every replacement pod probed; CPU in all and per watch event and per pod, and the
//     reconciles (State reads) it caused.
//
// What it leaves out, said in docs/performance.md: the engine's walk between the State read and
// the projection (each reconcile here waits at its step), its acts and the status writes (the
// bed's bench counts those), and the informers of the Secrets, the bundle and the control plane
// (a few objects each).
//
// Run it with `make bench-scale` (scripts/bench-scale.sh), or
// `go test -run '^$' -bench OperatorScale -benchtime 1x ./cmd/trust-rotation-operator/app/ -scale.pods 10000`.
func BenchmarkOperatorScale(b *testing.B) {
	var all []scaleFigures
	for _, s := range strings.Split(*scaleSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			b.Fatalf("-scale.pods %q: %q is not a pod count", *scaleSizes, s)
		}
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			var f scaleFigures
			for b.Loop() {
				f = runScale(b, n)
			}
			b.ReportMetric(f.retainedPerPod, "retained-B/pod")
			b.ReportMetric(f.firstCount.Seconds(), "first-count-s")
			b.ReportMetric(f.firstCountCPU.Seconds(), "first-count-cpu-s")
			b.ReportMetric(f.rotationCPU.Seconds(), "rotation-cpu-s")
			b.ReportMetric(float64(f.rotationCPU.Microseconds())/float64(f.pods), "rotation-cpu-µs/pod")
			b.ReportMetric(float64(f.rotationCPU.Microseconds())/float64(f.events), "cpu-µs/event")
			b.ReportMetric(float64(f.reconciles), "reconciles/rotation")
			all = append(all, f)
		})
	}
	printScaleGrowth(os.Stdout, all)
}

// printScaleGrowth prints each size's scaleFigures and their growth against the smallest size, in pods:
// 1.00 is linear.
func printScaleGrowth(w io.Writer, all []scaleFigures) {
	if len(all) == 0 {
		return
	}
	base := all[0]
	fmt.Fprintf(w, "\n%-8s %-10s %-14s %-16s %-16s %-12s %-12s %-10s %-10s %-12s %-12s %s\n", "pods", "workloads", "retained B/pod", "first count (s)", "its CPU (s)",
		"rotation CPU", "µs/pod", "µs/event", "probes", "reconciles", "their CPU", "peak RSS (count / rotation)")
	for _, f := range all {
		fmt.Fprintf(w, "%-8d %-10d %-14.0f %-16.1f %-16.1f %-12s %-12.0f %-10.1f %-10d %-12d %-12s %d / %d MiB\n", f.pods, f.workloads, f.retainedPerPod,
			f.firstCount.Seconds(), f.firstCountCPU.Seconds(), f.rotationCPU.Round(10*time.Millisecond),
			float64(f.rotationCPU.Microseconds())/float64(f.pods), float64(f.rotationCPU.Microseconds())/float64(f.events),
			f.probes, f.reconciles, f.snapshotCPU.Round(time.Millisecond), f.firstCountRSS>>20, f.peakRSS>>20)
	}
	fmt.Fprintf(w, "\ngrowth against %d pods, per pod (1.00: linear)\n", base.pods)
	fmt.Fprintf(w, "%-8s %-14s %-16s %-14s %s\n", "pods", "retained/pod", "first-count CPU", "rotation CPU", "reconciles")
	for _, f := range all {
		scale := float64(f.pods) / float64(base.pods)
		fmt.Fprintf(w, "%-8d %-14.2f %-16.2f %-14.2f %.2f\n", f.pods, f.retainedPerPod/base.retainedPerPod,
			f.firstCountCPU.Seconds()/base.firstCountCPU.Seconds()/scale, f.rotationCPU.Seconds()/base.rotationCPU.Seconds()/scale,
			float64(f.reconciles)/float64(base.reconciles))
	}
}

// TestOperatorScaleSmall runs the benchmark's path at a small size, so that it keeps working:
// every pod counted after the first full count and after each restart wave, each replacement's
// four watch events delivered, and every replacement pod probed.
func TestOperatorScaleSmall(t *testing.T) {
	const pods = 300
	f := runScale(t, pods)
	if want := int64(2 * 4 * pods); f.events != want {
		t.Errorf("%d watch events over the rotation, want %d (four per replaced pod, two waves)", f.events, want)
	}
	if f.probes < 2*pods {
		t.Errorf("%d probes over the rotation, want at least %d (every replacement pod)", f.probes, 2*pods)
	}
	if f.reconciles == 0 || f.retainedPerPod <= 0 {
		t.Errorf("reconciles %d, retained %.0f B/pod: the path did not run", f.reconciles, f.retainedPerPod)
	}
}

// runScale runs one size.
func runScale(b testing.TB, pods int) scaleFigures {
	f := scaleFigures{pods: pods, workloads: len(scaleWorkloads(pods))}
	// As the operator's main sets them unless the environment does: Go on one CPU, garbage
	// collected at GOGC=50 (cmd/trust-rotation-operator/main.go). The synthetic cluster's
	// process keeps Go's defaults.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(50))
	}
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	pki := newScalePKI(b)
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	cfg := steps.DefaultConfig()

	// The operator's wiring (New, podChanged, churned): the index's hook tells the tracker, and
	// both ask for a reconcile, paced as the operator paces them (churn).
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	var certs *probe.CertTracker
	var index *podindex.Index
	var pace churn
	churned := func(controlPlane bool) { pace.changed(index.Behind(), certs.Behind(), controlPlane, time.Now(), poke) }
	index = podindex.New(func(old, cur *podindex.Pod) {
		certs.PodChanged(old, cur)
		churned(old != nil && old.ControlPlane || cur != nil && cur.ControlPlane)
	})
	var cl *scaleClusterProc
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) { return cl.dial(ctx, network, addr) }
	certs = probe.NewCertTracker(index, dial, 50, 5*time.Second, func(p *podindex.Pod) { churned(p.ControlPlane) })
	var probes atomic.Int64
	certs.OnProbe = func(error) { probes.Add(1) }
	caches := &scaleCaches{}
	caches.set(cfg, pki.anchors[0], nil, pki.issuers[0], pki.anchors[0])
	rot := steps.Facts()
	snap := &observe.Snapshotter{Config: cfg, Steps: rot, Caches: caches, Index: index, Certs: certs}
	var tar atomic.Pointer[v1alpha1.TrustAnchorRotation]
	tar.Store(&v1alpha1.TrustAnchorRotation{})
	tar.Load().Name = steps.DefaultRotationName
	// at moves the rotation to a step: its checkpoint, the status kept.
	at := func(step string) {
		for {
			t := tar.Load()
			next := t.DeepCopy()
			start := metav1.Now()
			next.Status.Checkpoint = &v1alpha1.Checkpoint{Step: step, Rotation: steps.Fingerprint(pki.anchors[1]), StartTime: &start}
			if tar.CompareAndSwap(t, next) {
				return
			}
		}
	}

	// The reconcile loop, reduced to its State read; after each it records the trust bundle's
	// hash the State wants, for the pods the next wave starts (the proxy injector's stamp).
	var reconciles, snapshotNanos atomic.Int64
	requests := make(chan chan string, 1)
	reconciled := make(chan struct{})
	go func() {
		defer close(reconciled)
		runtime.LockOSThread() // scaleThreadCPU is this goroutine's
		defer runtime.UnlockOSThread()
		for {
			select {
			case <-ctx.Done():
				return
			case <-trigger:
			}
			pace.began(time.Now())
			var waiting []chan string
			for len(requests) > 0 {
				waiting = append(waiting, <-requests)
			}
			t := tar.Load()
			step := steps.StepDetectAnchorRotation
			if t.Status.Checkpoint != nil {
				step = t.Status.Checkpoint.Step
			}
			c0 := scaleThreadCPU()
			now := time.Now()
			s, err := snap.Snapshot(now, step, t)
			hash := ""
			if err != nil {
				b.Errorf("State read: %v", err)
			} else {
				// The status projection, its result kept as the status write would keep it.
				st, _ := rot.Named(step)
				res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: step}, Phase: st.Phase,
					Decision: workflow.Decision{Outcome: workflow.Wait, Message: "waiting"}}
				next := t.DeepCopy()
				next.Status = steps.Project(rot, t.Status, t.Spec, t.Generation, s, res, now)
				tar.CompareAndSwap(t, next)
				hash = steps.BundleHash(s.DesiredBundle())
			}
			snapshotNanos.Add(int64(scaleThreadCPU() - c0))
			reconciles.Add(1)
			for _, w := range waiting {
				w <- hash
			}
		}
	}()
	// read has the loop read the State once more, after the caller's changes, and returns the
	// trust bundle's hash it wants.
	read := func() string {
		w := make(chan string, 1)
		requests <- w
		poke()
		return <-w
	}
	initial := read()
	cl = startScaleCluster(b, pods, pki, initial)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	resetPeakRSS()
	cpu0, t0 := scaleProcessCPU(b), time.Now()
	clients, err := kube.NewForConfig(&rest.Config{Host: "http://" + cl.api, QPS: -1})
	if err != nil {
		b.Fatal(err)
	}
	lw, err := podindex.MeshedPodsListWatch(clients)
	if err != nil {
		b.Fatal(err)
	}
	informer := podindex.NewPodInformer(lw, cfg, index, func(err error) { b.Logf("pod watch: %v", err) })
	go informer.RunWithContext(ctx)
	go certs.Run(ctx)
	poke()

	waitScaleConverged(b, certs, index, initial, pods, 10*time.Minute, "the first full count")
	f.firstCount, f.firstCountCPU = time.Since(t0), scaleProcessCPU(b)-cpu0
	f.firstProbes = probes.Load()
	f.firstCountRSS = peakRSS()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	f.retainedPerPod = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(pods)
	resetPeakRSS()

	// The rotation, in the states the standard order passes through: the data plane restarted
	// onto the expanded bundle while identity still signs under the old anchor
	// (propagate-trust-roots), the issuer switched to the new anchor's (the certificates' root
	// moves: every pod is behind until restarted), then the data plane restarted onto the
	// reduced bundle with certificates of the new issuer (remove-old-trust-roots).
	probes.Store(0)
	reconciles.Store(0)
	snapshotNanos.Store(0)
	cpu1, t1 := scaleProcessCPU(b), time.Now()
	caches.set(cfg, pki.anchors[1], pki.anchors[0], pki.issuers[0], pki.anchors[1], pki.anchors[0])
	at(steps.StepPropagateTrustRoots)
	expanded := read()
	f.events += cl.wave(b, expanded, 0)
	waitScaleConverged(b, certs, index, expanded, pods, 10*time.Minute, "the restart onto the expanded bundle")
	caches.set(cfg, pki.anchors[1], pki.anchors[0], pki.issuers[1], pki.anchors[1])
	at(steps.StepRemoveOldTrustRoots)
	reduced := read()
	f.events += cl.wave(b, reduced, 1)
	waitScaleConverged(b, certs, index, reduced, pods, 10*time.Minute, "the restart onto the reduced bundle")
	f.rotationCPU, f.rotationWall = scaleProcessCPU(b)-cpu1, time.Since(t1)
	f.probes, f.reconciles, f.snapshotCPU = probes.Load(), reconciles.Load(), time.Duration(snapshotNanos.Load())
	f.peakRSS = peakRSS()
	b.Logf("%d pods in %d Deployments: first count %s (CPU %s, %d probes), retained %.0f B/pod; rotation %s wall, CPU %s over %d events, %d probes, %d reconciles (State read and status projection, CPU %s); peak RSS %d MiB over the first count, %d MiB over the rotation",
		pods, f.workloads, f.firstCount.Round(time.Millisecond), f.firstCountCPU.Round(time.Millisecond), f.firstProbes, f.retainedPerPod,
		f.rotationWall.Round(time.Millisecond), f.rotationCPU.Round(time.Millisecond), f.events, f.probes, f.reconciles,
		f.snapshotCPU.Round(time.Millisecond), f.firstCountRSS>>20, f.peakRSS>>20)
	cancel()
	<-reconciled
	return f
}

// resetPeakRSS resets the process's peak resident set (VmHWM), as /proc/PID/clear_refs allows.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is the process's peak resident set since resetPeakRSS (VmHWM), in bytes.
func peakRSS() uint64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// waitScaleConverged waits until the tracker counts every pod converged on its root, and the
// index every pod on the trust bundle of the hash given.
func waitScaleConverged(b testing.TB, certs *probe.CertTracker, index *podindex.Index, bundle string, pods int, timeout time.Duration, what string) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		c := certs.Certificates()
		if c.Target == pods && c.Converged == pods && index.Behind() == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb := index.TrustBundle(bundle)
			b.Fatalf("%s: %d of %d pods converged (%d not probed), %d of %d on the trust bundle, after %s", what, c.Converged, c.Target, c.NotProbed,
				tb.Converged, tb.Target, timeout)
		}
	}
}

// scaleCaches are the informer caches of the few objects besides the pods: the anchor, previous
// anchor and issuer Secrets (certificates only, as the operator keeps them) and the trust bundle.
type scaleCaches struct {
	mu                       sync.Mutex
	anchor, previous, issuer *corev1.Secret
	bundle                   *corev1.ConfigMap
}

// set fills the caches: previous may be nil, the bundle holds the anchors given.
func (s *scaleCaches) set(cfg steps.Config, anchor, previous, issuer *x509.Certificate, bundle ...*x509.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pemOf := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	secret := func(ns, name string, cert, ca *x509.Certificate) *corev1.Secret {
		sec := &corev1.Secret{Data: map[string][]byte{"tls.crt": pemOf(cert), "ca.crt": pemOf(ca)}}
		sec.Namespace, sec.Name, sec.ResourceVersion = ns, name, steps.Fingerprint(cert)
		return sec
	}
	s.anchor = secret(cfg.CertManagerNamespace, cfg.AnchorSecret, anchor, anchor)
	s.previous = nil
	if previous != nil {
		s.previous = secret(cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, previous, previous)
	}
	// The issuer's ca.crt is its own anchor, as cert-manager's CA issuer writes it.
	ca := anchor
	if previous != nil && issuer.CheckSignatureFrom(previous) == nil {
		ca = previous
	}
	s.issuer = secret(cfg.LinkerdNamespace, cfg.IssuerSecret, issuer, ca)
	rendered := steps.RenderBundle(bundle...)
	s.bundle = &corev1.ConfigMap{Data: map[string]string{steps.TrustRootsKey: rendered}}
	s.bundle.Namespace, s.bundle.Name, s.bundle.ResourceVersion = cfg.LinkerdNamespace, cfg.TrustRootsConfigMap, steps.BundleHash(rendered)
}

func (s *scaleCaches) AnchorSecret() *corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anchor
}

func (s *scaleCaches) PreviousAnchorSecret() *corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.previous
}

func (s *scaleCaches) IssuerSecret() *corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issuer
}

func (s *scaleCaches) TrustRoots() *corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bundle
}

func (s *scaleCaches) ControlPlaneDeployment(string) *appsv1.Deployment { return nil }

// scalePKI is two anchors, each with its identity issuer.
type scalePKI struct {
	anchors, issuers []*x509.Certificate
	issuerKeys       []*ecdsa.PrivateKey
}

func newScalePKI(b testing.TB) *scalePKI {
	p := &scalePKI{}
	for range 2 {
		a, ak := newScaleCA(b, "root.linkerd.cluster.local", nil, nil)
		i, ik := newScaleCA(b, "identity.linkerd.cluster.local", a, ak)
		p.anchors, p.issuers, p.issuerKeys = append(p.anchors, a), append(p.issuers, i), append(p.issuerKeys, ik)
	}
	return p
}

func newScaleCA(b testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		b.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		b.Fatal(err)
	}
	return c, key
}

// scaleClusterProc is the synthetic cluster's process.
type scaleClusterProc struct {
	api, proxies string
	in           io.Writer
	out          *bufio.Reader
}

func startScaleCluster(b testing.TB, pods int, p *scalePKI, rootHash string) *scaleClusterProc {
	dir := b.TempDir()
	for i := range p.issuers {
		key, err := x509.MarshalPKCS8PrivateKey(p.issuerKeys[i])
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("issuer-%d.crt", i)), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.issuers[i].Raw}), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("issuer-%d.key", i)), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), scaleClusterEnv+"="+dir, "SCALE_BENCH_PODS="+strconv.Itoa(pods), "SCALE_BENCH_ROOT_HASH="+rootHash)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	c := &scaleClusterProc{in: stdin, out: bufio.NewReader(stdout)}
	line, err := c.out.ReadString('\n')
	if _, err2 := fmt.Sscanf(line, "api %s proxies %s", &c.api, &c.proxies); err != nil || err2 != nil {
		b.Fatalf("the synthetic cluster did not start: %q %v %v", line, err, err2)
	}
	return c
}

// dial reaches a pod's admin port: the synthetic cluster's proxies port, told the pod's IP.
func (c *scaleClusterProc) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, c.proxies)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, host+"\n"); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// wave has the cluster restart every Deployment and returns the events it sent.
func (c *scaleClusterProc) wave(b testing.TB, rootHash string, issuer int) int64 {
	if _, err := fmt.Fprintf(c.in, "wave %s %d %d\n", rootHash, issuer, *scaleRate); err != nil {
		b.Fatal(err)
	}
	line, err := c.out.ReadString('\n')
	var n int64
	if _, err2 := fmt.Sscanf(line, "done %d", &n); err != nil || err2 != nil {
		b.Fatalf("wave: %q %v %v", line, err, err2)
	}
	return n
}

// scaleProcessCPU is the CPU time (user and system) this process has used.
func scaleProcessCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaleThreadCPU is the CPU time of the calling OS thread (RUSAGE_THREAD): the State read's own,
// the goroutine locked to its thread for the reading.
func scaleThreadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
