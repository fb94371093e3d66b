package meshsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// TestProxyFaults checks the admin-port faults without a cluster: RefuseTLS closes at once, Hang
// holds the connection (counted) until the fault is cleared, and a pod's fault overrides its
// Deployment's.
func TestProxyFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &Mesh{}
	a := &adminServer{ctx: ctx}
	p := &proxy{mesh: m, pod: PodRef{Namespace: "ns", Name: "web-1", UID: types.UID("u1")}, workload: "web", done: make(chan struct{})}

	conn := func() (server, client net.Conn) { return net.Pipe() }
	taken := func(f func() bool) <-chan bool {
		ch := make(chan bool, 1)
		go func() { ch <- f() }()
		return ch
	}
	const wait = 10 * time.Second

	s, c := conn()
	if a.misbehave(s, p) {
		t.Fatal("a healthy proxy's connection was taken")
	}
	_ = s.Close()
	_ = c.Close()

	m.SetWorkloadProxyFault("ns", "web", ProxyFaultRefuseTLS)
	s, c = conn()
	if !a.misbehave(s, p) {
		t.Fatal("RefuseTLS did not take the connection")
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("RefuseTLS: read %v, want EOF", err)
	}

	m.SetProxyFault(p.pod.UID, ProxyFaultHang) // overrides the Deployment's RefuseTLS
	s, c = conn()
	done := taken(func() bool { return a.misbehave(s, p) })
	if err := poll.Until(ctx, wait, "the connection to hang", func(context.Context) (bool, error) {
		return m.HungConnections(p.pod.UID) == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	m.SetWorkloadProxyFault("ns", "web", ProxyFaultNone) // the pod's own fault still holds
	select {
	case <-done:
		t.Fatal("Hang released the connection while the pod's fault held")
	default:
	}
	m.SetProxyFault(p.pod.UID, ProxyFaultNone)
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("Hang returned the connection to be served")
		}
	case <-time.After(wait):
		t.Fatal("clearing the fault did not release the hung connection")
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("released connection: read %v, want EOF", err)
	}
	if n := m.HungConnections(p.pod.UID); n != 0 {
		t.Fatalf("%d hung connections after release", n)
	}

	// A proxy that stops releases its hung connections.
	m.SetProxyFault(p.pod.UID, ProxyFaultHang)
	s, _ = conn()
	done = taken(func() bool { return a.misbehave(s, p) })
	close(p.done) // as stop does (stop itself needs the oracle)
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("stopping the proxy did not release the hung connection")
	}
}

// TestImpostorChainsAreRejectedByTheProbe: a proxy whose admin port presents another identity's
// live chain (with that proxy's key), or its own chain without its key, is rejected by the
// operator's own probe (probe.ReadChain) as what it is; healthy, the same proxy is read.
func TestImpostorChainsAreRejectedByTheProbe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "identity.linkerd.cluster.local"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	roots := &rootSet{pool: x509.NewCertPool()}
	roots.pool.AddCert(ca)
	m := &Mesh{proxies: map[types.UID]*proxy{}}
	certified := func(uid, identity string) *proxy {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(m.proxies) + 2)), Subject: pkix.Name{CommonName: identity},
			DNSNames: []string{identity}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		p := &proxy{mesh: m, pod: PodRef{Namespace: "ns", Name: uid, UID: types.UID(uid)}, identity: identity, key: key, roots: roots,
			tlsCert: &tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}, done: make(chan struct{})}
		m.proxies[p.pod.UID] = p
		return p
	}
	const webID, voteID = "web.ns.serviceaccount.identity.linkerd.cluster.local", "vote.ns.serviceaccount.identity.linkerd.cluster.local"
	web := certified("web-1", webID)
	certified("vote-1", voteID)
	a := &adminServer{ctx: ctx}
	// probeWeb reads web's admin port with the operator's probe, the connection served as the
	// admin server serves it: faults first, then the proxy's own TLS.
	probeWeb := func() ([]*x509.Certificate, error) {
		dial := func(context.Context, string, string) (net.Conn, error) {
			s, c := net.Pipe()
			go func() {
				defer s.Close()
				if !a.misbehave(s, web) {
					_ = tls.Server(s, web.tlsConfig()).Handshake()
				}
			}()
			return c, nil
		}
		return probe.ReadChain(ctx, dial, "10.0.0.1:4191", webID, 10*time.Second)
	}
	if chain, err := probeWeb(); err != nil || len(chain) == 0 || chain[0].DNSNames[0] != webID {
		t.Fatalf("healthy proxy: chain %v, err %v; want its own chain", chain, err)
	}
	for _, c := range []struct {
		fault ProxyFault
		proof bool
		want  string
	}{
		{ProxyFaultForeignChain, false, "presents identity " + voteID + ", expected " + webID},
		{ProxyFaultUnprovenChain, true, "presents a certificate for " + webID + " without proving it holds its key"},
	} {
		m.SetProxyFault(web.pod.UID, c.fault)
		chain, err := probeWeb()
		var rejected *probe.ChainRejectedError
		if !errors.As(err, &rejected) || (rejected.Proof != nil) != c.proof || !strings.Contains(err.Error(), c.want) || chain != nil {
			t.Errorf("%s: chain %d certificates, err %v; want a rejection: %q", c.fault, len(chain), err, c.want)
		}
	}
}
