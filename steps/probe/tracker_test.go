package probe

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// raceBed is a CertTracker over a podindex.Index whose probes of the pods at blockedIP wait, once
// dialing, until release is closed, and then reach the admin port they were given. Every probe
// accounted for is reported on probed.
type raceBed struct {
	t       *testing.T
	index   *podindex.Index
	tracker *CertTracker
	dialing chan string   // the address of a blocked probe, once it dials
	release chan struct{} // closed: blocked probes go on
	probed  chan [2]string
	seen    map[[2]string]bool // probes reported on probed, by pod key and UID
	guard   context.Context
}

const blockedIP = "127.0.0.3"

func newRaceBed(t *testing.T) *raceBed {
	b := &raceBed{t: t, dialing: make(chan string, 16), release: make(chan struct{}), probed: make(chan [2]string, 1024), seen: map[[2]string]bool{}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, _ := net.SplitHostPort(addr); host == blockedIP {
			b.dialing <- addr
			select {
			case <-b.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	b.index = podindex.New(func(old, cur *podindex.Pod) { b.tracker.PodChanged(old, cur) })
	// The timeout only bounds a probe that would hang: the blocked probe waits on release.
	b.tracker = NewCertTracker(b.index, dial, 4, time.Minute, nil)
	b.tracker.probed = func(key, uid string) { b.probed <- [2]string{key, uid} }
	// A guard against hanging, not a measure.
	var stop context.CancelFunc
	b.guard, stop = context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(stop)
	return b
}

func (b *raceBed) run() {
	ctx, cancel := context.WithCancel(b.t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.tracker.Run(ctx)
	}()
	b.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitProbed waits until the probe of that pod incarnation was accounted for.
func (b *raceBed) waitProbed(key, uid string) {
	b.t.Helper()
	for want := [2]string{key, uid}; !b.seen[want]; {
		select {
		case got := <-b.probed:
			b.seen[got] = true
		case <-b.guard.Done():
			b.t.Fatalf("pod %s (UID %s) was never probed; certificates: %+v", key, uid, b.tracker.Certificates())
		}
	}
}

func (b *raceBed) waitDialing() {
	b.t.Helper()
	select {
	case <-b.dialing:
	case <-b.guard.Done():
		b.t.Fatal("the blocked probe never dialed")
	}
}

func meshedPod(ns, name, uid, ip string, port int32, identity string) *podindex.Pod {
	return &podindex.Pod{Namespace: ns, Name: name, UID: uid, Workload: ns + "/StatefulSet/" + strings.Split(name, "-")[0],
		Meshed: true, Alive: true, Running: true, IP: ip, AdminPort: port, Identity: identity}
}

// TestCertTrackerForgetsAPodDeletedWhileProbed: a pod's probe is under way (it reads a
// certificate on the new anchor's path) when the pod is deleted. The only pod left presents a
// certificate from the old anchor's issuer: the convergence must not be done, and the tracker must keep
// nothing of the deleted pod.
func TestCertTrackerForgetsAPodDeletedWhileProbed(t *testing.T) {
	oldAnchor, oldAnchorKey := newCert(t, "root-old", true, nil, nil)
	newAnchor, newAnchorKey := newCert(t, "root-new", true, nil, nil)
	oldIssuer, oldKey := newCert(t, "identity-old", true, oldAnchor, oldAnchorKey)
	newIssuer, newKey := newCert(t, "identity-new", true, newAnchor, newAnchorKey)
	const identity = "default.app.serviceaccount.identity.linkerd.cluster.local"
	oldPort := serveAdmin(t, identity, oldIssuer, oldKey)
	newPort := serveAdmin(t, identity, newIssuer, newKey)

	b := newRaceBed(t)
	b.tracker.SetActive(newAnchor, true)
	b.run()
	live := meshedPod("app", "live-0", "live", "127.0.0.1", oldPort, identity)
	gone := meshedPod("app", "gone-0", "gone", blockedIP, newPort, identity)
	b.index.Upsert(live)
	b.index.Upsert(gone)
	b.waitDialing()
	b.index.Delete(gone.Key())
	close(b.release)
	b.waitProbed(gone.Key(), gone.UID)
	b.waitProbed(live.Key(), live.UID)

	c := b.tracker.Certificates()
	if c.Done() || c.Converged != 0 || c.Target != 1 {
		t.Errorf("certificates = %d of %d (done %v); want 0 of 1: the pod on the new issuer is gone, the one left is on the old issuer",
			c.Converged, c.Target, c.Done())
	}
	b.tracker.mu.Lock()
	defer b.tracker.mu.Unlock()
	if tp := b.tracker.live[gone.UID]; tp != nil {
		t.Errorf("the deleted pod left an entry (%+v)", tp)
	}
}

// TestCertTrackerProbesAPodReplacedUnderTheSameName: a StatefulSet's pod is probed (it reads a
// certificate on the new anchor's path) while it is deleted and recreated under the same name, as
// a StatefulSet rollout does. The new pod presents a certificate from the old anchor's issuer: it must be
// probed itself and counted behind, never inherit its predecessor's result.
func TestCertTrackerProbesAPodReplacedUnderTheSameName(t *testing.T) {
	oldAnchor, oldAnchorKey := newCert(t, "root-old", true, nil, nil)
	newAnchor, newAnchorKey := newCert(t, "root-new", true, nil, nil)
	oldIssuer, oldKey := newCert(t, "identity-old", true, oldAnchor, oldAnchorKey)
	newIssuer, newKey := newCert(t, "identity-new", true, newAnchor, newAnchorKey)
	const identity = "db.data.serviceaccount.identity.linkerd.cluster.local"
	oldPort := serveAdmin(t, identity, oldIssuer, oldKey)
	newPort := serveAdmin(t, identity, newIssuer, newKey)

	for _, gap := range []bool{true, false} {
		t.Run(fmt.Sprintf("pending=%v", gap), func(t *testing.T) {
			b := newRaceBed(t)
			b.tracker.SetActive(newAnchor, true)
			b.run()
			first := meshedPod("data", "db-0", "first", blockedIP, newPort, identity)
			b.index.Upsert(first)
			b.waitDialing()
			b.index.Delete(first.Key())
			second := meshedPod("data", "db-0", "second", "127.0.0.1", oldPort, identity)
			if gap {
				// The replacement exists before it runs (created, then scheduled), and runs only
				// once its predecessor's probe was accounted for.
				pending := *second
				pending.Running, pending.IP = false, ""
				b.index.Upsert(&pending)
			} else {
				b.index.Upsert(second)
			}
			close(b.release)
			b.waitProbed(first.Key(), first.UID)
			if gap {
				b.index.Upsert(second)
			}
			b.waitProbed(second.Key(), second.UID)

			c := b.tracker.Certificates()
			if c.Converged != 0 || c.Target != 1 {
				t.Fatalf("certificates = %d of %d; want 0 of 1: the replacement presents the old issuer's certificate", c.Converged, c.Target)
			}
			if len(c.Pods) != 1 || !strings.Contains(c.Pods[0].Reason, "certificate issued by "+steps.Fingerprint(oldIssuer)[:12]) {
				t.Errorf("pods behind = %+v; want db-0 on the old issuer", c.Pods)
			}
		})
	}
}

// TestCertTrackerCountsEveryIssuerOfTheNewAnchor: pods on the new anchor's issuer converged, then
// cert-manager renews the issuer again under the same anchor. The pods on the previous issuer
// still chain to the new anchor: they stay converged, and a pod started on the renewed issuer
// converges too; the pod on the old anchor's issuer stays behind.
func TestCertTrackerCountsEveryIssuerOfTheNewAnchor(t *testing.T) {
	oldAnchor, oldAnchorKey := newCert(t, "root-old", true, nil, nil)
	newAnchor, newAnchorKey := newCert(t, "root-new", true, nil, nil)
	oldIssuer, oldKey := newCert(t, "identity-old", true, oldAnchor, oldAnchorKey)
	first, firstKey := newCert(t, "identity-new", true, newAnchor, newAnchorKey)
	second, secondKey := newCert(t, "identity-new-renewed", true, newAnchor, newAnchorKey)
	const identity = "web.app.serviceaccount.identity.linkerd.cluster.local"
	oldPort := serveAdmin(t, identity, oldIssuer, oldKey)
	firstPort := serveAdmin(t, identity, first, firstKey)
	secondPort := serveAdmin(t, identity, second, secondKey)
	state := func(issuer *x509.Certificate) *steps.State {
		return &steps.State{
			Anchor:   steps.Source{Found: true, Cert: newAnchor},
			Previous: steps.Source{Found: true, Cert: oldAnchor},
			Issuer:   steps.Source{Found: true, Cert: issuer},
		}
	}

	b := newRaceBed(t)
	b.tracker.SetActive(state(first).CertificateRoot(), true)
	b.run()
	pods := []*podindex.Pod{
		meshedPod("app", "web-0", "a", "127.0.0.1", firstPort, identity),
		meshedPod("app", "web-1", "b", "127.0.0.1", firstPort, identity),
		meshedPod("app", "legacy-0", "c", "127.0.0.1", oldPort, identity),
	}
	for _, p := range pods {
		b.index.Upsert(p)
	}
	for _, p := range pods {
		b.waitProbed(p.Key(), p.UID)
	}
	if c := b.tracker.Certificates(); c.Converged != 2 || c.Target != 3 {
		t.Fatalf("on the first new-anchor issuer: %d of %d, want 2 of 3", c.Converged, c.Target)
	}

	b.tracker.SetActive(state(second).CertificateRoot(), true)
	if c := b.tracker.Certificates(); c.Converged != 2 || c.Target != 3 {
		t.Errorf("once the issuer was renewed again: %d of %d, want still 2 of 3", c.Converged, c.Target)
	}
	fresh := meshedPod("app", "web-2", "d", "127.0.0.1", secondPort, identity)
	b.index.Upsert(fresh)
	b.waitProbed(fresh.Key(), fresh.UID)
	c := b.tracker.Certificates()
	if c.Converged != 3 || c.Target != 4 {
		t.Errorf("with a pod on the renewed issuer: %d of %d, want 3 of 4", c.Converged, c.Target)
	}
	if len(c.Pods) != 1 || c.Pods[0].Name != "legacy-0" {
		t.Errorf("pods behind = %+v, want legacy-0 alone", c.Pods)
	}
	// Whatever the root, the live chains are every chain presented, with its pods.
	got := map[string]string{}
	for _, lc := range b.tracker.LiveChains() {
		got[steps.Fingerprint(lc.Certs[0])] = fmt.Sprintf("%d %s", lc.Pods, lc.Example)
	}
	want := map[string]string{steps.Fingerprint(oldIssuer): "1 app/legacy-0", steps.Fingerprint(first): "2 app/web-0", steps.Fingerprint(second): "1 app/web-2"}
	if !maps.Equal(got, want) {
		t.Errorf("live chains %v, want %v", got, want)
	}
}
