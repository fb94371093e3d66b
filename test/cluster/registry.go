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

// startRegistry starts the test bed's OCI registry: go-containerregistry's (test/tools/oci, the
// registry `crane registry serve` runs), blobs on disk in the work directory, on a loopback port
// it picks itself and reports, so that no other process can take the port in between.
func (c *Cluster) startRegistry(ctx context.Context) error {
	bin := filepath.Join(c.binDir, "oci")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the registry needs oci in the tools directory %s (scripts/tools.sh build oci): %w", c.binDir, err)
	}
	addrFile := filepath.Join(c.workDir, "registry.addr")
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		return err
	}
	p, err := startProcess("registry", bin, []string{"registry", "--addr=127.0.0.1:0", "--addr-file=" + addrFile,
		"--dir=" + filepath.Join(c.workDir, "registry")}, filepath.Join(c.logDir, "registry.log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.until(ctx, "the registry to serve /v2/", func(ctx context.Context) (bool, error) {
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
		c.registry = addr
		return true, nil
	})
}

// Registry returns the host:port of the test bed's OCI registry on the loopback (plain HTTP, no
// authentication), or "" when the cluster was started without one (Options.Registry).
func (c *Cluster) Registry() string { return c.registry }
