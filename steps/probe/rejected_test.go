package probe

import (
	"crypto/x509"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// rejectedBed is three pods on the new anchor's issuer: web-0 presents its own chain; on web-1's
// address (web-1 runs under the same ServiceAccount, so with the same identity) a server presents
// web-0's real chain, read from its admin port, without its key; on db-0's address a server
// presents web-0's chain with its key, which names another identity than db-0's.
type rejectedBed struct {
	anchor             *x509.Certificate
	web0, web1, db0    *podindex.Pod
	webIdentity, dbIDs string
}

func newRejectedBed(t *testing.T) *rejectedBed {
	t.Helper()
	anchor, anchorKey := newCert(t, "root-new", true, nil, nil)
	issuer, issuerKey := newCert(t, "identity-new", true, anchor, anchorKey)
	const webIdentity = "web.app.serviceaccount.identity.linkerd.cluster.local"
	const dbIdentity = "db.app.serviceaccount.identity.linkerd.cluster.local"
	leaf, leafKey := newCert(t, webIdentity, false, issuer, issuerKey)
	_, strangerKey := newCert(t, "stranger", false, nil, nil)
	chain := []*x509.Certificate{leaf, issuer}
	port := func(addr string) int32 {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	return &rejectedBed{
		anchor:      anchor,
		web0:        meshedPod("app", "web-0", "w0", "127.0.0.1", port(tlsServer(t, webIdentity, chain, leafKey, nil)), webIdentity),
		web1:        meshedPod("app", "web-1", "w1", "127.0.0.1", port(tlsServer(t, webIdentity, chain, strangerKey, nil)), webIdentity),
		db0:         meshedPod("app", "db-0", "d0", "127.0.0.1", port(tlsServer(t, dbIdentity, chain, leafKey, nil)), dbIdentity),
		webIdentity: webIdentity, dbIDs: dbIdentity,
	}
}

func (b *rejectedBed) pods() []*podindex.Pod { return []*podindex.Pod{b.web0, b.web1, b.db0} }

// check asserts what a convergence says of the bed's pods: web-0 alone converged, the two
// others named first, each with what was wrong.
func (b *rejectedBed) check(t *testing.T, c steps.Convergence, live []steps.LiveChain) {
	t.Helper()
	if c.Converged != 1 || c.Target != 3 || c.Rejected != 2 {
		t.Errorf("converged %d of %d, %d rejected; want 1 of 3 (web-0), 2 rejected", c.Converged, c.Target, c.Rejected)
	}
	if len(c.Pods) != 2 {
		t.Fatalf("pods behind %+v, want db-0 and web-1", c.Pods)
	}
	if p, want := c.Pods[0], "presents identity "+b.webIdentity+", expected "+b.dbIDs; p.Name != "db-0" || p.Reason != want {
		t.Errorf("first pod behind %+v, want db-0: %q", p, want)
	}
	if p, want := c.Pods[1], "presents a certificate for "+b.webIdentity+" without proving it holds its key (tls: invalid signature by the server certificate"; p.Name != "web-1" || !strings.HasPrefix(p.Reason, want) {
		t.Errorf("second pod behind %+v, want web-1: %q…", p, want)
	}
	if len(live) != 1 || live[0].Pods != 1 || live[0].Example != "app/web-0" {
		t.Errorf("live chains %+v, want web-0's alone", live)
	}
}

// TestProbeAllRejectsChainsThatAreNotThePods: the CLI's probes count neither pod whose address
// answers with a chain that is not its own.
func TestProbeAllRejectsChainsThatAreNotThePods(t *testing.T) {
	b := newRejectedBed(t)
	results := ProbeAll(t.Context(), nil, b.pods(), 2, 5*time.Second, nil)
	check := NewCertificateCheck(b.anchor)
	b.check(t, check.Convergence(b.pods(), results), LiveChains(b.pods(), results))
	if why := check.Problem(b.web1, new(results[b.web1.Key()])); strings.HasPrefix(why, "probe failed") {
		t.Errorf("web-1: %q, want the rejected chain named as what it is", why)
	}
}

// TestCertTrackerRejectsChainsThatAreNotThePods: the operator's probes count neither pod whose
// address answers with a chain that is not its own, and forget the rejection with the pod.
func TestCertTrackerRejectsChainsThatAreNotThePods(t *testing.T) {
	b := newRejectedBed(t)
	r := newRaceBed(t)
	r.tracker.SetActive(b.anchor, true)
	r.run()
	for _, p := range b.pods() {
		r.index.Upsert(p)
	}
	for _, p := range b.pods() {
		r.waitProbed(p.Key(), p.UID)
	}
	b.check(t, r.tracker.Certificates(), r.tracker.LiveChains())

	r.index.Delete(b.db0.Key())
	c := r.tracker.Certificates()
	if c.Rejected != 1 || len(c.Pods) != 1 || c.Pods[0].Name != "web-1" {
		t.Errorf("once db-0 is gone: %d rejected, pods behind %+v; want web-1 alone", c.Rejected, c.Pods)
	}
}
