package cluster

import (
	"context"
	"fmt"
	"time"
)

// RestartAPIServer stops the kube-apiserver (SIGTERM, then SIGKILL after a grace period) and
// starts it again with the same flags, ports and credentials, returning once it answers
// /readyz. Clients see connection errors and their watches end meanwhile, as in an apiserver
// upgrade; etcd keeps the data. For fault-injection tests.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	var old *process
	kept := c.procs[:0:0]
	for _, p := range c.procs {
		if p.name == "kube-apiserver" && old == nil {
			old = p
			continue
		}
		kept = append(kept, p)
	}
	c.procs = kept
	c.mu.Unlock()
	if old == nil {
		return fmt.Errorf("no kube-apiserver process to restart")
	}
	if err := old.stop(10 * time.Second); err != nil {
		return err
	}
	return c.startAPIServer(ctx)
}
