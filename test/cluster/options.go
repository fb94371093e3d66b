package cluster

import (
	"fmt"
	"net"
	"time"
)

// Options configure a cluster. The zero value is a usable default: a temporary work directory,
// two fake nodes, a pod network of its own on loopback, raised controller QPS, and cert-manager.
type Options struct {
	// WorkDir holds the cluster's data, credentials, kubeconfigs and (unless LogDir is set) logs.
	// Empty means a fresh temporary directory, removed by Stop. A given directory is kept, but
	// the etcd data inside it is always fresh: every Start is a new cluster.
	WorkDir string

	// LogDir receives one log file per component (etcd.log, kube-apiserver.log, …). Empty means
	// WorkDir/logs. Set it to keep the logs after Stop for debugging.
	LogDir string

	// Nodes is the number of fake kwok nodes (default 2). Each allows NodePods pods.
	Nodes int
	// NodePods is the allocatable pod count of each fake node (default 1100, so that thousands
	// of pods fit on the default two nodes).
	NodePods int

	// PodCIDR is the network kwok assigns pod IPs from. It must lie in 127.0.0.0/8, so that a
	// process on this machine can listen on a pod's IP (Linux routes all of 127/8 to lo). Empty
	// means 127.<n>.0.0/16 with an n that no other cluster on this machine holds at the moment.
	PodCIDR string

	// ControllerQPS and ControllerBurst are the client rate limits of kube-controller-manager;
	// the scheduler gets twice as much. Upstream's defaults (20/30) make bulk pod creation crawl,
	// so the defaults here are 200/400.
	ControllerQPS   float32
	ControllerBurst int

	// PortForward runs kwok's kubelet server on the fake nodes, so that the apiserver's
	// port-forward to a pod goes where ForwardPort says. Off by default: a test that serves the
	// nodes' kubelet endpoint itself (the hook pods' logs, test/charts) needs the port.
	PortForward bool

	// WithoutCertManager skips the cert-manager CRDs and controller for tests that do not need
	// them; the cert-manager namespace is still created.
	WithoutCertManager bool

	// Registry starts an OCI registry on the loopback beside the cluster (see Cluster.Registry):
	// tests push the operator image and the charts there, and install from it.
	Registry bool

	// Users are extra static-token identities (see TokenRESTConfig). Every cluster also has
	// AdminUser and UnprivilegedUser.
	Users []User

	// AuditPolicy, when set, is an audit policy (audit.k8s.io/v1 Policy, YAML) the apiserver
	// applies, writing the events it selects to AuditLog (see AuditEvents): the apiserver's own
	// record of what a client requested. Empty means no audit log.
	AuditPolicy string

	// BinDir is the directory of component binaries; empty means BinDir(ctx) (the
	// TRUST_ROTATION_TOOLS_BIN environment variable or scripts/tools.sh bin-dir).
	BinDir string

	// ReadyTimeout bounds the whole start-up (default 3 minutes).
	ReadyTimeout time.Duration

	// StopGrace is how long Stop waits after SIGTERM before it sends SIGKILL (default 10s).
	StopGrace time.Duration
}

// User is a static-token identity of the apiserver.
type User struct {
	Name   string
	Groups []string
}

const (
	// AdminUser is in system:masters; the cluster's Kubeconfig acts as this user.
	AdminUser = "trust-rotation:admin"
	// UnprivilegedUser authenticates but has no RBAC bindings beyond what every authenticated
	// user gets, so tests can observe RBAC denials with a real token.
	UnprivilegedUser = "trust-rotation:unprivileged"
)

func (o Options) withDefaults() (Options, error) {
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.NodePods == 0 {
		o.NodePods = 1100
	}
	if o.ControllerQPS == 0 {
		o.ControllerQPS = 200
	}
	if o.ControllerBurst == 0 {
		o.ControllerBurst = 400
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	if o.StopGrace == 0 {
		o.StopGrace = 10 * time.Second
	}
	if o.Nodes < 0 || o.NodePods < 0 {
		return o, fmt.Errorf("invalid options: %d nodes with %d pods each", o.Nodes, o.NodePods)
	}
	if o.PodCIDR != "" {
		_, n, err := net.ParseCIDR(o.PodCIDR)
		if err != nil {
			return o, fmt.Errorf("invalid pod CIDR %q: %w", o.PodCIDR, err)
		}
		if !n.IP.IsLoopback() {
			return o, fmt.Errorf("invalid pod CIDR %q: it must lie in 127.0.0.0/8 so pod IPs are reachable on this machine", o.PodCIDR)
		}
	}
	return o, nil
}
