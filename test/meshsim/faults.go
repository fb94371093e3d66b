package meshsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ProxyFault is a misbehaviour of a proxy's admin port (podIP:4191), injected by tests to
// simulate stuck pods: the proxy's identity is unaffected (it keeps certifying, and the oracle
// keeps judging its certificate); only what a prober of the admin port sees changes.
type ProxyFault int

const (
	// ProxyFaultNone is a healthy admin port.
	ProxyFaultNone ProxyFault = iota
	// ProxyFaultRefuseTLS accepts each connection and closes it without answering: a TLS
	// handshake fails at once (EOF), as with a proxy whose admin server refuses TLS.
	ProxyFaultRefuseTLS
	// ProxyFaultHang accepts each connection and never answers: a prober times out. The
	// connection is held until the fault is cleared, the proxy stops (its pod was deleted or
	// stopped running) or the mesh stops.
	ProxyFaultHang
	// ProxyFaultForeignChain completes each TLS handshake with the live chain and key of a
	// proxy of another identity, whatever the SNI: what a prober meets when another pod's proxy
	// answers on the pod's address. A prober must reject it: the leaf names another identity.
	ProxyFaultForeignChain
	// ProxyFaultUnprovenChain presents the pod's own live chain but signs the handshake with a
	// key of its own: a server that copied the proxy's public chain. A prober must reject it:
	// the server does not prove it holds the leaf's key.
	ProxyFaultUnprovenChain
)

func (f ProxyFault) String() string {
	switch f {
	case ProxyFaultNone:
		return "none"
	case ProxyFaultRefuseTLS:
		return "refuse-tls"
	case ProxyFaultHang:
		return "hang"
	case ProxyFaultForeignChain:
		return "foreign-chain"
	case ProxyFaultUnprovenChain:
		return "unproven-chain"
	}
	return "unknown"
}

// faultSet holds the injected proxy faults, by pod UID and by owning Deployment.
type faultSet struct {
	mu         sync.Mutex
	byUID      map[types.UID]ProxyFault
	byWorkload map[string]ProxyFault // "<ns>/<deployment>"
	// identityCut holds the pods whose proxies cannot reach identity (CutIdentity).
	identityCut map[types.UID]bool
	hung        map[types.UID]int // connections held open by ProxyFaultHang, by pod
	changed     chan struct{}     // closed and replaced at every change
}

func (s *faultSet) initLocked() {
	if s.byUID == nil {
		s.byUID, s.byWorkload, s.hung = map[types.UID]ProxyFault{}, map[string]ProxyFault{}, map[types.UID]int{}
		s.identityCut = map[types.UID]bool{}
		s.changed = make(chan struct{})
	}
}

func (s *faultSet) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetProxyFault makes the admin port of the proxy of the pod with this UID fail as fault says,
// for connections accepted from now on (ProxyFaultNone clears it, and releases hung connections).
// A fault set for the pod takes precedence over one set for its Deployment. For tests only.
func (m *Mesh) SetProxyFault(uid types.UID, fault ProxyFault) {
	s := &m.faults
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if fault == ProxyFaultNone {
		delete(s.byUID, uid)
	} else {
		s.byUID[uid] = fault
	}
	s.notifyLocked()
}

// SetWorkloadProxyFault is SetProxyFault for every proxy of the Deployment namespace/name,
// those running now and those that start later (a restart does not clear it). For tests only.
func (m *Mesh) SetWorkloadProxyFault(namespace, deployment string, fault ProxyFault) {
	s := &m.faults
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if key := namespace + "/" + deployment; fault == ProxyFaultNone {
		delete(s.byWorkload, key)
	} else {
		s.byWorkload[key] = fault
	}
	s.notifyLocked()
}

// ClearProxyFaults removes every injected proxy fault.
func (m *Mesh) ClearProxyFaults() {
	s := &m.faults
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	clear(s.byUID)
	clear(s.byWorkload)
	clear(s.identityCut)
	s.notifyLocked()
}

// CutIdentity makes the proxy of the pod with this UID unable to reach linkerd-identity, as a
// NetworkPolicy denying its egress to identity does, until called again with cut false: each
// certification it attempts meanwhile fails, and it keeps the certificate it holds, retrying as
// linkerd2-proxy does (RefreshIn), until that expires. Its admin port and the oracle are
// unaffected. For tests only.
func (m *Mesh) CutIdentity(uid types.UID, cut bool) {
	s := &m.faults
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if cut {
		s.identityCut[uid] = true
	} else {
		delete(s.identityCut, uid)
	}
}

// identityCutOff reports whether CutIdentity cut the pod's proxy off identity.
func (s *faultSet) identityCutOff(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identityCut[uid]
}

// HungConnections is the number of admin-port connections to the pod's proxy that
// ProxyFaultHang holds open right now: a prober waiting for an answer.
func (m *Mesh) HungConnections(uid types.UID) int {
	s := &m.faults
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hung[uid]
}

// faultOf returns the proxy's fault and a channel closed at the next change of the faults.
func (s *faultSet) faultOf(p *proxy) (ProxyFault, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	f, ok := s.byUID[p.pod.UID]
	if !ok && p.workload != "" {
		f = s.byWorkload[p.pod.Namespace+"/"+p.workload]
	}
	return f, s.changed
}

// misbehave applies the proxy's fault to an accepted admin connection; it reports whether it
// took the connection (closed it), so that it must not be served.
func (a *adminServer) misbehave(c net.Conn, p *proxy) bool {
	s := &p.mesh.faults
	f, changed := s.faultOf(p)
	switch f {
	case ProxyFaultRefuseTLS:
		_ = c.Close()
		return true
	case ProxyFaultForeignChain, ProxyFaultUnprovenChain:
		defer c.Close()
		// Until there is a chain to present, the handshake fails as a proxy's without its
		// certificate does.
		cert, err := p.impostorCertificate(f)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_ = tls.Server(c, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }}).Handshake()
		}
		return true
	case ProxyFaultHang:
		s.mu.Lock()
		s.hung[p.pod.UID]++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			if s.hung[p.pod.UID]--; s.hung[p.pod.UID] <= 0 {
				delete(s.hung, p.pod.UID)
			}
			s.mu.Unlock()
			_ = c.Close()
		}()
		for f == ProxyFaultHang {
			select {
			case <-changed:
				f, changed = s.faultOf(p)
			case <-p.done:
				return true
			case <-a.ctx.Done():
				return true
			}
		}
		// Cleared: the prober has likely given up; it will connect again.
		return true
	}
	return false
}

// impostorCertificate is what a proxy under fault f presents instead of its own certificate:
// another identity's live chain with its key (ProxyFaultForeignChain), or the proxy's own chain
// with a key that is not its leaf's (ProxyFaultUnprovenChain).
func (p *proxy) impostorCertificate(f ProxyFault) (*tls.Certificate, error) {
	if f == ProxyFaultUnprovenChain {
		p.mu.Lock()
		own := p.tlsCert
		p.mu.Unlock()
		if own == nil {
			return nil, errors.New("no identity certificate yet")
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		return &tls.Certificate{Certificate: own.Certificate, PrivateKey: key}, nil
	}
	m := p.mesh
	m.mu.Lock()
	defer m.mu.Unlock()
	var found *tls.Certificate
	name := ""
	for _, q := range m.proxies {
		q.mu.Lock()
		cert := q.tlsCert
		q.mu.Unlock()
		// The first identity in name order: the same stranger at every probe.
		if cert != nil && q.identity != p.identity && (found == nil || q.identity < name) {
			found, name = cert, q.identity
		}
	}
	if found == nil {
		return nil, errors.New("no proxy of another identity has a certificate")
	}
	return found, nil
}
