package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// Registry is the test bed's OCI registry: go-containerregistry's (test/tools/oci, the registry
// `crane registry serve` runs), blobs on disk, on a loopback port it picks itself and reports,
// so that no other process can take the port in between. Plain HTTP, no authentication:
// go-containerregistry's clients (the image tooling, cosign) reach a loopback registry over HTTP
// by themselves, helm with --plain-http.
type Registry struct {
	// Addr is its host:port.
	Addr string
	proc *process
}

// StartRegistry starts a registry alone, for tests that need no cluster, with its blobs under
// dir and its log in logFile. Stop it with Stop.
func StartRegistry(ctx context.Context, binDir, dir, logFile string) (*Registry, error) {
	r, err := startRegistry(ctx, binDir, dir, logFile, nil)
	if err != nil && r != nil {
		_ = r.Stop()
	}
	return r, err
}

// Stop stops the registry (SIGTERM, by its PID) and waits for it to exit.
func (r *Registry) Stop() error { return r.proc.stop(10 * time.Second) }

// startRegistry starts the registry; running, when set, is asked for an error as long as the
// registry is not up yet (a cluster's component that exited). On error, the returned Registry,
// if any, holds the started process.
func startRegistry(ctx context.Context, binDir, dir, logFile string, running func() error) (*Registry, error) {
	bin := filepath.Join(binDir, "oci")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the registry needs oci in the tools directory %s (scripts/tools.sh build oci): %w", binDir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addrFile := filepath.Join(dir, "registry.addr")
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	p, err := startProcess("registry", bin, []string{"registry", "--addr=127.0.0.1:0", "--addr-file=" + addrFile,
		"--dir=" + filepath.Join(dir, "blobs")}, logFile)
	if err != nil {
		return nil, err
	}
	r := &Registry{proc: p}
	hc := &http.Client{Timeout: 2 * time.Second}
	err = poll.Until(ctx, stepTimeout, "the registry to serve /v2/", func(ctx context.Context) (bool, error) {
		if err := p.exited(); err != nil {
			return false, err
		}
		if running != nil {
			if err := running(); err != nil {
				return false, err
			}
		}
		b, err := os.ReadFile(addrFile)
		if err != nil {
			return false, poll.Pending("no address yet: %v", err)
		}
		addr := strings.TrimSpace(string(b))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, poll.Pending("GET /v2/: %s", resp.Status)
		}
		r.Addr = addr
		return true, nil
	})
	return r, err
}

// startRegistry starts the cluster's registry (Options.Registry), a component of the cluster.
func (c *Cluster) startRegistry(ctx context.Context) error {
	r, err := startRegistry(ctx, c.binDir, filepath.Join(c.workDir, "registry"), filepath.Join(c.logDir, "registry.log"), c.exitedComponent)
	if r != nil {
		c.mu.Lock()
		c.procs = append(c.procs, r.proc)
		c.mu.Unlock()
	}
	if err != nil {
		return err
	}
	c.registry = r.Addr
	return nil
}

// Registry returns the host:port of the test bed's OCI registry on the loopback (plain HTTP, no
// authentication), or "" when the cluster was started without one (Options.Registry).
func (c *Cluster) Registry() string { return c.registry }
