package multicluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// startThird starts one more cluster beside the pair, as startPair starts east: its own
// cert-manager, chart (chartSet), operator and simulated mesh with a gateway, its pods judged by
// the pair's oracle, and a copy of west's trust anchor. It links nothing and nothing links it yet.
func (p *pair) startThird(t *testing.T, ctx context.Context, name string) *linked {
	t.Helper()
	l := &linked{name: name, c: startCluster(t, ctx, name)}
	if _, err := pki.CopyAnchor(ctx, p.west.c.Kube(), l.c.Kube(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	opts := e2e.EnvOptions{
		Namespaces: 1, Deployments: 2, Replicas: 2, ChartSet: chartSet, Oracle: p.oracle, Gateway: true,
		ClusterName: name, PKI: pki.Options{CopiedAnchor: true},
	}
	l.env = e2e.NewEnv(t, ctx, l.c, opts, func(rel *charts.Release) *e2e.Operator {
		l.op = keep(t, ctx, l.name, rel)
		return l.op.current()
	})
	t.Logf("%s started; the oracle judges %d pods", name, p.oracle.Status().Pods)
	return l
}

// parkedOnlyOn: the rotation waits at step on cluster for reason, and on no other cluster: every
// other linked cluster's entry is clear and the blocking message names none of them.
func parkedOnlyOn(step, cluster, reason string) func(*v1alpha1.TrustAnchorRotation) bool {
	parked := parkedOn(step, cluster, reason)
	return func(tar *v1alpha1.TrustAnchorRotation) bool {
		if !parked(tar) {
			return false
		}
		for _, r := range tar.Status.RemoteClusters {
			if r.Name != cluster && (r.BlockingReason != "" || strings.Contains(tar.Status.BlockingMessage, "cluster "+r.Name)) {
				return false
			}
		}
		return true
	}
}

// TestMulticlusterThirdClusterLinkedAndUnlinked links a third cluster, north, to west in the
// middle of west's rotation, and later unlinks it. North runs on the shared (old) trust anchor
// with its own operator and mesh, linked to no cluster itself; one oracle judges every pod pair
// of the three meshes.
//
// Linked while west waits at its first remote gate on east, north holds that gate too: once east
// has caught up, west stays parked naming north alone (north has not received the new anchor)
// and writes nothing, until north receives the anchor and its data plane trusts it. At the
// second gate west waits on north's certificates once east's are renewed; north is then
// unlinked (its Link and credentials Secret deleted): west drops north from
// status.remoteClusters and from the gate, retires the old anchor and finishes. North renews its
// issuer before any data plane drops the old anchor, so that its pods, which the oracle still
// judges with the others, never present a chain a peer rejects. 0 mTLS violations over the
// three meshes.
func TestMulticlusterThirdClusterLinkedAndUnlinked(t *testing.T) {
	ctx, cancel, p := pairTest(t, chartSet)
	defer cancel()
	west, east := p.west, p.east
	north := p.startThird(t, ctx, "north")

	// West's rotation starts; it parks at its first remote gate on east, which lacks the anchor.
	newAnchor := p.renewAnchorInWest(t, ctx)
	west.wait(t, ctx, "parked: east has not received the new anchor",
		parkedOn(steps.StepWaitForRemoteTrustRoots, "east", steps.ReasonRemoteAnchorNotReceived))

	// North linked to west mid-rotation, as `linkerd multicluster link` does: west reads it and
	// holds the gate on it as well.
	link(t, ctx, west, north)
	tar := west.wait(t, ctx, "parked: north, just linked, has not received the new anchor",
		parkedOn(steps.StepWaitForRemoteTrustRoots, "north", steps.ReasonRemoteAnchorNotReceived))
	if r := remoteEntry(tar, "north"); r.Source != "Link linkerd-multicluster/north" {
		t.Errorf("west's entry of north: source %q, want the Link", r.Source)
	}
	frozen := west.writes(t, ctx)

	// East catches up; west stays parked on north alone, and writes nothing.
	p.anchorToEast(t, ctx)
	east.env.RestartApps()
	east.waitPhase(t, ctx, v1alpha1.PhaseWaitingForIdentityRotation)
	tar = west.wait(t, ctx, "parked on north alone, east caught up",
		parkedOnlyOn(steps.StepWaitForRemoteTrustRoots, "north", steps.ReasonRemoteAnchorNotReceived))
	wantMessage(t, tar, "cluster north")
	t.Logf("west parked on north alone: %s", tar.Status.BlockingMessage)
	if now := west.writes(t, ctx); now != frozen {
		t.Errorf("west wrote while parked on north: %+v, then %+v", frozen, now)
	}
	if n := identityRestarts(t, ctx, west); n != 0 {
		t.Fatalf("west restarted identity %d time(s) before north's data plane trusted the new anchor", n)
	}

	// North catches up: the anchor reaches it, its operator rotates, its workloads restart onto
	// the expanded bundle. West passes the gate.
	if _, err := pki.CopyAnchor(ctx, west.c.Kube(), north.c.Kube(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	north.waitPhase(t, ctx, v1alpha1.PhasePropagatingTrustRoots)
	northCaughtUp := time.Now()
	north.env.RestartApps()
	for _, l := range []*linked{west, north} {
		l.waitPhase(t, ctx, v1alpha1.PhaseWaitingForIdentityRotation)
	}
	if gate := eventTime(t, ctx, west, e2eReasonRemoteConverged, "step "+steps.StepWaitForRemoteTrustRoots+":"); gate.Before(northCaughtUp.Truncate(time.Second)) {
		t.Errorf("west passed the trust-roots gate at %s, before north's workloads were restarted at %s", gate, northCaughtUp)
	}

	// The second gate: west's and east's certificates move to the new anchor; west waits on
	// north's alone.
	p.issuerInWest(t, ctx)
	east.env.Renew(pki.DefaultLinkerdNamespace, pki.DefaultIdentityIssuer)
	east.waitPhase(t, ctx, v1alpha1.PhaseRenewingWorkloadCerts)
	east.env.RestartApps()
	east.waitPhase(t, ctx, v1alpha1.PhaseRemovingOldTrustRoots)
	tar = west.wait(t, ctx, "parked on north's certificates alone",
		parkedOnlyOn(steps.StepWaitForRemoteCertificates, "north", steps.ReasonRemoteCertificatesBehind))
	t.Logf("west parked on north alone: %s", tar.Status.BlockingMessage)
	if prev := west.env.SecretCert(pki.DefaultLinkerdNamespace, steps.DefaultPreviousAnchorSecret); steps.Fingerprint(prev) == steps.Fingerprint(newAnchor) {
		t.Fatal("west retired the old anchor while north's pods presented old-anchor certificates")
	}

	// North unlinked: west drops it, from its status and from the gate, and goes on.
	if err := meshsim.Unlink(ctx, west.c.RESTConfig(), "north"); err != nil {
		t.Fatal(err)
	}
	tar = west.wait(t, ctx, "north dropped, the old anchor retired", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return remoteEntry(tar, "north") == nil && tar.Status.Phase == v1alpha1.PhaseRemovingOldTrustRoots
	})
	if strings.Contains(tar.Status.BlockingMessage, "north") {
		t.Errorf("west's blocking message still names north: %q", tar.Status.BlockingMessage)
	}
	if r := remoteEntry(tar, "east"); r == nil {
		t.Error("west dropped east along with north")
	}
	t.Logf("north unlinked; west went on: remote clusters %d, phase %s", len(tar.Status.RemoteClusters), tar.Status.Phase)

	// North, unlinked but still judged with the others, renews its issuer before any workload
	// drops the old anchor; then every cluster's workloads restart onto the reduced bundle.
	north.env.Renew(pki.DefaultLinkerdNamespace, pki.DefaultIdentityIssuer)
	north.waitPhase(t, ctx, v1alpha1.PhaseRenewingWorkloadCerts)
	north.env.RestartApps()
	north.waitPhase(t, ctx, v1alpha1.PhaseRemovingOldTrustRoots)
	for _, l := range []*linked{west, east, north} {
		l.env.RestartApps()
	}
	for _, l := range []*linked{west, east, north} {
		tar := l.waitPhase(t, ctx, v1alpha1.PhaseSynced)
		if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(newAnchor) {
			t.Errorf("%s finished on previous anchor %s, want the new anchor", l.name, tar.Status.PreviousAnchorFingerprint)
		}
	}
	if n := identityRestarts(t, ctx, west); n != 1 {
		t.Errorf("west's restart-identity acted %d time(s), want 1", n)
	}
	p.checkOracle(t)
}
