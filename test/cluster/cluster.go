// Package cluster runs a real, local Kubernetes cluster for tests and for the hands-on test bed:
// etcd, kube-apiserver (RBAC on), kube-controller-manager, kube-scheduler, kwok playing the
// kubelet of fake nodes whose pods get loopback IPs, the cert-manager controller with its CRDs,
// and (Options.Registry) an OCI registry. Everything is a real binary (see scripts/tools.sh)
// started as a child process; readiness is observed, never assumed; Stop kills exactly the
// processes Start started, by PID.
//
// Nothing runs inside the pods: there is no container runtime. A pod's IP is an address in
// 127.0.0.0/8, so a process on this machine (the mesh simulator) can serve "in" a pod by
// listening on the pod's IP.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// serviceCIDR is the Service IP range; nothing routes to it (there is no kube-proxy), but the
// apiserver needs one and its first address is in the serving certificate.
const serviceCIDR = "10.0.0.0/24"

var serviceIP = net.IPv4(10, 0, 0, 1)

// Cluster is a running local cluster. All methods are safe for concurrent use.
type Cluster struct {
	opts        Options
	binDir      string
	workDir     string
	ownWorkDir  bool     // remove workDir on Stop
	workDirLock *os.File // held while the cluster lives; see createWorkDir
	logDir      string
	creds       *credentials
	podNet      *podNet
	advertise   net.IP
	etcdPorts   [2]int // client, peer
	apiPort     int
	kubeletPort int    // kwok's kubelet server, on every fake node
	server      string // https://127.0.0.1:<apiPort>
	kubeconfig  string // admin kubeconfig
	registry    string // host:port of the OCI registry, when Options.Registry

	restConfig  *rest.Config
	kube        kubernetes.Interface
	certManager cmclient.Interface

	mu    sync.Mutex
	procs []*process

	stopOnce sync.Once
	stopErr  error
	halted   bool // Stop has begun: no component starts again (guarded by mu)
}

// Start starts a cluster and returns once it is ready: the apiserver answers /readyz, the
// controller-manager and scheduler hold their leader leases, the default ServiceAccount exists,
// every fake node is Ready and (unless disabled) cert-manager has reconciled an Issuer. On error
// everything started so far is stopped again and the error carries the tail of the component
// logs.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	c := &Cluster{opts: opts}
	defer func() {
		if err != nil {
			err = fmt.Errorf("starting the test cluster: %w\n%s", err, c.LogTail(20))
			if stopErr := c.Stop(); stopErr != nil {
				klog.ErrorS(stopErr, "Stopping the half-started cluster")
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()

	if err := c.prepare(ctx); err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := c.startControllers(ctx); err != nil {
		return nil, err
	}
	if err := c.createNamespace(ctx, CertManagerNamespace); err != nil {
		return nil, err
	}
	if !opts.WithoutCertManager {
		if err := c.installCertManager(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.createNodes(ctx); err != nil {
		return nil, err
	}
	if opts.Registry {
		if err := c.startRegistry(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if !opts.WithoutCertManager {
		if err := c.createCertManagerStandIn(ctx); err != nil {
			return nil, err
		}
	}
	klog.InfoS("Test cluster ready", "server", c.server, "kubeconfig", c.kubeconfig,
		"podCIDR", c.podNet.cidr, "elapsed", time.Since(began).Round(time.Millisecond))
	return c, nil
}

// prepare chooses ports and a pod network, and writes credentials, kubeconfigs and configs.
func (c *Cluster) prepare(ctx context.Context) error {
	var err error
	c.binDir = c.opts.BinDir
	if c.binDir == "" {
		if c.binDir, err = BinDir(ctx); err != nil {
			return err
		}
	}
	c.workDir = c.opts.WorkDir
	if c.workDir == "" {
		if c.workDir, c.workDirLock, err = createWorkDir(); err != nil {
			return err
		}
		c.ownWorkDir = true
	}
	// Every Start is a new cluster: stale data from an earlier run in a kept work dir must go.
	for _, d := range []string{"etcd", "credentials", "kubeconfigs", "config", "audit"} {
		if err := os.RemoveAll(filepath.Join(c.workDir, d)); err != nil {
			return fmt.Errorf("cleaning the work directory: %w", err)
		}
	}
	c.logDir = c.opts.LogDir
	if c.logDir == "" {
		c.logDir = filepath.Join(c.workDir, "logs")
	}
	for _, d := range []string{c.logDir, filepath.Join(c.workDir, "kubeconfigs"), filepath.Join(c.workDir, "config")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}

	if c.opts.PodCIDR != "" {
		_, cidr, _ := net.ParseCIDR(c.opts.PodCIDR)
		c.podNet = &podNet{cidr: cidr}
	} else if c.podNet, err = reservePodNet(); err != nil {
		return err
	}

	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	c.etcdPorts = [2]int{ports[0], ports[1]}
	c.apiPort, c.kubeletPort = ports[2], ports[3]
	c.server = "https://127.0.0.1:" + strconv.Itoa(c.apiPort)
	c.advertise = advertiseAddress()

	if c.creds, err = newCredentials(filepath.Join(c.workDir, "credentials"), c.advertise, serviceIP, c.opts.Users); err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(c.workDir, "kubeconfigs", "admin.kubeconfig")
	if err := c.creds.writeKubeconfig(c.kubeconfig, c.server, AdminUser, "", nil); err != nil {
		return err
	}
	if c.restConfig, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return fmt.Errorf("loading the admin kubeconfig: %w", err)
	}
	// Tests create hundreds of objects at once; the client-go default (5 QPS) would throttle them.
	c.restConfig.QPS, c.restConfig.Burst = 200, 400
	if c.kube, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	if c.certManager, err = cmclient.NewForConfig(c.restConfig); err != nil {
		return fmt.Errorf("creating the cert-manager client: %w", err)
	}
	return nil
}

// start launches a component binary and remembers it for Stop.
func (c *Cluster) start(name string, args ...string) error {
	p, err := startProcess(name, filepath.Join(c.binDir, name), args, filepath.Join(c.logDir, name+".log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// exitedComponent returns an error if any component has exited; readiness waits check it so a
// crashed component fails the start at once instead of at the timeout.
func (c *Cluster) exitedComponent() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// componentKubeconfig writes a kubeconfig for a component's static identity.
func (c *Cluster) componentKubeconfig(user string) (string, error) {
	path := filepath.Join(c.workDir, "kubeconfigs", strings.NewReplacer(":", "-").Replace(user)+".kubeconfig")
	return path, c.creds.writeKubeconfig(path, c.server, user, "", nil)
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	client := "http://127.0.0.1:" + strconv.Itoa(c.etcdPorts[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(c.etcdPorts[1])
	err := c.start("etcd",
		"--name=etcd",
		"--data-dir="+filepath.Join(c.workDir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=etcd="+peer,
		"--initial-cluster-state=new",
		// A test cluster's data is disposable; skipping fsync makes it several times faster.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	return c.waitEtcd(ctx, client)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	cr := c.creds
	audit, err := c.auditArgs()
	if err != nil {
		return err
	}
	err = c.start("kube-apiserver", append([]string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(c.etcdPorts[0]),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.apiPort),
		// The built-in `kubernetes` Service endpoint; the apiserver refuses loopback here.
		"--advertise-address=" + c.advertise.String(),
		"--tls-cert-file=" + cr.certFile,
		"--tls-private-key-file=" + cr.keyFile,
		"--token-auth-file=" + cr.tokensFile,
		"--authorization-mode=Node,RBAC",
		// kwok's nodes report their name as Hostname, which resolves nowhere; their InternalIP
		// is where kwok's kubelet server listens (exec, logs, port-forward).
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cr.saPubFile,
		"--service-account-signing-key-file=" + cr.saKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}, audit...)...)
	if err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

// startControllers starts kube-controller-manager, kube-scheduler and kwok. cert-manager is
// started later by installCertManager, because it needs its CRDs first.
func (c *Cluster) startControllers(ctx context.Context) error {
	kcm, err := c.componentKubeconfig("system:kube-controller-manager")
	if err != nil {
		return err
	}
	err = c.start("kube-controller-manager",
		"--kubeconfig="+kcm,
		// No serving port: readiness is observed through the leader Lease, and two clusters
		// then need no extra ports.
		"--secure-port=0",
		// Each controller acts as its own ServiceAccount, so RBAC applies to controllers the way
		// it does on a real cluster.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.creds.saKeyFile,
		"--root-ca-file="+c.creds.caFile,
		"--service-cluster-ip-range="+serviceCIDR,
		"--cluster-name=trust-rotation",
		fmt.Sprintf("--kube-api-qps=%g", c.opts.ControllerQPS),
		"--kube-api-burst="+strconv.Itoa(c.opts.ControllerBurst),
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--v=1",
	)
	if err != nil {
		return err
	}

	sched, err := c.componentKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	// The scheduler's QPS flags are deprecated; its configuration file is the supported way.
	schedConfig := filepath.Join(c.workDir, "config", "kube-scheduler.yaml")
	err = os.WriteFile(schedConfig, fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %g
  burst: %d
leaderElection:
  leaderElect: true
`, sched, 2*c.opts.ControllerQPS, 2*c.opts.ControllerBurst), 0o644)
	if err != nil {
		return fmt.Errorf("writing the scheduler configuration: %w", err)
	}
	if err := c.start("kube-scheduler", "--config="+schedConfig, "--secure-port=0", "--v=1"); err != nil {
		return err
	}

	kwok, err := c.componentKubeconfig("trust-rotation:kwok")
	if err != nil {
		return err
	}
	stages, err := filepath.Glob(filepath.Join(c.binDir, "kwok-stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stages in %s (kwok refuses to start without them)", filepath.Join(c.binDir, "kwok-stages"))
	}
	if stages, err = kwokStages(stages, filepath.Join(c.workDir, "config", "kwok-stages")); err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kwok,
		"--manage-nodes-with-annotation-selector=" + NodeAnnotation + "=fake",
		"--cidr=" + c.podNet.cidr.String(),
		"--node-ip=" + c.podNet.nodeIP().String(),
		// Heartbeat every fake node through its Lease in kube-node-lease, as a kubelet does.
		// Without leases the controller-manager sees no heartbeat within its grace period (50s)
		// once the node-status stage's long interval runs out, marks the nodes NotReady and
		// their pods not Ready, and rollouts stall for good: at a few hundred pods restarted at
		// once under load, a rollout restart then never completes.
		"--node-lease-duration-seconds=40",
	}
	if c.opts.PortForward {
		// kwok's kubelet server, which the apiserver reaches at each node's InternalIP: a pod's
		// port-forward goes where a PortForward object (ForwardPort) says, as a kubelet's goes
		// into the pod's network namespace.
		args = append(args, "--node-port="+strconv.Itoa(c.kubeletPort), "--enable-crds=PortForward")
		if err := c.applyCRDs(ctx, filepath.Join(c.binDir, "kwok-crds")); err != nil {
			return err
		}
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	return c.start("kwok", args...)
}

// CertManagerNamespace is where the cert-manager controller keeps ClusterIssuer Secrets.
const CertManagerNamespace = "cert-manager"

func (c *Cluster) installCertManager(ctx context.Context) error {
	if err := c.applyCRDs(ctx, filepath.Join(c.binDir, "cert-manager-crds")); err != nil {
		return err
	}
	kc, err := c.componentKubeconfig("trust-rotation:cert-manager")
	if err != nil {
		return err
	}
	return c.start("cert-manager-controller",
		"--kubeconfig="+kc,
		"--cluster-resource-namespace="+CertManagerNamespace,
		"--v=2",
	)
}

// Stop stops every component this cluster started — SIGTERM by PID, SIGKILL after
// Options.StopGrace — waits until each has exited, releases the pod network and removes the
// temporary work directory. Controllers stop first, then the apiserver, then etcd, so no
// component logs a storm of errors about a vanished dependency. Stop is idempotent.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.halted = true
		procs := append([]*process(nil), c.procs...)
		c.mu.Unlock()

		var errs []error
		var mu sync.Mutex
		stopAll := func(ps []*process) {
			var wg sync.WaitGroup
			for _, p := range ps {
				wg.Go(func() {
					if err := p.stop(c.opts.StopGrace); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		var controllers, apiserver, etcd []*process
		for _, p := range procs {
			switch p.name {
			case "etcd":
				etcd = append(etcd, p)
			case "kube-apiserver":
				apiserver = append(apiserver, p)
			default:
				controllers = append(controllers, p)
			}
		}
		stopAll(controllers)
		stopAll(apiserver)
		stopAll(etcd)

		c.podNet.release()
		if c.ownWorkDir {
			if err := os.RemoveAll(c.workDir); err != nil {
				errs = append(errs, fmt.Errorf("removing the work directory: %w", err))
			}
			c.workDirLock.Close()
		}
		c.stopErr = errors.Join(errs...)
		klog.V(1).InfoS("Test cluster stopped", "server", c.server)
	})
	return c.stopErr
}
