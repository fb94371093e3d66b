package cluster

import (
	"fmt"
	"path/filepath"
	"slices"
)

// CertManagerController is the name of the cert-manager controller's process.
const CertManagerController = "cert-manager-controller"

// Suspend stops a running component, as an outage of it does: for the cert-manager controller,
// no Certificate is renewed or re-issued until it runs again. The returned function starts it
// again with the same flags, its log appended to the same file. While suspended, the component
// is not among Processes and its absence does not fail the readiness waits.
func (c *Cluster) Suspend(name string) (resume func() error, err error) {
	c.mu.Lock()
	i := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == name })
	if i < 0 {
		c.mu.Unlock()
		return nil, fmt.Errorf("no running component named %s", name)
	}
	p := c.procs[i]
	c.procs = slices.Delete(c.procs, i, i+1)
	c.mu.Unlock()
	if err := p.stop(c.opts.StopGrace); err != nil {
		return nil, err
	}
	args := p.cmd.Args[1:]
	return func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.halted {
			return fmt.Errorf("resuming %s: the cluster has stopped", name)
		}
		np, err := startProcess(name, filepath.Join(c.binDir, name), args, p.logFile)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, np)
		return nil
	}, nil
}
