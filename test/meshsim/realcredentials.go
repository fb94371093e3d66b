package meshsim

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// podCredentials are what a container of Linkerd's reaches the apiserver with, in place of
// the in-cluster configuration it has no environment for: a kubeconfig whose tokenFile holds
// a token of the pod's ServiceAccount, bound to the pod. As a kubelet refreshes a projected
// token, the file is replaced at 80 % of the token's lifetime (and again a minute after a
// failed request); client-go reads a tokenFile again every minute
// (transport.NewCachedFileTokenSource), as it reads the in-cluster token file.
type podCredentials struct {
	dir        string
	kubeconfig string
	tokenFile  string

	mu     sync.Mutex
	timer  clock.Timer
	closed bool
}

// tokenRefreshRetry is how soon a token whose refresh failed is requested again.
const tokenRefreshRetry = time.Minute

// podCredentials writes the credentials of a container of pod, running as ServiceAccount sa,
// into a directory of their own; close stops their refresh and removes it.
func (r *realLinkerd) podCredentials(m *Mesh, pod PodRef, sa string) (*podCredentials, error) {
	dir, err := os.MkdirTemp("", "linkerd-pod-")
	if err != nil {
		return nil, err
	}
	c := &podCredentials{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig"), tokenFile: filepath.Join(dir, "token")}
	if err := c.writeToken(r, m, pod, sa); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	rc := m.cfg.RESTConfig
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bed"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData,
		CertificateAuthority: rc.CAFile, InsecureSkipTLSVerify: rc.Insecure}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: c.tokenFile}
	kc.Contexts["pod"] = &clientcmdapi.Context{Cluster: "bed", AuthInfo: "pod"}
	kc.CurrentContext = "pod"
	if err := clientcmd.WriteToFile(*kc, c.kubeconfig); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.schedule(m, tokenLifetime*8/10, func() { c.refresh(r, m, pod, sa) })
	return c, nil
}

// writeToken requests a token and replaces the token file with it in one rename, so that a
// reader sees the old token or the new one, never part of one.
func (c *podCredentials) writeToken(r *realLinkerd, m *Mesh, pod PodRef, sa string) error {
	tok, err := r.token(m, pod, sa, "")
	if err != nil {
		return err
	}
	tmp := c.tokenFile + ".new"
	if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.tokenFile)
}

func (c *podCredentials) refresh(r *realLinkerd, m *Mesh, pod PodRef, sa string) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	next := tokenLifetime * 8 / 10
	if err := c.writeToken(r, m, pod, sa); err != nil {
		klog.ErrorS(err, "Refreshing a container's ServiceAccount token", "pod", pod)
		next = tokenRefreshRetry
	}
	c.schedule(m, next, func() { c.refresh(r, m, pod, sa) })
}

// schedule runs f after d on the mesh's clock, in a goroutine of its own: a fake clock calls
// its AfterFunc functions holding its lock, and f schedules again.
func (c *podCredentials) schedule(m *Mesh, d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.timer = m.clock.AfterFunc(d, func() { go f() })
	}
}

// close stops the refresh and removes the files; nil is closed already.
func (c *podCredentials) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	os.RemoveAll(c.dir)
}
