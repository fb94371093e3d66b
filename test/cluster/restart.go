package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// RestartAPIServer stops the kube-apiserver (SIGTERM, then SIGKILL after a grace period) and
// starts it again with the same flags, ports and credentials, returning once it answers
// /readyz. Clients see connection errors and their watches end meanwhile, as in an apiserver
// upgrade; etcd keeps the data. Components that exit while it is down (kube-controller-manager
// and kube-scheduler give up when they cannot renew their leader lease, as a kubelet would
// restart them) are started again with their own flags. For fault-injection tests.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer(ctx)
}

// StopAPIServer stops the kube-apiserver (SIGTERM, then SIGKILL after a grace period) and leaves
// it stopped: the cluster is unreachable until StartAPIServer. For fault-injection tests.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	var old *process
	for _, p := range c.procs {
		if p.name == "kube-apiserver" {
			old = p
		}
	}
	c.mu.Unlock()
	if old == nil {
		return fmt.Errorf("no kube-apiserver process to stop")
	}
	return old.stop(10 * time.Second)
}

// StartAPIServer starts every component that has exited (the kube-apiserver StopAPIServer
// stopped, and the controllers that gave up meanwhile) with its own flags, and returns once the
// apiserver answers /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	return poll.Until(ctx, 2*time.Minute, "kube-apiserver to answer /readyz again", func(ctx context.Context) (bool, error) {
		if err := c.restartExited(); err != nil {
			return false, err
		}
		body, err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, poll.Pending("/readyz: %v: %s", err, body)
		}
		return string(body) == "ok", nil
	})
}

// restartExited starts every component that has exited again, with the same binary, flags and
// log file.
func (c *Cluster) restartExited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.procs {
		if p.exited() == nil {
			continue
		}
		np, err := startProcess(p.name, p.cmd.Path, p.cmd.Args[1:], p.logFile)
		if err != nil {
			return err
		}
		c.procs[i] = np
	}
	return nil
}
