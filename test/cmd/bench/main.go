// Command bench measures the trust-rotation operator and the linkerd-trust CLI at scale on the
// local test cluster and prints (never asserts) the figures of issue 7: for each size, a fresh
// cluster with N meshed pods (kwok) under the mesh simulator, the operator as a process of its
// own, one full rotation driven as README's Rotate section says, then `linkerd trust inspect`.
//
//   - phase reaction latency p50/p99/max: from the moment a phase's exit condition became true
//     to the phase change in the status (see world);
//   - operator-added time: rotation wall time minus the time the world was busy (cert-manager,
//     rollouts, terminating pods, certificate issuance, the user's own acts), and its share;
//   - operator peak RSS (VmHWM) and CPU seconds (utime+stime) from /proc;
//   - the operator's apiserver requests by verb and resource, per minute in steady state and
//     during the rotation (counted by the operator's --count-api-requests transport);
//   - `linkerd trust inspect` wall time at several --concurrency values.
//
// scripts/bench.sh builds the binaries and runs it; `make bench` runs the script.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

type options struct {
	sizes        []int
	podsPerNS    int
	replicas     int
	steady       time.Duration
	concurrency  []int
	operatorBin  string
	cliBin       string
	logDir       string
	operatorArgs []string
	operatorEnv  []string
	rotate       bool
	hold         bool
	cpuProfile   bool
}

// result is one size's figures.
type result struct {
	pods, namespaces, deployments int
	bedReady                      time.Duration
	latencies                     []transition
	gaps                          []gap
	wall, busy                    time.Duration
	rssSynced, rssPeak            int64
	rssTop                        rssSample // the highest of the rotation's one-second samples
	cpuSteady, cpuRotation, cpu   time.Duration
	steady, rotation              requests
	steadyReconciles              requests // per minute, by cause
	rotationReconciles            requests // by cause
	rotationProbes                requests // by result
	steadyWindow                  time.Duration
	inspect                       map[int]time.Duration
	inspectErr                    map[int]string
	// inspectCPU is, per --concurrency, the CPU each process spent while inspect ran: the mesh
	// and the probes' other side run on the same cores as the CLI.
	inspectCPU map[int]string
}

func main() {
	klog.InitFlags(nil)
	// The simulated proxies' TLS servers log every refused handshake (a probe before the proxy
	// holds a certificate) through the standard logger: keep progress readable.
	log.SetOutput(io.Discard)
	o := options{}
	sizes := flag.String("sizes", "1000,5000,10000", "comma-separated numbers of meshed application pods, one rotation each")
	flag.IntVar(&o.podsPerNS, "pods-per-namespace", 10, "meshed pods per namespace (1,000 pods: 100 namespaces)")
	flag.IntVar(&o.replicas, "replicas", 5, "replicas per Deployment")
	flag.DurationVar(&o.steady, "steady", time.Minute, "steady-state window over which the operator's apiserver requests are counted")
	conc := flag.String("concurrency", "10,50,200", "comma-separated --concurrency values of linkerd trust inspect")
	flag.StringVar(&o.operatorBin, "operator", "bin/trust-rotation-operator", "operator binary")
	flag.StringVar(&o.cliBin, "cli", "bin/linkerd-trust", "linkerd-trust binary")
	flag.StringVar(&o.logDir, "log-dir", "bin/bench", "directory for the operator's logs and heap profiles")
	flag.BoolVar(&o.rotate, "rotate", true, "rotate the trust anchor; false measures sync, steady state and inspect only")
	opArgs := flag.String("operator-args", "", "extra operator flags, space-separated")
	opEnv := flag.String("operator-env", "", "extra environment of the operator process alone, space-separated NAME=value (GODEBUG=gctrace=1, GOMEMLIMIT=40MiB); the bench's own environment would reach the simulated mesh it hosts too")
	flag.BoolVar(&o.cpuProfile, "cpu-profile", true, "take CPU profiles of the operator while it rotates, and a heap profile at its highest RSS; profiling adds to the operator's RSS (the profile's buffers, and the garbage of writing a profile every 30s: about 3 MiB at 1,000 pods)")
	flag.BoolVar(&o.hold, "hold", false, "after measuring the first size, keep its cluster, mesh and operator up until interrupted (SIGINT), for profiling by hand, then stop")
	flag.Parse()
	var err error
	if o.sizes, err = ints(*sizes); err != nil {
		fatal(err)
	}
	if o.concurrency, err = ints(*conc); err != nil {
		fatal(err)
	}
	o.operatorArgs = strings.Fields(*opArgs)
	o.operatorEnv = strings.Fields(*opEnv)
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		fatal(err)
	}

	// Stop on SIGINT/SIGTERM through ctx, so that the cluster, the mesh and the operator are
	// stopped by their PIDs on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []*result
	for _, n := range o.sizes {
		r, err := runSize(ctx, o, n)
		if err != nil {
			stop()
			fatal(fmt.Errorf("%d pods: %w", n, err))
		}
		results = append(results, r)
		if o.hold {
			break // interrupted while holding: printed already
		}
		printResult(r)
	}
	printTable(results)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

var began = time.Now()

// progress prints a timestamped line to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%7s] %s\n", time.Since(began).Round(time.Second), fmt.Sprintf(format, args...))
}

func runSize(parent context.Context, o options, pods int) (_ *result, err error) {
	// A 10,000-pod rotation restarts 10,000 pods three times: on a 2-core bed, about 20 minutes
	// each, more on a loaded machine.
	ctx, cancel := context.WithTimeout(parent, max(60*time.Minute, time.Duration(pods/50)*time.Minute))
	defer cancel()
	ns := max(pods/o.podsPerNS, 1)
	r := &result{pods: pods, namespaces: ns, deployments: max(pods/o.replicas, 1), inspect: map[int]time.Duration{}, inspectErr: map[int]string{},
		inspectCPU: map[int]string{}}
	replicas := int32(pods / r.deployments)
	progress("%d pods: starting a cluster with %d kwok nodes", pods, pods/1000+2)
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: pods/1000 + 2, NodePods: 1100})
	if err != nil {
		return nil, err
	}
	defer func() {
		progress("%d pods: stopping the cluster", pods)
		if stopErr := c.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	kube := c.Kube()
	p, err := pki.Install(ctx, kube, c.CertManager(), pki.Options{})
	if err != nil {
		return nil, err
	}
	root, err := cluster.ModuleRoot()
	if err != nil {
		return nil, err
	}
	if err := c.ApplyCRDs(ctx, filepath.Join(root, "manifests", "crds")); err != nil {
		return nil, err
	}
	tars, err := client.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}

	op, err := startOperator(o.operatorBin, c.Kubeconfig(), filepath.Join(o.logDir, fmt.Sprintf("operator-%d.log", pods)), o.operatorEnv, o.operatorArgs...)
	if err != nil {
		return nil, err
	}
	defer op.stop()

	mesh, err := meshsim.Start(ctx, meshsim.Config{
		RESTConfig:         c.RESTConfig(),
		VolumeRefreshDelay: meshsim.Never, // the injector sees a new bundle only when restarted
		Registerer:         prometheus.NewRegistry(),
	})
	if err != nil {
		return nil, err
	}
	defer mesh.Stop()

	w := newWorld()
	wctx, stopWorld := context.WithCancel(ctx)
	defer stopWorld()
	w.run(wctx, kube, tars, mesh, steps.DefaultConfig())
	if _, err := w.waitStep(ctx, steps.StepDetectAnchorRotation); err != nil {
		return nil, fmt.Errorf("waiting for the operator's bootstrap: %w", err)
	}
	if err := meshsim.InstallControlPlane(ctx, kube, meshsim.ControlPlaneOptions{}); err != nil {
		return nil, err
	}
	if err := meshsim.WaitForRollouts(ctx, kube, mesh.ControlPlane()); err != nil {
		return nil, err
	}
	progress("%d pods: creating %d Deployments × %d replicas in %d namespaces", pods, r.deployments, replicas, ns)
	apps, err := meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{
		Prefix: "app", Namespaces: ns, Deployments: r.deployments, Replicas: replicas,
	})
	if err != nil {
		return nil, err
	}
	if err := waitQuiet(ctx, w, mesh, pods+3, func(s string) { progress("%d pods: %s", pods, s) }); err != nil {
		return nil, err
	}
	r.bedReady = time.Since(start)
	progress("%d pods: bed ready in %s", pods, r.bedReady.Round(time.Second))
	if op.Exited() {
		return nil, errors.New("the operator exited; see " + op.LogPath)
	}
	// "After sync": the operator reports every pod converged, both on the bundle and (having
	// probed them) on the issuer.
	progress("%d pods: waiting for the operator to report every pod converged", pods)
	if _, err := w.waitFor(ctx, func() bool {
		st := w.status
		return st.Phase == v1alpha1.PhaseSynced && convergedAll(st.TrustBundle) && convergedAll(st.WorkloadCertificates)
	}); err != nil {
		return nil, err
	}

	// Steady state: the operator synced and every pod converged; count a window of requests.
	r.rssSynced = procStatus(op.PID(), "VmRSS")
	progress("%d pods: counting the operator's requests in steady state for %s", pods, o.steady)
	before, err := op.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	reconcilesBefore, err := op.reconciles(ctx)
	if err != nil {
		return nil, err
	}
	cpu0 := procCPU(op.PID())
	window := time.Now()
	timer := time.NewTimer(o.steady)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
	}
	after, err := op.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	r.cpuSteady = procCPU(op.PID()) - cpu0
	reconcilesAfter, err := op.reconciles(ctx)
	if err != nil {
		return nil, err
	}
	r.steadyWindow = time.Since(window)
	perMinute := float64(time.Minute) / float64(r.steadyWindow)
	r.steady = after.minus(before).scaled(perMinute)
	r.steadyReconciles = reconcilesAfter.minus(reconcilesBefore).scaled(perMinute)

	probesBefore, err := op.probes(ctx)
	if err != nil {
		return nil, err
	}
	cpu1 := procCPU(op.PID())
	if o.rotate {
		if err := measureRotation(ctx, o, w, c, p, mesh, apps, op, r); err != nil {
			return nil, err
		}
	}
	final, err := op.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	r.rotation = final.minus(after)
	r.cpuRotation = procCPU(op.PID()) - cpu1
	reconcilesFinal, err := op.reconciles(ctx)
	if err != nil {
		return nil, err
	}
	probesFinal, err := op.probes(ctx)
	if err != nil {
		return nil, err
	}
	r.rotationReconciles, r.rotationProbes = reconcilesFinal.minus(reconcilesAfter), probesFinal.minus(probesBefore)
	r.cpu = procCPU(op.PID())
	r.rssPeak = procStatus(op.PID(), "VmHWM")
	if heap, err := op.get(ctx, "/debug/pprof/heap"); err == nil {
		_ = os.WriteFile(filepath.Join(o.logDir, fmt.Sprintf("operator-heap-%d.pprof", pods)), heap, 0o644)
	}
	// inspect is timed over the mesh alone: right after Synced, the last restart's old pods may
	// still be terminating, and their deletion shares the cores with the probes.
	w.mu.Lock()
	terminating, incomplete := len(w.terminating), len(w.incomplete)
	w.mu.Unlock()
	settling := time.Now()
	if _, err := w.waitFor(ctx, func() bool { return len(w.terminating) == 0 && len(w.incomplete) == 0 }); err != nil {
		return nil, err
	}
	progress("%d pods: bed settled in %s (%d meshed pods terminating, %d rollouts incomplete at first)",
		pods, time.Since(settling).Round(time.Millisecond), terminating, incomplete)
	inspectAll(ctx, o, c, op.PID(), r)
	if o.hold {
		printResult(r)
		progress("%d pods: holding the bed until interrupted; KUBECONFIG=%s, operator admin %s", pods, c.Kubeconfig(), op.adminAddr)
		<-ctx.Done()
	}
	return r, nil
}

func measureRotation(ctx context.Context, o options, w *world, c *cluster.Cluster, p *pki.PKI, mesh *meshsim.Mesh,
	apps []meshsim.Workload, op *operator, r *result) error {
	pods := r.pods
	progress("%d pods: rotating the trust anchor", pods)
	if o.cpuProfile {
		stop := profileCPU(ctx, o, op, pods)
		defer stop()
	}
	top := sampleRSS(op.PID())
	defer func() { r.rssTop = top() }()
	if err := rotate(ctx, w, c, p, mesh, apps, r); err != nil {
		return fmt.Errorf("rotation: %w (operator log: %s)", err, op.LogPath)
	}
	return nil
}

// rssSample is what one reading of /proc/<pid>/status says of the operator's resident memory:
// the total, the anonymous part (the Go heap, stacks and runtime) and the file-backed part (the
// binary's pages).
type rssSample struct{ rss, anon, file int64 }

// sampleRSS reads the operator's resident memory every second until the returned function is
// called, which returns the sample with the highest total.
func sampleRSS(pid int) (stop func() rssSample) {
	done := make(chan struct{})
	result := make(chan rssSample, 1)
	go func() {
		var top rssSample
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if f := procStatusFields(pid, "VmRSS", "RssAnon", "RssFile"); f[0] > top.rss {
				top = rssSample{f[0], f[1], f[2]}
			}
			select {
			case <-done:
				result <- top
				return
			case <-t.C:
			}
		}
	}()
	return func() rssSample {
		close(done)
		return <-result
	}
}

// cpuProfileChunk is the length of each CPU profile taken while the operator rotates.
const cpuProfileChunk = 30 * time.Second

// profileCPU takes back-to-back CPU profiles of the operator until stop is called, which waits
// for the profile under way to end: operator-cpu-<pods>-<i>.pprof in the log directory cover the
// whole rotation (`go tool pprof -top bin/bench/operator-cpu-<pods>-*.pprof` merges them).
// Between two, when the operator's RSS is the highest seen yet, it takes a heap profile,
// operator-heap-<pods>-peak.pprof: what was live near the rotation's peak RSS.
func profileCPU(ctx context.Context, o options, op *operator, pods int) (stop func()) {
	old, _ := filepath.Glob(filepath.Join(o.logDir, fmt.Sprintf("operator-cpu-%d*.pprof", pods)))
	for _, f := range old {
		_ = os.Remove(f)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var peak int64
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			prof, err := op.get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(cpuProfileChunk.Seconds())))
			if err != nil {
				return
			}
			_ = os.WriteFile(filepath.Join(o.logDir, fmt.Sprintf("operator-cpu-%d-%03d.pprof", pods, i)), prof, 0o644)
			if rss := procStatus(op.PID(), "VmRSS"); rss > peak {
				peak = rss
				if heap, err := op.get(ctx, "/debug/pprof/heap"); err == nil {
					_ = os.WriteFile(filepath.Join(o.logDir, fmt.Sprintf("operator-heap-%d-peak.pprof", pods)), heap, 0o644)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func inspectAll(ctx context.Context, o options, c *cluster.Cluster, operatorPID int, r *result) {
	pods := r.pods
	// Who else spends CPU while inspect runs: this process (the simulated mesh, whose proxies
	// answer the probes, and its oracle), the operator, and the cluster's components.
	procs := []cluster.Process{{Name: "mesh simulator", PID: os.Getpid()}, {Name: "operator", PID: operatorPID}}
	procs = append(procs, c.Processes()...)
	for _, n := range o.concurrency {
		progress("%d pods: linkerd trust inspect --concurrency %d", pods, n)
		before := make([]time.Duration, len(procs))
		for i, p := range procs {
			before[i] = procCPU(p.PID)
		}
		began := time.Now()
		cmd := exec.CommandContext(ctx, o.cliBin, "inspect", "--kubeconfig", c.Kubeconfig(), "--concurrency", strconv.Itoa(n), "--output", "json")
		out, err := cmd.CombinedOutput()
		r.inspect[n] = time.Since(began)
		if err != nil {
			r.inspectErr[n] = fmt.Sprintf("%v: %s", err, lastLine(string(out)))
		}
		var b strings.Builder
		if st := cmd.ProcessState; st != nil {
			fmt.Fprintf(&b, "CLI %.2fs", (st.UserTime() + st.SystemTime()).Seconds())
		}
		for i, p := range procs {
			if d := procCPU(p.PID) - before[i]; d >= 10*time.Millisecond {
				fmt.Fprintf(&b, ", %s %.2fs", p.Name, d.Seconds())
			}
		}
		r.inspectCPU[n] = b.String()
	}
}

func convergedAll(c *v1alpha1.ConvergenceStatus) bool {
	return c != nil && c.Status == v1alpha1.Converged
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// waitQuiet waits until every Deployment rolled out, no meshed pod terminates and all want
// proxies hold a certificate, printing progress every 15 seconds.
func waitQuiet(ctx context.Context, w *world, mesh *meshsim.Mesh, want int, say func(string)) error {
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	done := make(chan error, 1)
	go func() {
		done <- mesh.Oracle().WaitFor(ctx, func(s meshsim.OracleStatus) bool {
			return s.Pods >= want && s.PodsWithoutCertificate == 0
		})
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
			_, err = w.waitFor(ctx, func() bool { return len(w.incomplete) == 0 && len(w.terminating) == 0 })
			return err
		case <-tick.C:
			s := mesh.Oracle().Status()
			w.mu.Lock()
			say(fmt.Sprintf("%d of %d proxies up, %d without certificate, %d rollouts in progress", s.Pods, want, s.PodsWithoutCertificate, len(w.incomplete)))
			w.mu.Unlock()
		}
	}
}

// rotate performs one rotation as README's Rotate section says, acting as soon as the status
// asks for it, and records its wall time, busy time and phase transitions in r.
func rotate(ctx context.Context, w *world, c *cluster.Cluster, p *pki.PKI, mesh *meshsim.Mesh, apps []meshsim.Workload, r *result) error {
	cfg := steps.DefaultConfig()
	w.reset()
	start := time.Now()
	renew := func(ns, name string) error {
		w.mu.Lock()
		old := w.secrets[ns+"/"+name]
		w.setBusyLocked("cert-manager", true)
		w.mu.Unlock()
		if err := pki.Renew(ctx, c.CertManager(), ns, name); err != nil {
			return err
		}
		_, err := w.waitFor(ctx, func() bool { return string(w.secrets[ns+"/"+name]) != string(old) })
		w.setBusy("cert-manager", false)
		return err
	}
	restart := func() error {
		progress("  restarting %d Deployments", len(apps))
		w.setBusy("user", true)
		defer w.setBusy("user", false)
		return restartAll(ctx, mesh, apps)
	}
	wait := func(phase v1alpha1.Phase) error {
		progress("  waiting for phase %s", phase)
		_, err := w.waitPhase(ctx, phase)
		return err
	}

	if err := renew(cfg.CertManagerNamespace, cfg.AnchorSecret); err != nil {
		return err
	}
	if err := wait(v1alpha1.PhasePropagatingTrustRoots); err != nil {
		return err
	}
	if err := restart(); err != nil {
		return err
	}
	if err := wait(v1alpha1.PhaseWaitingForIdentityRotation); err != nil {
		return err
	}
	if err := renew(cfg.LinkerdNamespace, cfg.IssuerSecret); err != nil {
		return err
	}
	// As the guide's user (and the end-to-end test) does: restart the workloads once the
	// control plane presents certificates from the new issuer; workloads restarted earlier may
	// get theirs from the identity pod still running on the old issuer.
	progress("  waiting for step %s and the control plane on the new issuer", steps.StepRenewWorkloadCertificates)
	if _, err := w.waitFor(ctx, func() bool {
		wc := w.status.WorkloadCertificates
		return w.step == steps.StepRenewWorkloadCertificates && wc != nil && wc.ConvergedPods >= 3
	}); err != nil {
		return err
	}
	if err := restart(); err != nil {
		return err
	}
	if err := wait(v1alpha1.PhaseRemovingOldTrustRoots); err != nil {
		return err
	}
	if err := restart(); err != nil {
		return err
	}
	if err := wait(v1alpha1.PhaseSynced); err != nil {
		return err
	}
	r.wall = time.Since(start)
	r.busy = w.busyFor()
	r.latencies = w.takeTransitions()
	r.gaps = w.takeGaps()
	_ = p
	return nil
}

// restartAll restarts every workload as `kubectl rollout restart` does, 20 at a time, without
// waiting for the rollouts (the world tracks them).
func restartAll(ctx context.Context, mesh *meshsim.Mesh, apps []meshsim.Workload) error {
	work := make(chan meshsim.Workload)
	errs := make(chan error, len(apps))
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				if err := mesh.RolloutRestart(ctx, a); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, a := range apps {
		work <- a
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	// Nearest rank: with few samples p99 is the maximum.
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func latencies(ts []transition) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.latency
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func printResult(r *result) {
	fmt.Printf("\n== %d meshed pods in %d namespaces (%d Deployments; + 3 control-plane pods); bed ready in %s\n",
		r.pods, r.namespaces, r.deployments, r.bedReady.Round(time.Second))
	if r.wall == 0 {
		fmt.Println("  no rotation (--rotate=false)")
	}
	for _, t := range r.latencies {
		fmt.Printf("  %-28s -> %-28s reaction %s\n", t.from, t.to, ms(t.latency))
	}
	if r.wall > 0 {
		ls := latencies(r.latencies)
		fmt.Printf("  reaction latency p50/p99/max: %s / %s / %s (%d phase changes)\n", ms(percentile(ls, .5)), ms(percentile(ls, .99)), ms(percentile(ls, 1)), len(ls))
		added := r.wall - r.busy
		fmt.Printf("  rotation wall %s, world busy %s, operator-added %s (%.2f %%)\n", r.wall.Round(time.Millisecond), r.busy.Round(time.Millisecond),
			added.Round(time.Millisecond), 100*float64(added)/float64(r.wall))
		gaps := append([]gap(nil), r.gaps...)
		sort.Slice(gaps, func(i, j int) bool { return gaps[i].d > gaps[j].d })
		for _, g := range gaps[:min(len(gaps), 5)] {
			fmt.Printf("    operator time: %s at step %s, until %s\n", ms(g.d), g.step, g.until)
		}
	}
	fmt.Printf("  operator RSS after sync %s, peak (VmHWM) %s; CPU %.1fs total, %.2fs per steady minute, %.1fs during the rotation\n",
		mib(r.rssSynced), mib(r.rssPeak), r.cpu.Seconds(), r.cpuSteady.Seconds()*float64(time.Minute)/float64(r.steadyWindow), r.cpuRotation.Seconds())
	if r.rssTop.rss > 0 {
		fmt.Printf("  operator RSS at its highest one-second sample of the rotation: %s (anonymous %s, file-backed %s)\n",
			mib(r.rssTop.rss), mib(r.rssTop.anon), mib(r.rssTop.file))
	}
	fmt.Printf("  apiserver requests per minute, steady state (%s window): %s\n", r.steadyWindow.Round(time.Second), r.steady)
	fmt.Printf("  operator in steady state: %.2f ms of CPU per second, reconciles per minute %s\n",
		float64(r.cpuSteady.Microseconds())/1000/r.steadyWindow.Seconds(), r.steadyReconciles)
	fmt.Printf("  apiserver requests during the rotation: %s\n", r.rotation)
	fmt.Printf("  during the rotation: reconciles %s; certificate probes %s\n", r.rotationReconciles, r.rotationProbes)
	for _, n := range sortedKeys(r.inspect) {
		fmt.Printf("  linkerd trust inspect --concurrency %-4d %s%s; CPU: %s\n", n, r.inspect[n].Round(10*time.Millisecond), errNote(r.inspectErr[n]), r.inspectCPU[n])
	}
}

func errNote(s string) string {
	if s == "" {
		return ""
	}
	return " (failed: " + s + ")"
}

func sortedKeys(m map[int]time.Duration) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

// rotationRows are the table rows that exist only with a rotation.
var rotationRows = map[string]bool{
	"reaction latency p50 / p99 / max": true, "rotation wall time": true, "operator-added time (share)": true,
}

// printTable prints the figures of every size as one Markdown table (docs/performance.md).
func printTable(rs []*result) {
	fmt.Println()
	head := "| figure | target |"
	sep := "|---|---|"
	for _, r := range rs {
		head += fmt.Sprintf(" %d pods / %d ns |", r.pods, r.namespaces)
		sep += "---|"
	}
	fmt.Println(head)
	fmt.Println(sep)
	row := func(name, target string, f func(r *result) string) {
		line := "| " + name + " | " + target + " |"
		for _, r := range rs {
			if r.wall == 0 && rotationRows[name] {
				line += " not measured |"
				continue
			}
			line += " " + f(r) + " |"
		}
		fmt.Println(line)
	}
	row("reaction latency p50 / p99 / max", "p99 ≤ 1 s", func(r *result) string {
		ls := latencies(r.latencies)
		return fmt.Sprintf("%s / %s / %s", ms(percentile(ls, .5)), ms(percentile(ls, .99)), ms(percentile(ls, 1)))
	})
	row("rotation wall time", "", func(r *result) string { return r.wall.Round(100 * time.Millisecond).String() })
	row("operator-added time (share)", "< 1 %", func(r *result) string {
		added := r.wall - r.busy
		return fmt.Sprintf("%s (%.2f %%)", added.Round(10*time.Millisecond), 100*float64(added)/float64(r.wall))
	})
	row("operator peak RSS (VmHWM)", "≤ 48 MiB at 10k", func(r *result) string { return mib(r.rssPeak) })
	row("operator CPU: steady per minute / rotation / total", "rotation ≤ 70 s at 10k", func(r *result) string {
		return fmt.Sprintf("%.2fs / %.1fs / %.1fs", r.cpuSteady.Seconds()*float64(time.Minute)/float64(r.steadyWindow), r.cpuRotation.Seconds(), r.cpu.Seconds())
	})
	row("operator CPU per second, steady state", "≤ 5 ms", func(r *result) string {
		return fmt.Sprintf("%.2f ms", float64(r.cpuSteady.Microseconds())/1000/r.steadyWindow.Seconds())
	})
	row("reconciles per minute, steady state", "0 without a change", func(r *result) string { return r.steadyReconciles.String() })
	row("LIST per minute, steady state", "0", func(r *result) string { return trimFloat(r.steady.verb("list")) })
	row("requests per minute, steady state", "", func(r *result) string { return r.steady.String() })
	row("requests during the rotation", "", func(r *result) string { return r.rotation.String() })
	for _, n := range sortedKeys(rs[0].inspect) {
		target := ""
		if n == 50 {
			target = "≤ 5 s at 10k"
		}
		row(fmt.Sprintf("`linkerd trust inspect --concurrency %d`", n), target, func(r *result) string {
			return r.inspect[n].Round(10*time.Millisecond).String() + errNote(r.inspectErr[n])
		})
	}
}
