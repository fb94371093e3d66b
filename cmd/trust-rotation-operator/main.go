// Command trust-rotation-operator rotates a Linkerd mesh's trust anchor end to end on top of
// cert-manager. It runs as a leader-elected Deployment (or out of cluster with --kubeconfig);
// only the leader reconciles and writes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/cmd/internal/version"
	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/workflow/client"
)

type options struct {
	kubeconfig, kubeContext string
	adminAddr               string
	app                     app.Options
	leaderElect             bool
	leaseNamespace          string
	leaseName               string
	identity                string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	qps                     float32
	burst                   int
	// http2 lets the clients negotiate HTTP/2 with the apiserver (useHTTP1).
	http2 bool
	// podWatchReadInterval paces the reads of the pod watch's connection (kube.ReadCoalescer).
	podWatchReadInterval time.Duration
	// pprof serves /debug/pprof/ on the admin endpoint, for profiling at scale.
	pprof bool
	// countAPIRequests counts the operator's apiserver requests by verb and resource in
	// /metrics; the benchmark uses it (hidden: not part of the operator's interface).
	countAPIRequests bool
}

func main() {
	// The end-to-end tests' fault hook comes from the environment, never from a flag, and only
	// in a binary built for them (-tags crashpoints).
	o := options{app: app.Options{Config: steps.DefaultConfig(), CrashAt: crashAt()}}
	fs := pflag.NewFlagSet("trust-rotation-operator", pflag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "trust-rotation-operator rotates Linkerd's trust anchor on top of cert-manager.\n\nUsage:\n  trust-rotation-operator [flags]\n\nFlags:\n%s", fs.FlagUsages())
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig; in-cluster configuration when empty")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.adminAddr, "admin-addr", ":9990", "address of the admin endpoint: /metrics, /healthz, /readyz")
	fs.StringVar(&o.app.RotationName, "rotation-name", steps.DefaultRotationName, "name of the TrustAnchorRotation to drive")
	fs.IntVar(&o.app.ProbeConcurrency, "probe-concurrency", 50, "live-certificate probes to run at once")
	fs.DurationVar(&o.app.ProbeTimeout, "probe-timeout", 5*time.Second, "timeout of one live-certificate probe")
	fs.DurationVar(&o.app.IssuerReloadTolerance, "issuer-reload-tolerance", steps.DefaultIssuerReloadTolerance, "how long after the identity issuer Secret changed linkerd-identity may still sign workload certificates with the issuer before (the kubelet's refresh of its volume); a certificate issued later by another issuer sets condition IdentityIssuerStale")
	fs.DurationVar(&o.app.MaxPollInterval, "max-poll-interval", 0, "when positive, the longest the operator goes without observing the cluster, a safety net; 0 observes only on a change and at the moments decisions depend on (a maintenance window opening, a threshold falling due)")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader on a Lease so that only one replica writes")
	fs.StringVar(&o.leaseNamespace, "leader-election-namespace", "", "namespace of the leader Lease; the pod's namespace (or linkerd) when empty")
	fs.StringVar(&o.leaseName, "leader-election-name", "trust-rotation-operator", "name of the leader Lease")
	fs.StringVar(&o.identity, "leader-election-identity", "", "this replica's identity in the Lease; hostname_pid when empty")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a lease lasts without renewal")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up leadership")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "interval between attempts to acquire or renew the lease")
	fs.Float32Var(&o.qps, "kube-api-qps", 50, "client-side QPS limit towards the apiserver")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "client-side burst limit towards the apiserver")
	fs.BoolVar(&o.http2, "kube-api-http2", false, "speak HTTP/2 to the apiserver, all requests and watches over one connection; by default each watch has an HTTP/1.1 connection of its own, which reads a burst of watch events with about half the CPU")
	fs.DurationVar(&o.podWatchReadInterval, "pod-watch-read-interval", 250*time.Millisecond, "once the pods are listed, the pod watch's connection reads what arrived at most this often: while pods roll, their events are read a batch at a time instead of waking the operator for each, and a pod event reaches it this much later at most (0: read each event as it arrives; not with --kube-api-http2, whose one connection carries every request)")
	fs.StringSliceVar(&o.app.RestartNamespaces, "restart-namespaces", nil, "automatic restarts (spec.dataPlaneRestart.policy Automatic) watch and restart the workloads of these namespaces only, for RBAC that allows them there alone (the chart's dataPlaneRestart.rbacScope Namespaces); the others a rotation needs restarted are named for you to restart. Empty: every namespace, watched cluster-wide")
	fs.StringVar(&o.app.MulticlusterNamespace, "multicluster-namespace", app.DefaultMulticlusterNamespace, "namespace of Linkerd multicluster's Links and their credentials Secrets, and of spec.remoteClusters' kubeconfig Secrets: the operator holds a rotation until every linked cluster is ready for its next step (empty: no linked clusters)")
	fs.DurationVar(&o.app.RemoteStaleAfter, "remote-stale-after", steps.DefaultRemoteStaleAfter, "how old the last read of a linked cluster's TrustAnchorRotation may be before the rotation stops trusting it")
	fs.DurationVar(&o.app.RemoteWatchTimeout, "remote-watch-timeout", time.Minute, "how long one watch of a linked cluster's TrustAnchorRotation lasts before it is renewed (each renewal reads it again)")
	fs.BoolVar(&o.pprof, "pprof", false, "serve Go's profiles at /debug/pprof/ on the admin endpoint")
	fs.BoolVar(&o.countAPIRequests, "count-api-requests", false, "count apiserver requests by verb and resource in /metrics (for benchmarks)")
	_ = fs.MarkHidden("count-api-requests")
	printVersion := fs.Bool("version", false, "print the version and exit")
	o.app.Config.AddFlags(fs)
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	klogFlags.Lookup("v").Usage = fmt.Sprintf("log verbosity: 0 phase changes and acts, 2 every step passed, 4 debugging detail, 6 and 7 every apiserver request (7: with its headers); at most %d, higher values are lowered to %d: from 8 on client-go logs the bodies of requests and responses, and a Secret's body holds its private key", maxVerbosity, maxVerbosity)
	klogFlags.Lookup("vmodule").Usage = fmt.Sprintf("comma-separated pattern=N settings for file-filtered logging; an N above %d is lowered to %d, as for --v", maxVerbosity, maxVerbosity)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])
	if *printVersion {
		fmt.Println("trust-rotation-operator version: " + version.String())
		return
	}
	capped, err := capVerbosity(klogFlags)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The heap is mostly the cache of meshed pods, held for good and touched rarely: under Go's
	// default GOGC=100 it peaks at twice that. 50 keeps it at 1.5 times, for a little more GC
	// CPU in an operator that idles between events. GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	// One P: the operator's work is a chain of hand-offs (HTTP/2 read loop, watch decoder,
	// reflector, handlers, probe workers), each too short to be worth waking a second thread
	// for, and Go never picks fewer than two Ps on its own (the chart's CPU limit is 500m).
	// GOMAXPROCS in the environment wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())
	if capped != "" {
		klog.FromContext(ctx).Info("Lowered the log verbosity: client-go logs request and response bodies from 8 on, and a Secret's body holds its private key",
			"requested", capped, "max", maxVerbosity)
	}
	if err := run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "Operator failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	log := klog.FromContext(ctx)
	cfg, ns, err := restConfig(o.kubeconfig, o.kubeContext)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	if !o.http2 {
		useHTTP1(cfg)
	}
	cfg.UserAgent = "trust-rotation-operator/" + version.String()
	log.Info("Starting trust-rotation-operator", "version", version.String())
	metrics := app.NewMetrics()
	if o.countAPIRequests {
		metrics.CountAPIRequests(cfg)
	}
	clients, err := kube.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if !o.http2 && o.podWatchReadInterval > 0 {
		if o.app.Pods, o.app.PodsSynced, err = pacedPodClient(cfg, o.podWatchReadInterval); err != nil {
			return err
		}
	}
	tars, err := client.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The cert-manager client renews the identity issuer (spec.identityIssuerRenewal).
	o.app.CertManager = clients
	if o.app.MulticlusterNamespace != "" {
		// Links are found through their API's discovery and read as unstructured objects.
		if o.app.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
			return err
		}
		o.app.Discovery = clients
	}
	ctrl, err := app.New(clients, tars, metrics, o.app)
	if err != nil {
		return err
	}

	// The watchdog fails /healthz when the leader stops renewing its lease, so a wedged leader
	// gets restarted by its liveness probe.
	var election *kube.Election
	healthy := func() error {
		if election == nil {
			return nil
		}
		return election.Check(5 * time.Second)
	}
	srv, err := serveAdmin(ctx, o.adminAddr, metrics, healthy, o.pprof)
	if err != nil {
		return err
	}
	defer srv.Close()

	if !o.leaderElect {
		return ctrl.Run(ctx)
	}
	if o.leaseNamespace == "" {
		o.leaseNamespace = ns
	}
	if o.identity == "" {
		host, _ := os.Hostname()
		o.identity = fmt.Sprintf("%s_%d", host, os.Getpid())
	}
	lost := make(chan struct{})
	runErr := make(chan error, 1)
	// electCtx ends the election when the controller fails, releasing the lease at once.
	electCtx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	e := &kube.Election{
		Leases:          clients.CoordinationV1().Leases(o.leaseNamespace),
		Name:            o.leaseName,
		Identity:        o.identity,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retryPeriod,
		ReleaseOnCancel: true,
		OnStartedLeading: func(ctx context.Context) {
			log.Info("Became leader", "lease", o.leaseNamespace+"/"+o.leaseName, "identity", o.identity)
			if err := ctrl.Run(ctx); err != nil {
				runErr <- err
				stopElection()
			}
		},
		OnStoppedLeading: func() { close(lost) },
		OnNewLeader: func(id string) {
			if id != o.identity {
				log.Info("Following leader", "leader", id)
			}
		},
	}
	if err := e.Validate(); err != nil {
		return err
	}
	election = e
	e.Run(electCtx)
	select {
	case err := <-runErr:
		return err
	default:
	}
	if ctx.Err() != nil {
		return nil // asked to stop: the lease was released
	}
	select {
	case <-lost:
		// Never work after losing the lease: exit, and let the Deployment restart us as a follower.
		return errors.New("leader lease lost")
	default:
		return nil
	}
}

// useHTTP1 makes cfg's clients speak HTTP/1.1 to the apiserver. The operator's cost is watch
// events (every pod of a rotation is created, scheduled, started, readied, deleted), and over
// HTTP/2 each event is a hand-off from the connection's read loop to the watch's decoder, and a
// WINDOW_UPDATE written back for every 4 KiB read (golang.org/x/net/http2's inflowMinRefresh: about
// one per pod event). Over a 10,000-pod rotation HTTP/2's read loop was 14 % of the operator's
// CPU, the socket reads included, and the WINDOW_UPDATEs 3 %. Over HTTP/1.1 the decoder reads
// its own connection: half the CPU per event of a burst (BenchmarkPodWatch in steps/observe).
//
// HTTP/2's health check (client-go pings a connection silent for 30 s and drops it after 15 s
// more) has no HTTP/1.1 counterpart, so TCP keepalives take its place: a watch of an apiserver
// that vanished without closing its connection ends after about a minute (30 s idle, then 3
// unanswered probes 10 s apart), and the informer watches again.
func useHTTP1(cfg *rest.Config) {
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	cfg.Dial = (&net.Dialer{
		Timeout:         30 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 10 * time.Second, Count: 3},
	}).DialContext
}

// pacedPodClient returns a client for the pod informer alone whose connections read at most
// every interval once started (kube.ReadCoalescer), and the function that starts them. With
// HTTP/1.1 a watch has its connection to itself, so only the pod events wait.
func pacedPodClient(cfg *rest.Config, interval time.Duration) (kube.Interface, func(), error) {
	rc := &kube.ReadCoalescer{Every: interval}
	pc := rest.CopyConfig(cfg)
	pc.Dial = rc.Dial(cfg.Dial)
	c, err := kube.NewForConfig(pc)
	return c, rc.Start, err
}

// restConfig loads a kubeconfig, or the in-cluster config, and the namespace to default to.
func restConfig(kubeconfig, kubeContext string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" || ns == metav1.NamespaceDefault {
		ns = steps.DefaultLinkerdNamespace
	}
	if pod := os.Getenv("POD_NAMESPACE"); pod != "" {
		ns = pod
	}
	return cfg, ns, nil
}

// serveAdmin serves /metrics, /readyz, and /healthz, which fails while healthy does.
func serveAdmin(ctx context.Context, addr string, m *app.Metrics, healthy func() error, profiling bool) (*http.Server, error) {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin endpoint %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = srv.Serve(ln) }()
	klog.FromContext(ctx).Info("Admin endpoint listening", "addr", ln.Addr().String())
	return srv, nil
}

// maxVerbosity is the highest log verbosity the operator runs at. From 8 on, client-go logs the
// body of every request and response (k8s.io/client-go/rest logBody; 8 truncates it to 1 KiB,
// 9 to 10 KiB, 10 logs it whole), whatever the logger: the operator reads Secrets by name, and
// the response to that read carries the Secret's private key before the informer's transform
// drops it. 6 and 7 log the requests' URLs, status and headers (the Authorization header masked),
// never a body.
const maxVerbosity = 7

// capVerbosity lowers --v and every --vmodule level above maxVerbosity to it, and says what was
// requested when it lowered anything.
func capVerbosity(klogFlags *flag.FlagSet) (requested string, err error) {
	var lowered []string
	v := klogFlags.Lookup("v")
	if n, err := strconv.Atoi(v.Value.String()); err == nil && n > maxVerbosity {
		lowered = append(lowered, "--v="+v.Value.String())
		if err := klogFlags.Set("v", strconv.Itoa(maxVerbosity)); err != nil {
			return "", err
		}
	}
	vm := klogFlags.Lookup("vmodule")
	if spec := vm.Value.String(); spec != "" {
		parts := strings.Split(spec, ",")
		changed := false
		for i, p := range parts {
			pattern, level, ok := strings.Cut(p, "=")
			if n, err := strconv.Atoi(level); ok && err == nil && n > maxVerbosity {
				parts[i], changed = pattern+"="+strconv.Itoa(maxVerbosity), true
			}
		}
		if changed {
			lowered = append(lowered, "--vmodule="+spec)
			if err := klogFlags.Set("vmodule", strings.Join(parts, ",")); err != nil {
				return "", fmt.Errorf("--vmodule=%s: %w", spec, err)
			}
		}
	}
	return strings.Join(lowered, " "), nil
}
