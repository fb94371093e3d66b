package steps

import (
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

type remoteOpt func(*Remote)

// remoteCluster is a linked cluster read a second ago, Synced on the old anchor: what a remote
// looks like before the new anchor reaches it.
func remoteCluster(p pki, now time.Time, opts ...remoteOpt) Remote {
	old := Fingerprint(p.oldAnchor.cert)
	r := Remote{
		Name: "east", Source: "Link linkerd-multicluster/east", RotationName: "cluster", Found: true, Generation: 1,
		LastObserved: now.Add(-time.Second),
		Status: v1alpha1.TrustAnchorRotationStatus{
			Phase: v1alpha1.PhaseSynced, ObservedGeneration: 1, PreviousAnchorFingerprint: old,
			SourceFingerprints:   []v1alpha1.SourceFingerprint{{Fingerprint: old, Name: "linkerd-trust-anchor"}, {Fingerprint: old, Name: "linkerd-previous-anchor"}},
			Checkpoint:           &v1alpha1.Checkpoint{Step: StepDetectAnchorRotation},
			TrustBundle:          &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 5, TargetPods: 5, Anchors: []string{old}},
			WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 7, TargetPods: 7, Anchors: []string{old}},
		},
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// received: the remote's anchor Secret holds the new anchor; it rotates, its bundle expanded
// with converged of 5 pods on it.
func received(p pki, converged int32) remoteOpt {
	return func(r *Remote) {
		nw, old := Fingerprint(p.newAnchor.cert), Fingerprint(p.oldAnchor.cert)
		r.Status.Phase = v1alpha1.PhasePropagatingTrustRoots
		r.Status.SourceFingerprints[0].Fingerprint = nw
		r.Status.Checkpoint = &v1alpha1.Checkpoint{Step: StepPropagateTrustRoots, Rotation: nw}
		state := v1alpha1.Converging
		if converged == 5 {
			state = v1alpha1.Converged
		}
		r.Status.TrustBundle = &v1alpha1.ConvergenceStatus{Status: state, ConvergedPods: converged, TargetPods: 5, Anchors: []string{nw, old}}
	}
}

// remoteCerts: the remote's issuer is on anchor a, with converged of 7 pods presenting its certificates.
func remoteCerts(a *testCA, converged int32) remoteOpt {
	return func(r *Remote) {
		state := v1alpha1.Converging
		if converged == 7 {
			state = v1alpha1.Converged
		}
		r.Status.Phase = v1alpha1.PhaseRenewingWorkloadCerts
		r.Status.WorkloadCertificates = &v1alpha1.ConvergenceStatus{Status: state, ConvergedPods: converged, TargetPods: 7, Anchors: []string{Fingerprint(a.cert)}}
	}
}

func TestCheckRemote(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	nw, old := Fingerprint(p.newAnchor.cert), Fingerprint(p.oldAnchor.cert)
	cases := map[string]struct {
		remote     Remote
		gate       RemoteGate
		wantReason string // "" means the remote lets the rotation pass
		wantInMsg  string
	}{
		"a remote whose credentials cannot be used holds both gates, naming the cluster and the problem": {
			remote: remoteCluster(p, now, func(r *Remote) {
				r.Problem = "Secret linkerd-multicluster/cluster-credentials-east not found"
			}, received(p, 5)),
			gate: GateTrustRoots, wantReason: ReasonRemoteUnreadable, wantInMsg: "cluster east: cannot read its TrustAnchorRotation cluster (Link linkerd-multicluster/east): Secret linkerd-multicluster/cluster-credentials-east not found",
		},
		"a remote never read yet holds the gate": {
			remote: remoteCluster(p, now, func(r *Remote) { r.LastObserved = time.Time{} }, received(p, 5)),
			gate:   GateTrustRoots, wantReason: ReasonRemoteUnreadable, wantInMsg: "has not been read yet",
		},
		"a remote without a TrustAnchorRotation holds the gate: its operator is absent": {
			remote: remoteCluster(p, now, func(r *Remote) { r.Found = false }),
			gate:   GateCertificates, wantReason: ReasonRemoteRotationMissing, wantInMsg: "cluster east has no TrustAnchorRotation cluster",
		},
		"a report read longer ago than the staleness bound holds the gate, though it said converged": {
			remote: remoteCluster(p, now, received(p, 5), func(r *Remote) { r.LastObserved = now.Add(-4 * time.Minute) }),
			gate:   GateTrustRoots, wantReason: ReasonRemoteReportStale, wantInMsg: "cluster east: its report was last read 4m0s ago (more than 3m0s)",
		},
		"a remote whose operator has not caught up with its spec holds the gate": {
			remote: remoteCluster(p, now, received(p, 5), func(r *Remote) { r.Generation = 2 }),
			gate:   GateTrustRoots, wantReason: ReasonRemoteOperatorSilent, wantInMsg: "is its trust-rotation operator running?",
		},
		"a remote with no status at all holds the gate": {
			remote: remoteCluster(p, now, func(r *Remote) { r.Status = v1alpha1.TrustAnchorRotationStatus{} }),
			gate:   GateTrustRoots, wantReason: ReasonRemoteOperatorSilent,
		},
		"a remote on another anchor pair holds the gate": {
			remote: remoteCluster(p, now, func(r *Remote) {
				r.Status.SourceFingerprints[0].Fingerprint = Fingerprint(p.stranger.cert)
			}),
			gate: GateTrustRoots, wantReason: ReasonRemoteAnchorsDiffer, wantInMsg: "linked clusters must share the trust anchor",
		},
		"a remote whose previous anchor is a stranger holds the gate": {
			remote: remoteCluster(p, now, received(p, 5), func(r *Remote) {
				r.Status.PreviousAnchorFingerprint = Fingerprint(p.stranger.cert)
				r.Status.SourceFingerprints[1].Fingerprint = Fingerprint(p.stranger.cert)
			}),
			gate: GateCertificates, wantReason: ReasonRemoteAnchorsDiffer,
		},
		"a remote that has not received the new anchor holds the gate, though its old bundle converged": {
			remote: remoteCluster(p, now),
			gate:   GateTrustRoots, wantReason: ReasonRemoteAnchorNotReceived, wantInMsg: "does not hold the new anchor " + ShortFingerprint(nw) + " yet (it holds " + ShortFingerprint(old) + ")",
		},
		"a remote whose pods are still injected with the old bundle holds the trust-roots gate": {
			remote: remoteCluster(p, now, received(p, 3)),
			gate:   GateTrustRoots, wantReason: ReasonRemoteTrustBundlePending, wantInMsg: "cluster east: 3 of 5 meshed pod(s) run with a trust bundle holding the new anchor",
		},
		"a converged count on a bundle without the new anchor means nothing": {
			remote: remoteCluster(p, now, received(p, 5), func(r *Remote) { r.Status.TrustBundle.Anchors = []string{old} }),
			gate:   GateTrustRoots, wantReason: ReasonRemoteTrustBundlePending, wantInMsg: "does not run with a bundle holding the new anchor",
		},
		"a remote whose data plane converged on the expanded bundle lets the trust-roots gate pass": {
			remote: remoteCluster(p, now, received(p, 5)),
			gate:   GateTrustRoots,
		},
		"a remote done rotating (the bundle reduced to the new anchor) lets both gates pass": {
			remote: remoteCluster(p, now, received(p, 5), remoteCerts(p.newAnchor, 7), func(r *Remote) {
				r.Status.PreviousAnchorFingerprint = nw
				r.Status.SourceFingerprints[1].Fingerprint = nw
				r.Status.TrustBundle.Anchors = []string{nw}
			}),
			gate: GateCertificates,
		},
		"a remote whose pods converged on the old anchor's certificates holds the certificates gate": {
			remote: remoteCluster(p, now, received(p, 5), remoteCerts(p.oldAnchor, 7)),
			gate:   GateCertificates, wantReason: ReasonRemoteCertificatesBehind, wantInMsg: "cluster east: 0 of 7 meshed pod(s) present a certificate on the new anchor",
		},
		"a remote with pods still on old certificates holds the certificates gate": {
			remote: remoteCluster(p, now, received(p, 5), remoteCerts(p.newAnchor, 4)),
			gate:   GateCertificates, wantReason: ReasonRemoteCertificatesBehind, wantInMsg: "4 of 7 meshed pod(s)",
		},
		"a remote whose pods all present new-anchor certificates lets the certificates gate pass": {
			remote: remoteCluster(p, now, received(p, 5), remoteCerts(p.newAnchor, 7)),
			gate:   GateCertificates,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reason, msg, ok := CheckRemote(tc.remote, tc.gate, nw, old, now, 0)
			if ok != (tc.wantReason == "") || reason != tc.wantReason || !strings.Contains(msg, tc.wantInMsg) {
				t.Fatalf("got ok=%v %s %q; want %q containing %q", ok, reason, msg, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

func TestRemoteGateSteps(t *testing.T) {
	p := newPKI(t)
	now := time.Now()
	north := func(r *Remote) { r.Name, r.Source = "north", "spec.remoteClusters" }
	cases := map[string]struct {
		step        string
		remotes     []Remote
		wantOutcome workflow.Outcome
		wantReason  string
		wantInMsg   string
	}{
		"without linked clusters the trust-roots gate passes at once": {
			step: StepWaitForRemoteTrustRoots, wantOutcome: workflow.Done, wantReason: "NoRemoteClusters",
		},
		"without linked clusters the certificates gate passes at once": {
			step: StepWaitForRemoteCertificates, wantOutcome: workflow.Done, wantReason: "NoRemoteClusters",
		},
		"one remote behind holds the gate, and the message names only the clusters that block": {
			step:        StepWaitForRemoteTrustRoots,
			remotes:     []Remote{remoteCluster(p, now, received(p, 5)), remoteCluster(p, now, north, received(p, 2))},
			wantOutcome: workflow.Wait, wantReason: ReasonRemoteTrustBundlePending, wantInMsg: "Waiting for linked clusters: cluster north: 2 of 5",
		},
		"every remote converged passes the gate": {
			step:        StepWaitForRemoteTrustRoots,
			remotes:     []Remote{remoteCluster(p, now, received(p, 5)), remoteCluster(p, now, north, received(p, 5))},
			wantOutcome: workflow.Done, wantReason: "RemoteClustersConverged", wantInMsg: "linked cluster(s) east, north",
		},
		"the certificates gate waits for every remote's certificates": {
			step:        StepWaitForRemoteCertificates,
			remotes:     []Remote{remoteCluster(p, now, received(p, 5), remoteCerts(p.newAnchor, 7)), remoteCluster(p, now, north, received(p, 5))},
			wantOutcome: workflow.Wait, wantReason: ReasonRemoteCertificatesBehind, wantInMsg: "cluster north",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := rotatingState(p, bundlePods(4, 4), issuer(p.newIssuer), certPods(4, 4))
			s.Remotes = tc.remotes
			d := stepNamed(t, tc.step).Observe(s, "")
			if d.Outcome != tc.wantOutcome || d.Reason != tc.wantReason || !strings.Contains(d.Message, tc.wantInMsg) {
				t.Fatalf("got %v %s %q; want %v %s containing %q", d.Outcome, d.Reason, d.Message, tc.wantOutcome, tc.wantReason, tc.wantInMsg)
			}
			if tc.wantOutcome == workflow.Wait && strings.Contains(d.Message, "cluster east") {
				t.Errorf("the message names east, which does not block: %q", d.Message)
			}
		})
	}
}

// TestMulticlusterRotation drives the whole workflow with one linked cluster and checks that it
// restarts identity only once the remote's data plane trusts the new anchor, and retires the
// old anchor only once the remote's pods present new-anchor certificates, waiting in
// WaitingForRemoteClusters meanwhile.
func TestMulticlusterRotation(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, bundlePods(4, 4), certPods(4, 4))
	s.Remotes = []Remote{remoteCluster(p, s.Now, received(p, 1))}
	w, _, advance := driveRotation(t, s)
	settle := func() workflow.Result {
		t.Helper()
		for range 20 {
			if res := advance(); !res.Acted {
				return res
			}
		}
		t.Fatal("no end to the acts")
		return workflow.Result{}
	}
	res := settle()
	if res.Checkpoint.Step != StepWaitForRemoteTrustRoots || res.Phase != string(v1alpha1.PhaseWaitingForRemoteClusters) ||
		!strings.Contains(res.Decision.Message, "cluster east: 1 of 5") {
		t.Fatalf("stopped at %s (%s): %s; want the trust-roots gate waiting on east", res.Checkpoint.Step, res.Phase, res.Decision.Message)
	}
	if w.restarts["linkerd-identity"] != 0 {
		t.Fatal("identity restarted before the remote data plane trusted the new anchor")
	}
	s.Remotes = []Remote{remoteCluster(p, s.Now, received(p, 5))}
	if res = settle(); res.Checkpoint.Step != StepWaitForIdentityIssuer || w.restarts["linkerd-identity"] != 1 {
		t.Fatalf("stopped at %s with restarts %v; want identity restarted and the issuer awaited", res.Checkpoint.Step, w.restarts)
	}
	s.Issuer = src("linkerd", "linkerd-identity-issuer", p.newIssuer)
	res = settle()
	if res.Checkpoint.Step != StepWaitForRemoteCertificates || res.Phase != string(v1alpha1.PhaseWaitingForRemoteClusters) ||
		res.Decision.Reason != ReasonRemoteCertificatesBehind {
		t.Fatalf("stopped at %s (%s): %s %s; want the certificates gate", res.Checkpoint.Step, res.Phase, res.Decision.Reason, res.Decision.Message)
	}
	if Fingerprint(s.Previous.Cert) != Fingerprint(p.oldAnchor.cert) {
		t.Fatal("the old anchor was retired before the remote's pods presented new-anchor certificates")
	}
	// The remote goes unreachable meanwhile: still waiting, now on that.
	s.Remotes[0] = remoteCluster(p, s.Now, received(p, 5), remoteCerts(p.newAnchor, 7), func(r *Remote) { r.Problem = "connection refused" })
	if res = settle(); res.Checkpoint.Step != StepWaitForRemoteCertificates || res.Decision.Reason != ReasonRemoteUnreadable {
		t.Fatalf("an unreachable remote let the gate pass: %s %s", res.Checkpoint.Step, res.Decision.Reason)
	}
	s.Remotes[0].Problem = ""
	res = settle()
	if res.Checkpoint.Step != StepRemoveOldTrustRoots || Fingerprint(s.Previous.Cert) != Fingerprint(p.newAnchor.cert) {
		t.Fatalf("stopped at %s (%s); want the old anchor retired", res.Checkpoint.Step, res.Decision.Message)
	}
}

// TestSingleClusterNeverWaitsForRemoteClusters: without linked clusters, no pass of the
// workflow stops in WaitingForRemoteClusters.
func TestSingleClusterNeverWaitsForRemoteClusters(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, bundlePods(0, 4), certPods(4, 4))
	_, _, advance := driveRotation(t, s)
	var stops []string
	for i := range 60 {
		res := advance()
		if res.Phase == string(v1alpha1.PhaseWaitingForRemoteClusters) {
			t.Fatalf("advance %d stopped at %s in WaitingForRemoteClusters", i, res.Checkpoint.Step)
		}
		stops = append(stops, res.Checkpoint.Step)
		switch res.Checkpoint.Step {
		case StepPropagateTrustRoots:
			s.TrustBundle = Convergence{Converged: 4, Target: 4}
		case StepWaitForIdentityIssuer:
			s.Issuer = src("linkerd", "linkerd-identity-issuer", p.newIssuer)
		case StepRemoveOldTrustRoots:
			s.TrustBundle = Convergence{Converged: 4, Target: 4}
		}
		if res.Completed {
			return
		}
	}
	t.Fatalf("the rotation did not complete: stopped at %v", stops)
}

func TestProjectRemoteClusters(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := rotatingState(p, bundlePods(4, 4))
	s.Now = now
	s.Remotes = []Remote{remoteCluster(p, now, received(p, 2))}
	res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepWaitForRemoteTrustRoots}, Phase: string(v1alpha1.PhaseWaitingForRemoteClusters)}
	st := Project(rotationSteps, v1alpha1.TrustAnchorRotationStatus{}, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, now)
	if len(st.RemoteClusters) != 1 {
		t.Fatalf("remoteClusters = %+v", st.RemoteClusters)
	}
	e := st.RemoteClusters[0]
	nw := Fingerprint(p.newAnchor.cert)
	if e.Name != "east" || e.Phase != v1alpha1.PhasePropagatingTrustRoots || e.Rotation != nw || e.TrustBundle.ConvergedPods != 2 ||
		len(e.Anchors) != 2 || e.Anchors[0] != nw || e.BlockingReason != ReasonRemoteTrustBundlePending || !e.LastObserved.Time.Equal(now.Add(-time.Second)) {
		t.Fatalf("remote entry = %+v", e)
	}
	// The published read time stays while nothing else changed and it is less than a minute
	// behind: linked operators watch each other's status.
	s.Remotes[0].LastObserved = now.Add(30 * time.Second)
	s.Now = now.Add(31 * time.Second)
	again := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now)
	if !again.RemoteClusters[0].LastObserved.Equal(e.LastObserved) {
		t.Errorf("lastObserved moved to %v with nothing else changed", again.RemoteClusters[0].LastObserved)
	}
	s.Remotes[0].LastObserved = now.Add(2 * time.Minute)
	s.Now = now.Add(2 * time.Minute)
	later := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now)
	if !later.RemoteClusters[0].LastObserved.Time.Equal(now.Add(2 * time.Minute)) {
		t.Errorf("lastObserved = %v, want it advanced once a minute behind", later.RemoteClusters[0].LastObserved)
	}
	s.Remotes[0] = remoteCluster(p, now, received(p, 5))
	s.Remotes[0].LastObserved = now.Add(10 * time.Second)
	s.Now = now.Add(10 * time.Second)
	moved := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now)
	if m := moved.RemoteClusters[0]; !m.LastObserved.Time.Equal(now.Add(10*time.Second)) || m.BlockingReason != "" {
		t.Errorf("a changed report: %+v, want the new read time and no blocking reason", m)
	}
	// Off the gates, nothing blocks; with no remote, no entries.
	res.Checkpoint.Step = StepRenewWorkloadCertificates
	if off := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now); off.RemoteClusters[0].BlockingReason != "" {
		t.Errorf("blocking reason off the gates: %+v", off.RemoteClusters[0])
	}
	s.Remotes = nil
	if none := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now); none.RemoteClusters != nil {
		t.Errorf("remoteClusters without remotes: %+v", none.RemoteClusters)
	}
}
