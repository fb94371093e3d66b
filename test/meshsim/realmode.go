package meshsim

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/test/internal/proc"
)

// realLinkerd is what a mesh in real-Linkerd mode (Config.Linkerd) shares among the
// pods it runs Linkerd's own processes for: the pods' ServiceAccount tokens, the identity RBAC
// the chart grants, and the gRPC client that makes the simulated proxies' Certify calls.
type realLinkerd struct {
	mu           sync.Mutex
	rbac         map[string]bool // the components whose ClusterRole is in place
	values       []byte          // linkerd-config's values
	servingCrt   []byte          // the proxy injector's serving certificate and key
	servingKey   []byte
	injectorHTTP *http.Client // trusts servingCrt
	tokens       map[types.UID]podToken
	client       *certifyClient
	closed       bool
}

type podToken struct {
	token   string
	refresh time.Time
}

// The lifetime of the tokens the bed requests: the linkerd-identity-token projected volume
// Linkerd injects asks for 24h (linkerd2 charts/partials/templates/_volumes.tpl), and a kubelet
// refreshes a projected token at 80 % of its lifetime.
const tokenLifetime = 24 * time.Hour

func newRealLinkerd() *realLinkerd {
	return &realLinkerd{tokens: map[types.UID]podToken{}, rbac: map[string]bool{}}
}

// ensureIdentityRBAC grants linkerd-identity what `linkerd install` grants it
// (charts/linkerd-control-plane/templates/identity-rbac.yaml): TokenReviews, to check the
// proxies' tokens, and Events.
func (r *realLinkerd) ensureIdentityRBAC(m *Mesh) error {
	return r.ensureRBAC(m, ComponentIdentity, IdentityDeployment, []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	})
}

// ensureInjectorRBAC grants linkerd-proxy-injector what `linkerd install` grants it
// (charts/linkerd-control-plane/templates/proxy-injector-rbac.yaml): reading namespaces, pods and
// the workloads that own them, and Events.
func (r *realLinkerd) ensureInjectorRBAC(m *Mesh) error {
	read := []string{"list", "get", "watch"}
	return r.ensureRBAC(m, ComponentProxyInjector, "linkerd-"+ComponentProxyInjector, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces", "replicationcontrollers"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"extensions", "apps"}, Resources: []string{"deployments", "replicasets", "daemonsets", "statefulsets"}, Verbs: read},
		{APIGroups: []string{"extensions", "batch"}, Resources: []string{"cronjobs", "jobs"}, Verbs: read},
	})
}

// ensureRBAC creates, once per mesh, the ClusterRole linkerd-<namespace>-<component> with rules
// and binds it to the component's ServiceAccount, as the chart names and labels them.
func (r *realLinkerd) ensureRBAC(m *Mesh, component, serviceAccount string, rules []rbacv1.PolicyRule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rbac[component] {
		return nil
	}
	ns := m.cfg.LinkerdNamespace
	name := "linkerd-" + ns + "-" + component
	labels := map[string]string{LabelControlPlaneComponent: component, LabelControlPlaneNS: ns}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: ns}}}
	rbac := m.client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(m.ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating clusterrole %s: %w", name, err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(m.ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating clusterrolebinding %s: %w", name, err)
	}
	r.rbac[component] = true
	return nil
}

// token requests a token of the pod's ServiceAccount, bound to the pod, as a kubelet does for
// a projected token volume; audience "" is the apiserver's own.
func (r *realLinkerd) token(m *Mesh, pod PodRef, sa, audience string) (string, error) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	secs := int64(tokenLifetime / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &secs,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	tok, err := m.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of serviceaccount %s/%s for pod %s: %w", pod.Namespace, sa, pod.Name, err)
	}
	return tok.Status.Token, nil
}

// proxyToken is the token of the proxy's linkerd-identity-token volume (audience
// identity.l5d.io), requested once and again at 80 % of its lifetime, as a kubelet refreshes it.
func (r *realLinkerd) proxyToken(m *Mesh, p *proxy) (string, error) {
	r.mu.Lock()
	t, ok := r.tokens[p.pod.UID]
	r.mu.Unlock()
	if ok && time.Now().Before(t.refresh) {
		return t.token, nil
	}
	tok, err := r.token(m, p.pod, p.serviceAccount, identityTokenAudience)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.tokens[p.pod.UID] = podToken{token: tok, refresh: time.Now().Add(tokenLifetime * 8 / 10)}
	r.mu.Unlock()
	return tok, nil
}

// identityTokenAudience is the audience of the proxy's token (linkerd2 pkg/identity: the
// identity controller's TokenReview asks for it).
const identityTokenAudience = "identity.l5d.io"

func (r *realLinkerd) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tokens, uid)
}

// certify calls Identity.Certify at addr through the identityclient tool.
// The chain returned is the leaf then the intermediates, as the proxy presents it.
func (r *realLinkerd) certify(m *Mesh, addr, token, identity string, csr []byte) ([]*x509.Certificate, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("identity service unavailable: the mesh stopped")
	}
	if r.client == nil {
		c, err := startCertifyClient()
		if err != nil {
			r.mu.Unlock()
			return nil, err
		}
		r.client = c
	}
	c := r.client
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
	defer cancel()
	rsp, err := c.call(ctx, certifyRequest{Addr: addr, Token: token, Identity: identity, CSR: csr})
	if err != nil {
		return nil, fmt.Errorf("identity service unavailable: %w", err)
	}
	if rsp.Error != "" {
		return nil, fmt.Errorf("identity %s: %s", addr, rsp.Error)
	}
	chain, err := ParseCertificates([]byte(rsp.Leaf))
	if err != nil || len(chain) != 1 {
		return nil, fmt.Errorf("identity %s returned no leaf certificate: %v", addr, err)
	}
	for _, p := range rsp.Intermediates {
		c, err := ParseCertificates([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("identity %s returned an intermediate that does not parse: %w", addr, err)
		}
		chain = append(chain, c...)
	}
	return chain, nil
}

func (r *realLinkerd) close() {
	r.mu.Lock()
	c := r.client
	r.client, r.closed = nil, true
	r.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// certifyClient is a running `identityclient -serve` (test/tools/identityclient, a module of its
// own so that this module does not depend on gRPC).
type certifyClient struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu      sync.Mutex
	enc     *json.Encoder
	next    uint64
	waiting map[uint64]chan certifyResponse
	err     error
}

type certifyRequest struct {
	ID       uint64 `json:"id"`
	Addr     string `json:"addr"`
	Token    string `json:"token"`
	Identity string `json:"identity"`
	CSR      []byte `json:"csr"`
}

type certifyResponse struct {
	ID            uint64   `json:"id"`
	Leaf          string   `json:"leaf"`
	Intermediates []string `json:"intermediates"`
	Error         string   `json:"error"`
}

func startCertifyClient() (*certifyClient, error) {
	bin, err := identityClientBinary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-serve")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := proc.StartOrphanProof(cmd); err != nil {
		return nil, fmt.Errorf("starting %s -serve: %w", bin, err)
	}
	c := &certifyClient{cmd: cmd, stdin: stdin, enc: json.NewEncoder(stdin), done: make(chan struct{}),
		waiting: map[uint64]chan certifyResponse{}}
	go c.read(stdout)
	return c, nil
}

func (c *certifyClient) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rsp certifyResponse
		if json.Unmarshal(sc.Bytes(), &rsp) != nil {
			continue
		}
		c.mu.Lock()
		ch := c.waiting[rsp.ID]
		delete(c.waiting, rsp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- rsp
		}
	}
	_ = c.cmd.Wait()
	c.mu.Lock()
	c.err = errors.New("identityclient exited")
	for id, ch := range c.waiting {
		delete(c.waiting, id)
		ch <- certifyResponse{ID: id, Error: c.err.Error()}
	}
	c.mu.Unlock()
	close(c.done)
}

func (c *certifyClient) call(ctx context.Context, req certifyRequest) (certifyResponse, error) {
	ch := make(chan certifyResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return certifyResponse{}, c.err
	}
	c.next++
	req.ID = c.next
	c.waiting[req.ID] = ch
	err := c.enc.Encode(req)
	c.mu.Unlock()
	if err != nil {
		return certifyResponse{}, err
	}
	select {
	case rsp := <-ch:
		return rsp, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiting, req.ID)
		c.mu.Unlock()
		return certifyResponse{}, ctx.Err()
	}
}

func (c *certifyClient) close() {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

var identityClientBuild struct {
	once sync.Once
	bin  string
	err  error
}

// identityClientBinary builds test/tools/identityclient once, into the user's cache, keyed by
// its sources.
func identityClientBinary() (string, error) {
	b := &identityClientBuild
	b.once.Do(func() {
		_, self, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(self), "..", "tools", "identityclient")
		h := sha256.New()
		for _, f := range []string{"go.mod", "go.sum", "main.go"} {
			data, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				b.err = fmt.Errorf("the identityclient tool: %w", err)
				return
			}
			h.Write(data)
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(cache, "linkerd-trust-rotation", "identityclient-"+hex.EncodeToString(h.Sum(nil))[:16])
		if _, err := os.Stat(b.bin); err == nil {
			return
		}
		tmp := b.bin + fmt.Sprintf(".%d.tmp", os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, ".")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %w\n%s", src, err, out)
			return
		}
		b.err = os.Rename(tmp, b.bin)
	})
	return b.bin, b.err
}
