package meshsim

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// The proxy injector container's ports (linkerd2 charts/linkerd-control-plane/templates/
// proxy-injector.yaml).
const (
	injectorWebhookPort = "8443"
	injectorAdminPort   = "9995"
	injectorServiceName = "linkerd-proxy-injector.linkerd.svc"
)

// injectorRun is Linkerd's own proxy injector (`controller proxy-injector`) running as an
// injector pod's container in real-Linkerd mode: the container's args from the pod spec, the
// pod's IP and ServiceAccount token, and its volumes at /var/run/linkerd: config/values (the
// linkerd-config values `linkerd install` renders), identity/trust-roots (read from the
// apiserver at container start, refreshed as a kubelet refreshes it, VolumeRefreshDelay after
// the ConfigMap changed) and tls (its serving certificate). The mesh's webhook forwards each
// admission call to it, as the linkerd-proxy-injector Service does, once it is ready.
type injectorRun struct {
	in    *injectorProc
	podIP string
	sa    string
	args  []string

	mu      sync.Mutex
	ctl     *reallinkerd.Controller
	gen     int
	creds   *podCredentials
	serving bool
	starts  int
	lastErr string
}

func newInjectorRun(in *injectorProc, pod *corev1.Pod) *injectorRun {
	args, sa := containerArgs(pod, ComponentProxyInjector)
	return &injectorRun{in: in, podIP: pod.Status.PodIP, sa: sa, args: args}
}

// start starts the container on the bundle the injector's volume holds (injectorProc.bundle);
// one that cannot start, or exits, starts again after the kubelet's back-off.
func (r *injectorRun) start() {
	in := r.in
	m := in.mesh
	in.mu.Lock()
	stopped, bundle := in.stopped, in.bundle
	in.mu.Unlock()
	if stopped {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	err := r.run(m, bundle)
	if err != nil {
		r.crashedLocked(err.Error())
	}
}

func (r *injectorRun) run(m *Mesh, bundle string) error {
	values, err := m.real.linkerdConfigValues(m)
	if err != nil {
		return err
	}
	crt, key, err := m.real.injectorServingCert()
	if err != nil {
		return err
	}
	if err := m.real.ensureInjectorRBAC(m); err != nil {
		return err
	}
	creds, err := m.real.podCredentials(m, r.in.pod, r.sa)
	if err != nil {
		return err
	}
	r.creds.close()
	r.creds = creds
	var args []string
	for _, a := range r.args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "addr" && name != "metrics-addr" && name != "kubeconfig" {
			args = append(args, a)
		}
	}
	args = append(args, "-kubeconfig="+creds.kubeconfig, "-addr="+net.JoinHostPort(r.podIP, injectorWebhookPort),
		"-metrics-addr="+net.JoinHostPort(r.podIP, injectorAdminPort))
	r.gen++
	r.serving = false
	ctl, err := reallinkerd.StartController(m.cfg.Linkerd.Controller, args, map[string][]byte{
		"config/values":                         values,
		"identity/trust-roots/" + TrustRootsKey: []byte(bundle),
		"tls/" + corev1.TLSCertKey:              crt,
		"tls/" + corev1.TLSPrivateKeyKey:        key,
	}, nil)
	if err != nil {
		return err
	}
	r.ctl = ctl
	go r.await(ctl, r.gen)
	return nil
}

// await marks the container ready once its readiness endpoint answers, as the kubelet's probe
// does (GET /ready on the admin port), and restarts it after the back-off once it exits.
func (r *injectorRun) await(ctl *reallinkerd.Controller, gen int) {
	m := r.in.mesh
	url := "http://" + net.JoinHostPort(r.podIP, injectorAdminPort) + "/ready"
	probe := time.NewTicker(100 * time.Millisecond)
	defer probe.Stop()
	for {
		select {
		case <-ctl.Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.gen == gen && !r.in.isStopped() {
				r.crashedLocked("proxy-injector exited: " + lastLines(ctl.Log(), 3))
			}
			return
		case <-m.ctx.Done():
			return
		case <-probe.C:
			ctx, cancel := context.WithTimeout(m.ctx, time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			rsp, err := http.DefaultClient.Do(req)
			cancel()
			if err != nil {
				continue
			}
			rsp.Body.Close()
			if rsp.StatusCode != http.StatusOK {
				continue
			}
			r.mu.Lock()
			if r.gen == gen {
				r.serving = true
				klog.InfoS("Proxy injector ready", "pod", r.in.pod)
			}
			r.mu.Unlock()
			probe.Stop()
			<-ctl.Done()
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.gen == gen && !r.in.isStopped() {
				r.crashedLocked("proxy-injector exited: " + lastLines(ctl.Log(), 3))
			}
			return
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (r *injectorRun) crashedLocked(msg string) {
	m := r.in.mesh
	r.serving, r.lastErr = false, msg
	backoff := m.cfg.CrashLoopBackoff << min(r.starts-1, 5)
	if backoff > 5*time.Minute {
		backoff = 5 * time.Minute
	}
	klog.InfoS("Proxy injector exited; kubelet restarts it after back-off", "pod", r.in.pod, "err", msg, "backoff", backoff)
	m.recordPodEvent(r.in.pod, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container proxy-injector: "+msg)
	m.clock.AfterFunc(backoff, r.start)
}

func (r *injectorRun) ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.serving
}

// refreshTrustRoots writes the bundle into the container's trust-roots volume as a kubelet
// refreshes it.
func (r *injectorRun) refreshTrustRoots(bundle string) {
	r.mu.Lock()
	ctl := r.ctl
	r.mu.Unlock()
	if ctl == nil {
		return
	}
	if err := ctl.Refresh("identity/trust-roots", map[string][]byte{TrustRootsKey: []byte(bundle)}); err != nil {
		klog.ErrorS(err, "Refreshing the proxy injector's trust-roots volume", "pod", r.in.pod)
	}
}

func (r *injectorRun) stop() {
	r.mu.Lock()
	r.serving = false
	r.gen++
	ctl, creds := r.ctl, r.creds
	r.mu.Unlock()
	if ctl != nil {
		ctl.Stop()
	}
	creds.close()
}

// admit forwards an admission call to the container, as the apiserver's call through the
// linkerd-proxy-injector Service reaches it.
func (r *injectorRun) admit(w http.ResponseWriter, req *http.Request, body []byte) {
	m := r.in.mesh
	client, err := m.real.injectorClient()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	url := "https://" + net.JoinHostPort(r.podIP, injectorWebhookPort) + req.URL.RequestURI()
	fwd, err := http.NewRequestWithContext(req.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fwd.Header.Set("Content-Type", "application/json")
	rsp, err := client.Do(fwd)
	if err != nil {
		http.Error(w, "calling the proxy injector: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer rsp.Body.Close()
	w.Header().Set("Content-Type", rsp.Header.Get("Content-Type"))
	w.WriteHeader(rsp.StatusCode)
	_, _ = io.Copy(w, rsp.Body)
}

// linkerdConfigValues is the values key of the linkerd-config ConfigMap that `linkerd install`
// renders (the CLI of Config.Linkerd), with the proxy layout and refresh bounds of the mesh's
// Config as Helm values. It renders with --ignore-cluster, which Linkerd refuses together with
// the external CA, so its identity values are those of a self-signed install. The injector
// reads none of those: it replaces identityTrustAnchorsPEM with its mounted trust-roots file at
// every admission (linkerd2 controller/proxy-injector/webhook.go), and of the identity values
// the proxy templates read only identity.serviceAccountTokenProjection
// (charts/partials/templates/_proxy.tpl), which the external CA leaves as it is.
func (r *realLinkerd) linkerdConfigValues(m *Mesh) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.values != nil {
		return r.values, nil
	}
	args := []string{"install", "--ignore-cluster", "--linkerd-namespace", m.cfg.LinkerdNamespace,
		"--identity-trust-domain", m.cfg.TrustDomain}
	if m.cfg.ProxyAsContainer {
		args = append(args, "--set", "proxy.nativeSidecar=false")
	}
	i := 0
	for _, e := range []struct {
		name string
		d    time.Duration
	}{{EnvMinRefresh, m.cfg.ProxyMinRefresh}, {EnvMaxRefresh, m.cfg.ProxyMaxRefresh}} {
		if e.d > 0 {
			args = append(args, "--set", fmt.Sprintf("proxy.additionalEnv[%d].name=%s", i, e.name),
				"--set-string", fmt.Sprintf("proxy.additionalEnv[%d].value=%ds", i, int(e.d/time.Second)))
			i++
		}
	}
	cmd := exec.CommandContext(m.ctx, m.cfg.Linkerd.CLI, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", m.cfg.Linkerd.CLI, strings.Join(args, " "), err, stderr.String())
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var cm corev1.ConfigMap
		if yaml.Unmarshal([]byte(doc), &cm) != nil || cm.Kind != "ConfigMap" || cm.Name != "linkerd-config" {
			continue
		}
		if v, ok := cm.Data["values"]; ok {
			r.values = []byte(v)
			return r.values, nil
		}
	}
	return nil, fmt.Errorf("linkerd %s rendered no ConfigMap linkerd-config with a values key", strings.Join(args, " "))
}

// injectorServingCert is the proxy injector's serving certificate and key (PEM), one per mesh,
// as the chart generates one for the linkerd-proxy-injector-k8s-tls Secret.
func (r *realLinkerd) injectorServingCert() (crt, key []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.servingCrt == nil {
		cert, _, err := selfSignedServingCert()
		if err != nil {
			return nil, nil, err
		}
		der, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
		if err != nil {
			return nil, nil, err
		}
		r.servingCrt = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
		r.servingKey = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
		pool := x509.NewCertPool()
		pool.AddCert(cert.Leaf)
		r.injectorHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: injectorServiceName, MinVersion: tls.VersionTLS12}}}
	}
	return r.servingCrt, r.servingKey, nil
}

func (r *realLinkerd) injectorClient() (*http.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.injectorHTTP == nil {
		return nil, errors.New("the proxy injector has no serving certificate yet")
	}
	return r.injectorHTTP, nil
}
