package multicluster

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestMulticlusterRemoteUnreachableAndOperatorKilled rotates a linked pair, west leading, and at
// each of west's remote gates, while west waits there on east: kills west's operator (SIGKILL;
// a new one takes over, as its Deployment would start it), then stops east's apiserver. West
// stays parked, now saying it cannot read east, and writes nothing. East's own operator loses
// its leader lease meanwhile and exits; once east's apiserver is back its new operator and
// west's resume, and the rotation completes in both clusters with 0 mTLS violations across
// the linked meshes.
func TestMulticlusterRemoteUnreachableAndOperatorKilled(t *testing.T) {
	ctx, cancel, p := pairTest(t, chartSet)
	defer cancel()
	west, east := p.west, p.east

	// atGate kills west's operator and makes east unreachable while west is parked at step on
	// east for reason; it returns once east is back and west parked on the same reason again.
	atGate := func(step, reason string) {
		t.Helper()
		west.wait(t, ctx, "parked at "+step, parkedOn(step, "east", reason))
		before := west.writes(t, ctx)
		west.op.kill()
		eastOp := east.op.current()
		if err := east.c.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		// West's new operator may first report east as not read yet (the same reason), until its
		// first read of east fails: wait for the message that says east cannot be read.
		unreachable := parkedOn(step, "east", steps.ReasonRemoteUnreadable)
		const want = "cluster east: cannot read its TrustAnchorRotation cluster (Link linkerd-multicluster/east)"
		west.wait(t, ctx, "parked, saying "+want, func(tar *v1alpha1.TrustAnchorRotation) bool {
			return unreachable(tar) && strings.Contains(tar.Status.BlockingMessage, want)
		})
		// East's operator cannot renew its lease and gives up leadership: it exits, as it would
		// in a pod, and the keeper starts it again.
		select {
		case <-eastOp.Done():
			t.Logf("east's operator exited with its apiserver down: %s", lastLine(eastOp.LogTail(3)))
		case <-time.After(time.Minute):
			t.Fatal("east's operator still runs a minute after its apiserver stopped")
		}
		if err := east.c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		west.wait(t, ctx, "parked on east again, east back", parkedOn(step, "east", reason))
		if after := west.writes(t, ctx); after != before {
			t.Errorf("west wrote while parked at %s: %+v, then %+v", step, before, after)
		}
	}

	newAnchor := p.renewAnchorInWest(t, ctx)
	atGate(steps.StepWaitForRemoteTrustRoots, steps.ReasonRemoteAnchorNotReceived)

	p.anchorToEast(t, ctx)
	east.waitInjectors(t, ctx) // east's simulator may still be catching up after the outage
	east.env.RestartApps()
	for _, l := range []*linked{west, east} {
		l.waitPhase(t, ctx, v1alpha1.PhaseWaitingForIdentityRotation)
	}

	p.issuerInWest(t, ctx)
	atGate(steps.StepWaitForRemoteCertificates, steps.ReasonRemoteCertificatesBehind)

	p.finish(t, ctx, newAnchor)
	if n := identityRestarts(t, ctx, west); n != 1 {
		t.Errorf("west's restart-identity acted %d time(s), want 1: the operators killed at the gates repeat no act", n)
	}
	t.Logf("operator processes: west %d, east %d", west.op.processes(), east.op.processes())
	if west.op.processes() < 3 || east.op.processes() < 3 {
		t.Errorf("operator processes: west %d, east %d; want each replaced at both gates", west.op.processes(), east.op.processes())
	}
	p.checkOracle(t)
}

// TestMulticlusterRemoteMisconfigured rotates west while east is not fit to be waited on: its
// operator absent and its TrustAnchorRotation deleted, then recreated but with no operator to
// report on it, then its remote-access grant revoked, then its trust anchor renewed on its own
// (not copied from west: another anchor pair). Each time west parks at its first remote gate
// with a message naming east and saying what is wrong, and writes nothing: its trust-roots
// ConfigMap, its identity Deployment and its previous anchor stay as they were when it parked.
// 0 mTLS violations across the linked meshes.
func TestMulticlusterRemoteMisconfigured(t *testing.T) {
	ctx, cancel, p := pairTest(t, chartSet)
	defer cancel()
	west, east := p.west, p.east
	gate := steps.StepWaitForRemoteTrustRoots

	// East's operator is gone and so is its TrustAnchorRotation.
	east.op.stop()
	eastTAR, err := east.env.TARs.Get(ctx, steps.DefaultRotationName)
	if err != nil {
		t.Fatal(err)
	}
	if err := east.env.TARs.Delete(ctx, steps.DefaultRotationName); err != nil {
		t.Fatal(err)
	}
	p.renewAnchorInWest(t, ctx)
	tar := west.wait(t, ctx, "parked: east has no TrustAnchorRotation", parkedOn(gate, "east", steps.ReasonRemoteRotationMissing))
	wantMessage(t, tar, "cluster east has no TrustAnchorRotation cluster: install the trust-rotation operator there")
	frozen := west.writes(t, ctx)
	checkFrozen := func(what string) {
		t.Helper()
		if now := west.writes(t, ctx); now != frozen {
			t.Errorf("west wrote while parked (%s): %+v, then %+v", what, frozen, now)
		}
	}

	// Recreated, with no operator to report on it.
	recreated := &v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: eastTAR.Name}, Spec: eastTAR.Spec}
	if _, err := east.env.TARs.Create(ctx, recreated, "kubectl-create"); err != nil {
		t.Fatal(err)
	}
	tar = west.wait(t, ctx, "parked: east's operator does not report", parkedOn(gate, "east", steps.ReasonRemoteOperatorSilent))
	wantMessage(t, tar, "cluster east: its TrustAnchorRotation cluster has no up-to-date report: is its trust-rotation operator running?")
	checkFrozen("east's operator absent")

	// East's remote-access grant revoked.
	crbs := east.c.Kube().RbacV1().ClusterRoleBindings()
	list, err := crbs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for _, crb := range list.Items {
		if strings.HasSuffix(crb.Name, "-remote-access") {
			if err := crbs.Delete(ctx, crb.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			revoked++
		}
	}
	if revoked == 0 {
		t.Fatal("east has no remote-access ClusterRoleBinding")
	}
	tar = west.wait(t, ctx, "parked: east denies the read", parkedOn(gate, "east", steps.ReasonRemoteUnreadable))
	wantMessage(t, tar, "cluster east: cannot read its TrustAnchorRotation cluster (Link linkerd-multicluster/east)")
	wantMessage(t, tar, "forbidden")
	checkFrozen("east denies the read")
	// The grant back, with east's chart: helm's release still holds it.
	for _, crb := range list.Items {
		if strings.HasSuffix(crb.Name, "-remote-access") {
			crb.ResourceVersion, crb.UID = "", ""
			if _, err := crbs.Create(ctx, &crb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// East's anchor renewed on its own: another anchor pair. Its operator, back, starts a
	// rotation of its own onto it and reports the pair it is on.
	unrelated := writeUnrelatedAnchor(t, ctx, east)
	east.op.resume()
	east.wait(t, ctx, "rotating onto its own anchor", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return len(tar.Status.SourceFingerprints) == 2 && tar.Status.SourceFingerprints[0].Fingerprint == steps.Fingerprint(unrelated)
	})
	tar = west.wait(t, ctx, "parked: east is on another anchor pair", parkedOn(gate, "east", steps.ReasonRemoteAnchorsDiffer))
	wantMessage(t, tar, "cluster east is on trust anchors [")
	wantMessage(t, tar, "linked clusters must share the trust anchor")
	checkFrozen("east on another anchor pair")
	if n := identityRestarts(t, ctx, west); n != 0 {
		t.Errorf("west restarted identity %d time(s) while parked", n)
	}
	p.checkOracle(t)
}

// TestMulticlusterRotationWithoutRemoteGates is the true positive of the remote gates: the same
// linked pair, but the operators installed with linked clusters off (the chart's default,
// multicluster.enabled=false), each rotating as if its cluster were alone. West renews the
// anchor and its issuer and restarts its workloads onto new-anchor certificates while east
// still trusts only the old anchor: the oracle sees east's pods reject west's chains.
func TestMulticlusterRotationWithoutRemoteGates(t *testing.T) {
	ctx, cancel, p := pairTest(t, nil)
	defer cancel()
	west := p.west
	p.checkOracle(t) // mTLS holds across the link before the rotation

	p.renewAnchorInWest(t, ctx)
	west.waitPhase(t, ctx, v1alpha1.PhaseWaitingForIdentityRotation)
	p.issuerInWest(t, ctx)

	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	v, err := p.oracle.WaitForViolation(wctx, p.start)
	if err != nil {
		t.Fatalf("no mTLS violation across the link with the remote gates off: %v", err)
	}
	t.Logf("first violation: %s", v)
	vs := p.oracle.ViolationsSince(p.start)
	for _, v := range vs {
		if v.Server.Cluster != "west" || v.Client.Cluster != "east" {
			t.Errorf("violation %s: want only east's pods rejecting west's new-anchor chains", v)
		}
	}
	t.Logf("%d violation episode(s), all east rejecting west; oracle: %+v", len(vs), p.oracle.Status())
}

func wantMessage(t *testing.T, tar *v1alpha1.TrustAnchorRotation, want string) {
	t.Helper()
	if !strings.Contains(tar.Status.BlockingMessage, want) {
		t.Errorf("blocking message %q: want it to hold %q", tar.Status.BlockingMessage, want)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// writeUnrelatedAnchor puts a new self-signed trust anchor of its own (not west's) in l's
// trust-anchor Secret, as if l's anchor had been renewed on its own, and returns it.
func writeUnrelatedAnchor(t *testing.T, ctx context.Context, l *linked) *x509.Certificate {
	t.Helper()
	cert, crt, key, err := pki.SelfSigned("root.linkerd.cluster.local", true, time.Now().Add(365*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	secrets := l.c.Kube().CoreV1().Secrets(pki.DefaultCertManagerNamespace)
	sec, err := secrets.Get(ctx, pki.DefaultTrustAnchor, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{
		corev1.TLSCertKey: crt, "ca.crt": crt,
		corev1.TLSPrivateKeyKey: key,
	}
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cert
}
