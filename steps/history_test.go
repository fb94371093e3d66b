package steps

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// historyDriver moves a status's checkpoint the way the operator's writes do, through
// TrackHistory, with a clock.
type historyDriver struct {
	t     *testing.T
	st    v1alpha1.TrustAnchorRotationStatus
	spec  v1alpha1.TrustAnchorRotationSpec
	s     *State
	now   time.Time
	start time.Time
}

func newHistoryDriver(t *testing.T) *historyDriver {
	old, cur := anchorCA(t, "old"), anchorCA(t, "new")
	now := time.Date(2026, 6, 1, 12, 0, 0, 400_000_000, time.UTC)
	return &historyDriver{t: t, now: now, s: &State{Anchor: Source{Found: true, Cert: cur.cert}, Previous: Source{Found: true, Cert: old.cert}},
		st: v1alpha1.TrustAnchorRotationStatus{Checkpoint: &v1alpha1.Checkpoint{Step: StepDetectAnchorRotation}}}
}

// move writes checkpoint (step, token, acts) of the rotation started at d.start, after d
// elapsed, having passed the given steps.
func (d *historyDriver) move(elapsed time.Duration, step, token string, acts int32, jump *workflow.JumpRecord, passed ...string) {
	d.now = d.now.Add(elapsed)
	prev := d.st.Checkpoint.DeepCopy()
	cp := &v1alpha1.Checkpoint{Step: step, Token: token, Acts: acts}
	if !rotationSteps.named(step).Idle() {
		if d.start.IsZero() {
			d.start = d.now
		}
		t := metav1.NewTime(d.start)
		cp.Rotation, cp.StartTime = Fingerprint(d.s.Anchor.Cert), &t
	}
	d.st.Checkpoint = cp
	TrackHistory(rotationSteps, &d.st, prev, d.spec, d.s, jump, passed, d.now)
}

func (d *historyDriver) only() v1alpha1.RotationRecord {
	d.t.Helper()
	if len(d.st.History) != 1 {
		d.t.Fatalf("history holds %d entries, want 1: %+v", len(d.st.History), d.st.History)
	}
	return d.st.History[0]
}

func TestHistoryOpensWithTheRotationsFirstCheckpoint(t *testing.T) {
	d := newHistoryDriver(t)
	d.move(0, StepExpandTrustBundle, "t1", 1, nil)
	r := d.only()
	if r.Outcome != v1alpha1.RotationInProgress || r.Rotation != Fingerprint(d.s.Anchor.Cert) || r.From != Fingerprint(d.s.Previous.Cert) ||
		!r.StartTime.Time.Equal(d.start.Truncate(time.Second)) || r.FinishTime != nil {
		t.Errorf("opened entry: %+v", r)
	}
	if len(r.Phases) != 1 || r.Phases[0].Phase != v1alpha1.PhaseRefreshingControlPlane {
		t.Errorf("phases: %+v", r.Phases)
	}
}

func TestHistoryPhaseDurationsAddUpToTheWallTime(t *testing.T) {
	d := newHistoryDriver(t)
	d.move(0, StepExpandTrustBundle, "t1", 1, nil)
	d.move(1500*time.Millisecond, StepPropagateTrustRoots, "", 0, nil, StepExpandTrustBundle, StepRefreshControlPlane)
	d.move(time.Minute, StepWaitForIdentityIssuer, "", 0, nil, StepPropagateTrustRoots, StepWaitForRemoteTrustRoots, StepRestartIdentity)
	d.move(2*time.Hour, StepRemoveOldTrustRoots, "", 0, nil)
	d.move(10*time.Second, StepBootstrap, "", 0, nil, StepRemoveOldTrustRoots)
	r := d.only()
	if r.Outcome != v1alpha1.RotationCompleted || r.FinishTime == nil {
		t.Fatalf("finished entry: %+v", r)
	}
	var sum time.Duration
	var phases []v1alpha1.Phase
	for _, p := range r.Phases {
		sum += p.Duration.Duration
		phases = append(phases, p.Phase)
	}
	// Timestamps are whole seconds: 7,271.5s from 12:00:00.4 reads 12:00:00 to 14:01:11.
	if wall := RecordDuration(r); sum != wall || wall != 2*time.Hour+time.Minute+11*time.Second {
		t.Errorf("phases add up to %s, wall time %s", sum, wall)
	}
	want := []v1alpha1.Phase{v1alpha1.PhaseRefreshingControlPlane, v1alpha1.PhasePropagatingTrustRoots, v1alpha1.PhaseWaitingForIdentityRotation, v1alpha1.PhaseRemovingOldTrustRoots}
	if len(phases) != len(want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	for i := range want {
		if phases[i] != want[i] {
			t.Errorf("phases %v, want %v", phases, want)
		}
	}
}

func TestHistoryRecordsARotationOnce(t *testing.T) {
	d := newHistoryDriver(t)
	d.move(0, StepExpandTrustBundle, "t1", 1, nil)
	d.move(time.Minute, StepRemoveOldTrustRoots, "", 0, nil)
	prev := d.st.Checkpoint.DeepCopy()
	d.move(time.Minute, StepBootstrap, "", 0, nil, StepRemoveOldTrustRoots)
	closed := d.only()
	// The operator stopped after that write and observes again: the status holds the closed
	// entry and an idle checkpoint; or it stopped before it and passes the same steps again.
	d.move(time.Minute, StepBootstrap, "", 0, nil)
	if r := d.only(); r.FinishTime.Time != closed.FinishTime.Time {
		t.Errorf("closed again: %+v, was %+v", r, closed)
	}
	again := *d.st.DeepCopy()
	again.Checkpoint = &v1alpha1.Checkpoint{Step: StepBootstrap}
	TrackHistory(rotationSteps, &again, prev, d.spec, d.s, nil, []string{StepRemoveOldTrustRoots}, d.now.Add(time.Hour))
	if len(again.History) != 1 || again.History[0].FinishTime.Time != closed.FinishTime.Time {
		t.Errorf("a replayed completion changed the entry: %+v", again.History)
	}
}

func TestHistoryCountsOperatorRestartsOncePerToken(t *testing.T) {
	d := newHistoryDriver(t)
	d.move(0, StepRestartIdentity, "t1", 1, nil)
	d.move(time.Second, StepRestartIdentity, "t1", 2, nil) // the act repeated after a crash
	d.move(time.Second, StepRestartIdentity, "t2", 1, nil) // a new act
	d.move(time.Second, StepWaitForIdentityIssuer, "", 0, nil, StepRestartIdentity)
	r := d.only()
	if len(r.Restarts) != 1 || r.Restarts[0] != (v1alpha1.RestartRecord{Step: StepRestartIdentity, By: v1alpha1.RestartedByOperator, Acts: 2}) {
		t.Errorf("restarts: %+v", r.Restarts)
	}
}

func TestHistoryRecordsUserRestarts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy v1alpha1.RenewalPolicy
		want   int
	}{{"manual restarts are the user's", v1alpha1.Manual, 1}, {"automatic restarts are not", v1alpha1.Automatic, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newHistoryDriver(t)
			d.spec.DataPlaneRestart.Policy = tc.policy
			d.move(0, StepPropagateTrustRoots, "", 0, nil)
			d.move(time.Minute, StepRestartIdentity, "", 0, nil, StepPropagateTrustRoots, StepWaitForRemoteTrustRoots)
			r := d.only()
			if len(r.Restarts) != tc.want || tc.want == 1 && r.Restarts[0].By != v1alpha1.RestartedByUser {
				t.Errorf("restarts: %+v", r.Restarts)
			}
		})
	}
}

func TestHistorySupersededRotation(t *testing.T) {
	d := newHistoryDriver(t)
	d.move(0, StepPropagateTrustRoots, "", 0, nil)
	first := d.st.History[0]
	// cert-manager renewed the anchor again: the jump saves a checkpoint of a new rotation.
	d.s.Anchor = Source{Found: true, Cert: anchorCA(t, "newer").cert}
	d.start = time.Time{}
	d.move(time.Minute, StepExpandTrustBundle, "", 0, &workflow.JumpRecord{From: StepPropagateTrustRoots, To: StepExpandTrustBundle, Reason: ReasonRotationSuperseded, Supersedes: true})
	if len(d.st.History) != 2 {
		t.Fatalf("history: %+v", d.st.History)
	}
	cur, old := d.st.History[0], d.st.History[1]
	if old.Rotation != first.Rotation || old.Outcome != v1alpha1.RotationSuperseded || len(old.Faults) != 1 || old.Faults[0] != ReasonRotationSuperseded {
		t.Errorf("superseded entry: %+v", old)
	}
	if cur.Outcome != v1alpha1.RotationInProgress || cur.Rotation == old.Rotation {
		t.Errorf("new entry: %+v", cur)
	}
}

func TestHistoryFaultsFromConditions(t *testing.T) {
	d := newHistoryDriver(t)
	d.st.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionOutOfOrderIssuerRotation, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonIssuerRotatedOutOfOrder},
		{Type: v1alpha1.ConditionIdentityRestartedEarly, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonIdentityNotRestartedEarly},
	}
	d.move(0, StepPropagateTrustRoots, "", 0, nil)
	d.move(time.Second, StepPropagateTrustRoots, "", 0, nil)
	if r := d.only(); len(r.Faults) != 1 || r.Faults[0] != v1alpha1.ReasonIssuerRotatedOutOfOrder {
		t.Errorf("faults: %+v", r.Faults)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	d := newHistoryDriver(t)
	limit := int32(3)
	d.spec.HistoryLimit = &limit
	for i := range 5 {
		d.start = time.Time{}
		d.move(time.Hour, StepPropagateTrustRoots, "", 0, nil)
		d.move(time.Hour, StepBootstrap, "", 0, nil, StepRemoveOldTrustRoots)
		if i == 0 {
			first := d.st.History[0]
			for range 40 { // phase visits past the bound are added to the last one
				enterPhase(&first, v1alpha1.PhaseRefreshingControlPlane, d.now)
				enterPhase(&first, v1alpha1.PhasePropagatingTrustRoots, d.now)
			}
			if len(first.Phases) != maxPhaseVisits {
				t.Errorf("%d phase visits kept", len(first.Phases))
			}
		}
	}
	if len(d.st.History) != 3 || !d.st.History[0].StartTime.After(d.st.History[2].StartTime.Time) {
		t.Errorf("history: %d entries, latest first expected", len(d.st.History))
	}
}

func TestFinished(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	open := v1alpha1.RotationRecord{Rotation: "a", StartTime: at, Outcome: v1alpha1.RotationInProgress}
	done := open
	done.Outcome, done.FinishTime = v1alpha1.RotationCompleted, &at
	if got := Finished([]v1alpha1.RotationRecord{open}, []v1alpha1.RotationRecord{done}); len(got) != 1 {
		t.Errorf("closed now: %+v", got)
	}
	if got := Finished([]v1alpha1.RotationRecord{done}, []v1alpha1.RotationRecord{done}); len(got) != 0 {
		t.Errorf("closed before: %+v", got)
	}
}

// The operator's two writes keep the history: the checkpoint saved before the rotation's first
// act opens the entry, the projection that goes round to the Synced steps closes it.
func TestHistoryThroughSaveAndProject(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	st := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseSynced, Checkpoint: &v1alpha1.Checkpoint{Step: StepDetectAnchorRotation}}
	SaveCheckpoint(rotationSteps, &st, workflow.Checkpoint{Step: StepExpandTrustBundle, Token: "t1", Acts: 1}, s, now)
	if len(st.History) != 1 || st.History[0].Outcome != v1alpha1.RotationInProgress || st.History[0].Rotation != Fingerprint(p.newAnchor.cert) {
		t.Fatalf("after the first save: %+v", st.History)
	}
	// The user restarted the workloads: the workflow passes propagate-trust-roots and saves
	// restart-identity's act.
	st.Checkpoint.Step, st.Checkpoint.Token, st.Checkpoint.Acts = StepPropagateTrustRoots, "", 0
	SaveCheckpoint(rotationSteps, &st, workflow.Checkpoint{Step: StepRestartIdentity, Token: "t2", Acts: 1}, s, now.Add(time.Minute))
	if rs := st.History[0].Restarts; len(rs) != 2 || rs[0].Step != StepPropagateTrustRoots || rs[0].By != v1alpha1.RestartedByUser ||
		rs[1].Step != StepRestartIdentity || rs[1].By != v1alpha1.RestartedByOperator {
		t.Errorf("restarts after the user's and the operator's: %+v", rs)
	}
	res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepBootstrap}, Phase: string(v1alpha1.PhaseSynced), Completed: true,
		Passed: []string{StepRemoveOldTrustRoots}, Decision: workflow.Completed("Done", "")}
	st.Checkpoint.Step = StepRemoveOldTrustRoots
	done := Project(rotationSteps, st, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, now.Add(time.Hour))
	if len(done.History) != 1 || done.History[0].Outcome != v1alpha1.RotationCompleted || RecordDuration(done.History[0]) != time.Hour {
		t.Errorf("after completion: %+v", done.History)
	}
	if done.NextRotation == nil || !done.NextRotation.AnchorNotAfter.Time.Equal(p.newAnchor.cert.NotAfter.Truncate(time.Second)) {
		t.Errorf("nextRotation %+v, want one on the current anchor", done.NextRotation)
	}
}
