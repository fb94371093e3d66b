package meshsim

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// identityController is one identity pod's identity container: simulated (identityProc), or
// Linkerd's own `controller identity` (realIdentity) when Config.Linkerd is set.
type identityController interface {
	start()
	stop()
	ready() bool
	// issuerVolumeChanged runs once the kubelet refreshed the issuer Secret's volume.
	issuerVolumeChanged()
	// certify answers the proxy's Certify call: the chain it must present, leaf first.
	certify(p *proxy) ([]*x509.Certificate, error)
	state() IdentityState
}

// The identity container's ports (linkerd2 charts/linkerd-control-plane/templates/identity.yaml).
const (
	identityGRPCPort  = "8080"
	identityAdminPort = "9990"
)

// realIdentity runs Linkerd's own identity controller (`controller identity`, the binary of
// Config.Linkerd) as an identity pod's container: the container's args from the pod
// spec, the pod's IP, the pod's ServiceAccount token (a kubeconfig, as the container has no
// in-cluster environment), and its two volumes at the paths the code reads,
// /var/run/linkerd/identity/trust-roots and /var/run/linkerd/identity/issuer, filled from the
// apiserver at container start and refreshed, as a kubelet refreshes them, when the Secret
// changes. It judges issuers, emits IssuerUpdated / IssuerUpdateSkipped and signs workload
// certificates itself; this type only reads what it logged, to report its state.
type realIdentity struct {
	mesh  *Mesh
	pod   PodRef
	podIP string
	sa    string
	args  []string

	mu       sync.Mutex
	ctl      *reallinkerd.Controller
	gen      int // the container start ctl is
	creds    *podCredentials
	starts   int
	lastErr  string
	serving  bool
	stopped  bool
	timer    clock.Timer
	roots    *rootSet
	scheme   string              // the pod's -identity-scheme: which issuer files identity reads
	issuer   []*x509.Certificate // issuer certificate file it serves: read at start, or its last IssuerUpdated
	pending  []*x509.Certificate // issuer certificate file written at the last refresh, until identity judged it
	lastData []byte
	loaded   []*x509.Certificate // issuer certificate file read at start
	version  string              // the version the controller logged at start
}

func newRealIdentity(m *Mesh, pod *corev1.Pod, ref PodRef) *realIdentity {
	args, sa := containerArgs(pod, ComponentIdentity)
	return &realIdentity{mesh: m, pod: ref, podIP: pod.Status.PodIP, sa: sa, args: args, scheme: podIssuerScheme(pod)}
}

// volumeData is a volume's content in one byte string, its files in name order, to tell
// whether a refresh changed any.
func volumeData(files map[string][]byte) []byte {
	var out []byte
	for _, k := range slices.Sorted(maps.Keys(files)) {
		out = append(append(append(out, k...), 0), files[k]...)
	}
	return out
}

// containerArgs are the pod's args with the addresses of this pod and, as Helm renders the
// identity.issuer values into them, the mesh's issuance lifetime and clock skew when the pod
// spec does not set them.
func (id *realIdentity) containerArgs(kubeconfig string) []string {
	cfg := id.mesh.cfg
	out := []string{}
	has := map[string]bool{}
	for _, a := range id.args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "addr", "admin-addr", "kubeconfig":
			continue
		}
		has[name] = true
		out = append(out, a)
	}
	if !has["identity-issuance-lifetime"] {
		out = append(out, "-identity-issuance-lifetime="+cfg.IssuanceLifetime.String())
	}
	if !has["identity-clock-skew-allowance"] {
		out = append(out, "-identity-clock-skew-allowance="+cfg.ClockSkewAllowance.String())
	}
	return append(out, "-kubeconfig="+kubeconfig,
		"-addr="+net.JoinHostPort(id.podIP, identityGRPCPort), "-admin-addr="+net.JoinHostPort(id.podIP, identityAdminPort))
}

// start starts the container, on the volumes' content the apiserver holds now; a container
// that cannot start, or exits, is started again after the kubelet's back-off.
func (id *realIdentity) start() {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.stopped {
		return
	}
	id.starts++
	if err := id.run(); err != nil {
		id.crashedLocked(err.Error())
	}
}

func (id *realIdentity) run() error {
	m := id.mesh
	bundle, ok := m.mountedConfigMapValue(m.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
	if !ok {
		return fmt.Errorf("reading trust roots: configmap %s/%s key %s not found", m.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
	}
	files, ok := m.mountedIssuerSecret()
	if !ok {
		return fmt.Errorf("MountVolume.SetUp failed: secret %s/%s not found", m.cfg.LinkerdNamespace, IssuerSecret)
	}
	crt, _ := issuerFiles(files, id.scheme)
	if err := m.real.ensureIdentityRBAC(m); err != nil {
		return err
	}
	creds, err := m.real.podCredentials(m, id.pod, id.sa)
	if err != nil {
		return err
	}
	id.creds.close()
	id.creds = creds
	id.roots, _ = parseRoots(bundle)
	id.loaded, _ = ParseCertificates(crt)
	id.issuer, id.pending, id.serving = nil, nil, false
	id.lastData = volumeData(files)
	id.gen++
	gen := id.gen
	// The kubelet mounts every key of the issuer Secret; identity reads those its scheme names.
	volumes := map[string][]byte{"identity/trust-roots/" + TrustRootsKey: []byte(bundle)}
	for k, v := range files {
		volumes["identity/issuer/"+k] = v
	}
	ctl, err := reallinkerd.StartController(m.cfg.Linkerd.Controller, id.containerArgs(creds.kubeconfig), volumes, func(line string) { id.observe(gen, line) })
	if err != nil {
		return err
	}
	id.ctl = ctl
	go id.follow(ctl, gen)
	return nil
}

var logrusMessage = regexp.MustCompile(`level=(\w+) msg="((?:[^"\\]|\\.)*)"`)

// follow restarts the container after the kubelet's back-off once it exited, unless its pod
// stopped running.
func (id *realIdentity) follow(ctl *reallinkerd.Controller, gen int) {
	<-ctl.Done()
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.gen == gen && !id.stopped {
		msg := id.lastErr
		if msg == "" {
			msg = "identity exited"
		}
		id.crashedLocked(msg)
	}
}

// observe takes in one line container start gen logged (logrus text format). Every line is
// observed before the container's exit is (reallinkerd.Controller.Done).
func (id *realIdentity) observe(gen int, line string) {
	mm := logrusMessage.FindStringSubmatch(line)
	if mm == nil {
		return
	}
	level, msg := mm[1], strings.ReplaceAll(mm[2], `\"`, `"`)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.gen != gen {
		return
	}
	switch {
	case level == "fatal" || level == "error":
		id.lastErr = msg
	case strings.HasPrefix(msg, "running version "):
		id.version = strings.TrimPrefix(msg, "running version ")
	case strings.HasPrefix(msg, "starting gRPC server"):
		id.serving, id.issuer, id.lastErr = true, id.loaded, ""
		klog.InfoS("Identity controller started", "pod", id.pod)
		go id.mesh.identityServing(id.pod.UID)
	case strings.Contains(msg, "Updated identity issuer"):
		id.issuer = id.pending
		klog.InfoS("Identity issuer updated", "pod", id.pod)
	case strings.Contains(msg, "Skipping issuer update"):
		klog.InfoS("Identity issuer update skipped", "pod", id.pod, "msg", msg)
	}
}

// crashedLocked records a container that could not start or exited, and schedules the
// kubelet's restart after its back-off.
func (id *realIdentity) crashedLocked(msg string) {
	id.lastErr, id.serving = msg, false
	backoff := id.mesh.cfg.CrashLoopBackoff << min(id.starts-1, 5)
	if backoff > 5*time.Minute {
		backoff = 5 * time.Minute
	}
	klog.InfoS("Identity controller exited; kubelet restarts it after back-off", "pod", id.pod, "err", msg, "backoff", backoff)
	id.mesh.recordPodEvent(id.pod, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container identity: "+msg)
	id.timer = id.mesh.clock.AfterFunc(backoff, id.start)
}

// issuerVolumeChanged refreshes the issuer volume as a kubelet does; the controller's own
// watch decides what follows.
func (id *realIdentity) issuerVolumeChanged() {
	id.mu.Lock()
	defer id.mu.Unlock()
	// A kubelet refreshes a volume whatever its container does; Linkerd's identity watches the
	// issuer's directory before it first reads it (controller/cmd/identity/main.go), so a
	// refresh while it starts is either read at start or reloaded.
	if id.stopped || id.ctl == nil {
		return
	}
	files, ok := id.mesh.issuerSecret()
	if !ok {
		return // the kubelet keeps the last content of a deleted Secret's volume
	}
	data := volumeData(files)
	if string(data) == string(id.lastData) {
		return
	}
	id.lastData = data
	crt, _ := issuerFiles(files, id.scheme)
	id.pending, _ = ParseCertificates(crt)
	if !id.serving {
		id.loaded = id.pending
	}
	if err := id.ctl.Refresh("identity/issuer", files); err != nil {
		klog.ErrorS(err, "Refreshing the identity container's issuer volume", "pod", id.pod)
	}
}

// trustRootsVolumeChanged refreshes the trust-roots volume as a kubelet does. Identity read
// the file once, at start, and does not read it again: the refresh changes nothing it does.
func (id *realIdentity) trustRootsVolumeChanged() {
	bundle, ok := id.mesh.configMapValue(id.mesh.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
	id.mu.Lock()
	defer id.mu.Unlock()
	if !ok || id.stopped || id.ctl == nil {
		return
	}
	if err := id.ctl.Refresh("identity/trust-roots", map[string][]byte{TrustRootsKey: []byte(bundle)}); err != nil {
		klog.ErrorS(err, "Refreshing the identity container's trust-roots volume", "pod", id.pod)
	}
}

// certify calls the controller's Certify as the proxy does: the pod's ServiceAccount token for
// the audience identity.l5d.io, and a CSR for its identity from its own key, with the identity
// as both common name and DNS name (linkerd2 proxy-identity/main.go generateAndStoreCSR).
func (id *realIdentity) certify(p *proxy) ([]*x509.Certificate, error) {
	id.mu.Lock()
	serving := id.serving && !id.stopped
	id.mu.Unlock()
	if !serving {
		return nil, errors.New("identity service unavailable: identity is not serving")
	}
	m := id.mesh
	token, err := m.real.proxyToken(m, p)
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: p.identity}, DNSNames: []string{p.identity}}, p.key)
	if err != nil {
		return nil, err
	}
	return m.real.certify(m, net.JoinHostPort(id.podIP, identityGRPCPort), token, p.identity, csr)
}

func (id *realIdentity) ready() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.serving && !id.stopped
}

// stop kills the container: its pod was deleted or stopped running.
func (id *realIdentity) stop() {
	id.mu.Lock()
	id.stopped, id.serving = true, false
	if id.timer != nil {
		id.timer.Stop()
	}
	ctl, creds := id.ctl, id.creds
	id.mu.Unlock()
	if ctl != nil {
		ctl.Stop()
	}
	creds.close()
}

func (id *realIdentity) state() IdentityState {
	id.mu.Lock()
	defer id.mu.Unlock()
	s := IdentityState{Pod: id.pod, Ready: id.serving && !id.stopped, Starts: id.starts, LastError: id.lastErr, Linkerd: id.version}
	if id.roots != nil {
		s.RootFingerprints = append([]string(nil), id.roots.fingerprints...)
	}
	if len(id.issuer) > 0 {
		s.IssuerFingerprint = Fingerprint(id.issuer[0])
		if id.roots != nil {
			s.IssuerAnchorFingerprint = anchorOf(id.issuer, id.roots, id.mesh.clock.Now())
		}
	}
	return s
}

// anchorOf is the fingerprint of the root of roots that chain[0] chains to, with chain[1:] as
// intermediates; "" if none.
func anchorOf(chain []*x509.Certificate, roots *rootSet, now time.Time) string {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	chains, err := chain[0].Verify(x509.VerifyOptions{Roots: roots.pool, Intermediates: inter,
		CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil || len(chains) == 0 {
		return ""
	}
	c := chains[0]
	return Fingerprint(c[len(c)-1])
}

// containerArgs returns the args of pod's container named name, as Linkerd rendered them, and
// the pod's ServiceAccount ("default" when the pod names none, as the apiserver defaults it).
func containerArgs(pod *corev1.Pod, name string) (args []string, serviceAccount string) {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			args = append(args, c.Args...)
		}
	}
	serviceAccount = pod.Spec.ServiceAccountName
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	return args, serviceAccount
}
