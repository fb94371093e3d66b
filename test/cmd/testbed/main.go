// Command testbed runs the local test bed in the foreground: a real cluster (test/cluster), the
// Linkerd PKI issued by cert-manager (test/pki) and, with --mesh, the Linkerd mesh simulator. It
// is what `make cluster-up` starts in the background for trying the product by hand.
//
//	testbed up [--dir .local] [--nodes 2] [--mesh] [--clusters 2]
//
// With --clusters 2 it starts a second cluster, east, linked to the first, west (see
// startLinked): <dir>/kubeconfig-east reaches it.
//
// Once everything is ready it writes <dir>/kubeconfig (admin), <dir>/testbed.json (server, pod
// network, PIDs of every component, log directory) and last the marker <dir>/testbed.ready, which
// scripts/testbed.sh waits for. On SIGINT or SIGTERM it stops everything it started and removes
// those files and <dir>/work (the cluster's data); component logs stay in <dir>/logs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
)

func main() {
	klog.InitFlags(nil)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testbed up [flags]\n\nflags:\n")
		flag.PrintDefaults()
	}
	if len(os.Args) < 2 || os.Args[1] != "up" {
		flag.Usage()
		os.Exit(2)
	}
	var cfg config
	fs := flag.CommandLine
	fs.StringVar(&cfg.dir, "dir", "", "state directory for the kubeconfig, state file, ready marker and logs (default <repository>/.local)")
	fs.IntVar(&cfg.nodes, "nodes", 2, "number of fake kwok nodes")
	fs.IntVar(&cfg.clusters, "clusters", 1, "1, or 2 for a linked pair: the first cluster (west) and east, linked both ways as Linkerd multicluster links them (see startLinked)")
	fs.BoolVar(&cfg.mesh, "mesh", false, "also start the Linkerd mesh simulator and a meshed sample app (see startMesh)")
	fs.BoolVar(&cfg.proxyAsContainer, "proxy-as-container", false, "with --mesh, inject the proxy into spec.containers as Linkerd before edge-26.5.2 does (proxy.nativeSidecar: false), instead of as a native sidecar")
	fs.DurationVar(&cfg.issuerDuration, "issuer-duration", 0, "lifetime of the identity issuer certificate (default 48h)")
	fs.DurationVar(&cfg.issuerRenewBefore, "issuer-renew-before", 0, "renewBefore of the identity issuer certificate (default 25h)")
	fs.BoolVar(&cfg.registry, "registry", true, "also start an OCI registry on the loopback, to push the image (make image IMAGE=...) and the charts (make chart CHART_REPO=...) to")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := up(ctx, cfg); err != nil {
		klog.Flush()
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
	klog.Flush()
}

type config struct {
	dir                               string
	nodes, clusters                   int
	mesh, proxyAsContainer, registry  bool
	issuerDuration, issuerRenewBefore time.Duration
}

// State is the content of <dir>/testbed.json.
type State struct {
	PID        int               `json:"pid"`
	Server     string            `json:"server"`
	Kubeconfig string            `json:"kubeconfig"`
	PodCIDR    string            `json:"podCIDR"`
	LogDir     string            `json:"logDir"`
	WorkDir    string            `json:"workDir"`
	Processes  []cluster.Process `json:"processes"`
	Mesh       bool              `json:"mesh"`
	Registry   string            `json:"registry,omitempty"`
	Started    time.Time         `json:"started"`
	Extra      map[string]string `json:"extra,omitempty"`
}

// Bed is what runs in this process; startMesh gets it.
type Bed struct {
	Dir     string
	Cluster *cluster.Cluster
	PKI     *pki.PKI
	// Extra is copied into the state file; startMesh may record addresses of what it started.
	Extra map[string]string
}

func up(ctx context.Context, cfg config) (err error) {
	began := time.Now()
	if cfg.dir == "" {
		root, err := cluster.ModuleRoot()
		if err != nil {
			return fmt.Errorf("finding the repository (or pass --dir): %w", err)
		}
		cfg.dir = filepath.Join(root, ".local")
	}
	paths := struct{ kubeconfig, state, ready, logs string }{
		kubeconfig: filepath.Join(cfg.dir, "kubeconfig"),
		state:      filepath.Join(cfg.dir, "testbed.json"),
		ready:      filepath.Join(cfg.dir, "testbed.ready"),
		logs:       filepath.Join(cfg.dir, "logs"),
	}
	// A marker left by a crashed run must not make the waiter think this run is ready.
	for _, f := range []string{paths.ready, paths.state} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing stale %s: %w", f, err)
		}
	}
	if err := os.RemoveAll(paths.logs); err != nil {
		return fmt.Errorf("removing old logs: %w", err)
	}

	// The work dir lives in the state directory rather than /tmp, so that the next run (or
	// `make cluster-down`) cleans up even after this process was killed outright.
	workDir := filepath.Join(cfg.dir, "work")
	c, err := cluster.Start(ctx, cluster.Options{Nodes: cfg.nodes, WorkDir: workDir, LogDir: paths.logs, Registry: cfg.registry})
	if err != nil {
		return err
	}
	bed := &Bed{Dir: cfg.dir, Cluster: c, Extra: map[string]string{}}
	var stopMesh, stopLinked func() error
	defer func() {
		// Undo in reverse: first withdraw the marker so nobody uses a bed going down.
		for _, f := range []string{paths.ready, paths.state, paths.kubeconfig} {
			_ = os.Remove(f)
		}
		if stopLinked != nil {
			if e := stopLinked(); e != nil {
				err = errors.Join(err, fmt.Errorf("stopping cluster %s: %w", linkedName, e))
			}
		}
		if stopMesh != nil {
			if e := stopMesh(); e != nil {
				err = errors.Join(err, fmt.Errorf("stopping the mesh simulator: %w", e))
			}
		}
		if e := c.Stop(); e != nil {
			err = errors.Join(err, fmt.Errorf("stopping the cluster: %w", e))
		}
		if e := os.RemoveAll(workDir); e != nil {
			err = errors.Join(err, fmt.Errorf("removing the work directory: %w", e))
		}
		klog.InfoS("Test bed stopped")
	}()

	bed.PKI, err = pki.Install(ctx, c.Kube(), c.CertManager(), pki.Options{
		IssuerDuration: cfg.issuerDuration, IssuerRenewBefore: cfg.issuerRenewBefore,
	})
	if err != nil {
		return fmt.Errorf("installing the Linkerd PKI: %w", err)
	}
	if cfg.mesh {
		if stopMesh, err = startMesh(ctx, bed, cfg.proxyAsContainer); err != nil {
			return err
		}
	}

	switch cfg.clusters {
	case 1:
	case 2:
		if stopLinked, err = startLinked(ctx, bed, cfg.mesh, cfg.proxyAsContainer); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--clusters must be 1 or 2, not %d", cfg.clusters)
	}

	kubeconfig, err := os.ReadFile(c.Kubeconfig())
	if err != nil {
		return fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	if err := writeFileAtomic(paths.kubeconfig, kubeconfig, 0o600); err != nil {
		return err
	}
	state, _ := json.MarshalIndent(State{
		PID: os.Getpid(), Server: c.Server(), Kubeconfig: paths.kubeconfig, PodCIDR: c.PodCIDR().String(),
		LogDir: c.LogDir(), WorkDir: c.WorkDir(), Processes: c.Processes(), Mesh: cfg.mesh, Registry: c.Registry(),
		Started: time.Now().UTC(), Extra: bed.Extra,
	}, "", "  ")
	if err := writeFileAtomic(paths.state, append(state, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeFileAtomic(paths.ready, nil, 0o644); err != nil {
		return err
	}
	fmt.Printf(`
Test bed ready in %s (pid %d).

  export KUBECONFIG=%s
  kubectl get nodes
  kubectl -n cert-manager get certificate linkerd-trust-anchor
  kubectl -n linkerd get certificate linkerd-identity-issuer

State (PIDs, pod network): %s
Component logs: %s
Stop it with SIGINT/SIGTERM (make cluster-down).
`, time.Since(began).Round(100*time.Millisecond), os.Getpid(), paths.kubeconfig, paths.state, c.LogDir())
	if reg := c.Registry(); reg != "" {
		fmt.Printf(`
An OCI registry (plain HTTP, no authentication) is at %[1]s:
  make image IMAGE_BASE=local IMAGE=%[1]s/linkerd/trust-rotation
  make chart CHART_REPO=oci://%[1]s/charts HELM_PUSH_FLAGS=--plain-http
`, reg)
	}
	if stopLinked != nil {
		fmt.Printf(`
A linked pair: this cluster is west; east (its own cert-manager, the same trust anchor) is at
  export KUBECONFIG=%s
Each has a Link to the other in namespace %s. Install the charts in both with
  --set multicluster.enabled=true --set multicluster.remoteAccess.enabled=true
Renew the anchor in west, then copy Secret cert-manager/linkerd-trust-anchor to east.
`, bed.Extra[linkedName+"Kubeconfig"], meshsim.MulticlusterNamespace)
	}

	<-ctx.Done()
	klog.InfoS("Signal received; stopping the test bed")
	return nil
}

// writeFileAtomic writes data to a temporary file and renames it into place, so a reader never
// sees a partial file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s into place: %w", path, err)
	}
	return nil
}
