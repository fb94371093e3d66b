package meshsim

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// identityProc simulates the identity controller of one identity pod (linkerd2
// controller/cmd/identity + pkg/identity).
//
// At start it reads the trust roots from its mounted ConfigMap ONCE and loads the issuer from its
// mounted Secret, verifying it against those roots for the name identity.<ns>.<trust-domain>; a
// failure is log.Fatalf upstream, so the container exits and the kubelet restarts it with
// CrashLoopBackOff — and each restart reads the roots and the issuer again. While running it
// reloads the issuer when the Secret volume changes, verifying the new one against its START-UP
// roots: IssuerUpdateSkipped (Warning) keeps the old issuer, IssuerUpdated (Normal) switches.
type identityProc struct {
	mesh *Mesh
	pod  PodRef
	// scheme is the pod's -identity-scheme: which files of the issuer volume it reads.
	scheme string

	mu        sync.Mutex
	roots     *rootSet
	issuer    *issuerCreds
	lastData  []byte // certificate+key files last loaded, to react only to volume content changes
	deploy    *appsv1.Deployment
	starts    int
	lastErr   string
	timer     clock.Timer
	stopped   bool
	startedAt time.Time
}

// IdentityState is the ground truth of one identity controller.
type IdentityState struct {
	Pod                     PodRef
	Ready                   bool // initialised with an issuer that chains to its roots
	Starts                  int  // container starts, including CrashLoopBackOff restarts
	LastError               string
	RootFingerprints        []string
	IssuerFingerprint       string
	IssuerAnchorFingerprint string // fingerprint of the root in its start-up roots the issuer chains to
	// Linkerd is the version Linkerd's own identity controller logged at start
	// (Config.Linkerd), "" for the simulated one.
	Linkerd string
}

// start runs the container's start-up; on failure it schedules the kubelet's restart.
func (id *identityProc) start() {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.stopped {
		return
	}
	id.starts++
	err := id.initialize()
	if err == nil {
		id.lastErr = ""
		klog.InfoS("Identity controller started", "pod", id.pod, "issuer", Fingerprint(id.issuer.chain[0]))
		id.mesh.identityChanged()
		return
	}
	id.lastErr = err.Error()
	id.roots, id.issuer = nil, nil
	backoff := id.mesh.cfg.CrashLoopBackoff << min(id.starts-1, 5)
	if backoff > 5*time.Minute {
		backoff = 5 * time.Minute
	}
	klog.InfoS("Identity controller failed to start (the container exits); kubelet restarts it after back-off",
		"pod", id.pod, "err", err, "backoff", backoff)
	id.mesh.recordPodEvent(id.pod, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container identity: "+err.Error())
	id.timer = id.mesh.clock.AfterFunc(backoff, id.start)
}

func (id *identityProc) initialize() error {
	// Its volumes as the kubelet mounts them at container start.
	bundle, ok := id.mesh.mountedConfigMapValue(id.mesh.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
	if !ok {
		return fmt.Errorf("reading trust roots: configmap %s/%s key %s not found", id.mesh.cfg.LinkerdNamespace, TrustRootsConfigMap, TrustRootsKey)
	}
	roots, err := parseRoots(bundle)
	if err != nil {
		return fmt.Errorf("failed to read trust anchors: %w", err)
	}
	deploy, err := id.mesh.deployment(id.mesh.cfg.LinkerdNamespace, IdentityDeployment)
	if err != nil {
		return fmt.Errorf("failed to construct k8s event recorder: %w", err)
	}
	files, ok := id.mesh.mountedIssuerSecret()
	crt, key := issuerFiles(files, id.scheme)
	if !ok {
		return fmt.Errorf("failed to initialize identity service: failed to read CA from disk: secret %s/%s not found", id.mesh.cfg.LinkerdNamespace, IssuerSecret)
	}
	issuer, err := loadIssuer(crt, key, roots.pool, id.expectedName(), id.mesh.clock.Now())
	if err != nil {
		return fmt.Errorf("failed to initialize identity service: %w", err)
	}
	id.roots, id.issuer, id.deploy = roots, issuer, deploy
	id.lastData = append(append([]byte{}, crt...), key...)
	id.startedAt = id.mesh.clock.Now()
	return nil
}

func (id *identityProc) expectedName() string {
	return issuerExpectedName(id.mesh.cfg.LinkerdNamespace, id.mesh.cfg.TrustDomain)
}

// issuerVolumeChanged is called (after the volume refresh delay) when the issuer Secret changed.
func (id *identityProc) issuerVolumeChanged() {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.stopped || id.issuer == nil {
		return // not running: the next start reads the Secret anyway
	}
	files, ok := id.mesh.issuerSecret()
	if !ok {
		return // the kubelet keeps the last content of a deleted Secret's volume
	}
	crt, key := issuerFiles(files, id.scheme)
	data := append(append([]byte{}, crt...), key...)
	if bytes.Equal(data, id.lastData) {
		return // no file changed, no fsnotify event
	}
	id.lastData = data
	issuer, err := loadIssuer(crt, key, id.roots.pool, id.expectedName(), id.mesh.clock.Now())
	if err != nil {
		klog.InfoS("Identity issuer update skipped", "pod", id.pod, "err", err)
		id.mesh.recordEvent(id.deploy, corev1.EventTypeWarning, EventIssuerUpdateSkipped, issuerReloadMessage(err))
		return
	}
	id.issuer = issuer
	klog.InfoS("Identity issuer updated", "pod", id.pod, "issuer", Fingerprint(issuer.chain[0]))
	id.mesh.recordEvent(id.deploy, corev1.EventTypeNormal, EventIssuerUpdated, issuerReloadMessage(nil))
}

// issuerReloadMessage is the message of the Event (and log line) of an issuer reload
// (pkg/identity Service.Run): IssuerUpdated, or IssuerUpdateSkipped with why.
func issuerReloadMessage(err error) string {
	if err == nil {
		return "Updated identity issuer"
	}
	return fmt.Sprintf("Skipping issuer update as certs could not be read from disk: %s", err)
}

// certify signs a workload certificate (pkg/identity Service.Certify).
func (id *identityProc) certify(p *proxy) ([]*x509.Certificate, error) {
	id.mu.Lock()
	issuer, roots := id.issuer, id.roots
	id.mu.Unlock()
	if issuer == nil {
		return nil, errors.New("cert issuer not ready yet")
	}
	// ensureIssuerStillValid: each Certify verifies the issuer against the roots identity loaded
	// at start, at the current time (Go's x509.Verify, which checks the validity of every
	// certificate of the chain, the root's included): an expired issuer or anchor refuses every
	// CSR, however long the process has been up.
	if err := verifyIssuerNow(issuer, roots.pool, id.mesh.clock.Now()); err != nil {
		return nil, fmt.Errorf("could not process CSR because of CA cert validation failure: %w", err)
	}
	return signLeaf(issuer, p.identity, p.key.Public(), id.mesh.clock.Now(), id.mesh.cfg.IssuanceLifetime, id.mesh.cfg.ClockSkewAllowance)
}

func (id *identityProc) ready() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return !id.stopped && id.issuer != nil
}

func (id *identityProc) stop() {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.stopped = true
	if id.timer != nil {
		id.timer.Stop()
	}
}

func (id *identityProc) state() IdentityState {
	id.mu.Lock()
	defer id.mu.Unlock()
	s := IdentityState{Pod: id.pod, Ready: !id.stopped && id.issuer != nil, Starts: id.starts, LastError: id.lastErr}
	if id.roots != nil {
		s.RootFingerprints = append([]string(nil), id.roots.fingerprints...)
	}
	if id.issuer != nil {
		s.IssuerFingerprint = Fingerprint(id.issuer.chain[0])
		s.IssuerAnchorFingerprint = anchorOf(id.issuer.chain, id.roots, id.mesh.clock.Now())
	}
	return s
}
