package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Kubeconfig returns the path of the admin kubeconfig (system:masters).
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// Server returns the apiserver URL (https://127.0.0.1:<port>).
func (c *Cluster) Server() string { return c.server }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Kube returns an admin Kubernetes clientset.
func (c *Cluster) Kube() kubernetes.Interface { return c.kube }

// CertManager returns an admin cert-manager clientset.
func (c *Cluster) CertManager() cmclient.Interface { return c.certManager }

// ServiceAccountUser returns the user name a ServiceAccount authenticates as.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// RESTConfigFor returns a client configuration that acts as user with groups, through
// impersonation by the admin. RBAC is evaluated for the impersonated identity exactly as for a
// real one, so a test can run the operator with the permissions of its chart's ServiceAccount:
// RESTConfigFor(ServiceAccountUser("linkerd", "trust-rotation-operator")). For a ServiceAccount
// user given without groups the apiserver adds its groups (system:serviceaccounts and
// system:serviceaccounts:<namespace>) itself; every impersonated user is also in
// system:authenticated.
func (c *Cluster) RESTConfigFor(user string, groups ...string) *rest.Config {
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// KubeconfigFor writes a kubeconfig acting as user with groups (see RESTConfigFor), for a
// process started by a test (the operator binary, kubectl, helm), and returns its path. The
// file lives in the cluster's work directory.
func (c *Cluster) KubeconfigFor(user string, groups ...string) (string, error) {
	sum := sha256.Sum256([]byte(user + "\x00" + strings.Join(groups, "\x00")))
	path := filepath.Join(c.workDir, "kubeconfigs", "as-"+hex.EncodeToString(sum[:8])+".kubeconfig")
	return path, c.creds.writeKubeconfig(path, c.server, AdminUser, user, groups)
}

// TokenRESTConfig returns a client configuration authenticating with the static bearer token
// of user (AdminUser, UnprivilegedUser or one of Options.Users): a real authentication, not
// impersonation.
func (c *Cluster) TokenRESTConfig(user string) (*rest.Config, error) {
	tok, ok := c.creds.tokens[user]
	if !ok {
		return nil, fmt.Errorf("no static token for user %q", user)
	}
	cfg := c.RESTConfig()
	cfg.BearerToken = tok
	return cfg, nil
}

// TokenKubeconfig writes a kubeconfig authenticating with the static token of user and returns
// its path.
func (c *Cluster) TokenKubeconfig(user string) (string, error) {
	sum := sha256.Sum256([]byte(user))
	path := filepath.Join(c.workDir, "kubeconfigs", "token-"+hex.EncodeToString(sum[:8])+".kubeconfig")
	return path, c.creds.writeKubeconfig(path, c.server, user, "", nil)
}

// PodCIDR returns the network kwok assigns pod IPs from; it lies in 127.0.0.0/8, so a process on
// this machine can listen on any pod IP.
func (c *Cluster) PodCIDR() *net.IPNet {
	n := *c.podNet.cidr
	return &n
}

// IsPodIP reports whether ip is in this cluster's pod network.
func (c *Cluster) IsPodIP(ip string) bool {
	parsed := net.ParseIP(ip)
	return parsed != nil && c.podNet.cidr.Contains(parsed)
}

// WorkDir returns the directory holding the cluster's data, credentials and kubeconfigs.
func (c *Cluster) WorkDir() string { return c.workDir }

// LogDir returns the directory of the component logs (<component>.log).
func (c *Cluster) LogDir() string { return c.logDir }

// Process names a component process the cluster started.
type Process struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

// Processes lists the component processes in start order.
func (c *Cluster) Processes() []Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Process, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, Process{Name: p.name, PID: p.PID()})
	}
	return out
}

// Ports lists the TCP ports the cluster listens on: etcd client and peer and the apiserver on
// 127.0.0.1, kwok's kubelet server on every address.
func (c *Cluster) Ports() []int {
	return []int{c.etcdPorts[0], c.etcdPorts[1], c.apiPort, c.kubeletPort}
}

// LogTail returns the last lines of every component log, one section per component, for a
// failing test to print.
func (c *Cluster) LogTail(lines int) string {
	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		state := "running"
		if err := p.exited(); err != nil {
			state = err.Error()
		}
		fmt.Fprintf(&b, "==> %s (pid %d, %s) <==\n", p.name, p.PID(), state)
		data, err := os.ReadFile(p.logFile)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
			continue
		}
		var kept [][]byte
		routine := 0
		for _, l := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
			if isRoutine(l) {
				routine++
				continue
			}
			kept = append(kept, l)
		}
		if len(kept) > lines {
			kept = kept[len(kept)-lines:]
		}
		if routine > 0 {
			fmt.Fprintf(&b, "(%d routine lines left out)\n", routine)
		}
		b.Write(bytes.Join(kept, []byte("\n")))
		b.WriteString("\n")
	}
	return b.String()
}

// routineLogLines are log lines of the components that say nothing about a failure: the watch
// cache's queue, quota evaluators, and controllers retrying a sync on a cache older than their
// own last write (they requeue and succeed). Left out of LogTail so that what went wrong shows.
var routineLogLines = [][]byte{
	[]byte("objects queued in incoming channel"),
	[]byte("quota admission added evaluator"),
	[]byte("is not as new as written version"),
}

func isRoutine(line []byte) bool {
	for _, r := range routineLogLines {
		if bytes.Contains(line, r) {
			return true
		}
	}
	return false
}
