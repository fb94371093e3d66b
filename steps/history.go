package steps

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The rotation history (status.history) is kept by the same writes that move the checkpoint:
// an entry opens in the write that saves a rotation's first checkpoint, and closes in the write
// that moves the checkpoint off the rotation (completed, or superseded by a newer anchor). An
// operator stopped anywhere finds the entry in the state its checkpoint is in, so a rotation is
// recorded once and never lost. Entries are keyed by the rotation and its start time.

// DefaultHistoryLimit is spec.historyLimit's default.
const DefaultHistoryLimit = 10

// The bounds of one entry, so that status.history stays a few KiB whatever happens.
const (
	maxHistory       = 50
	maxPhaseVisits   = 16
	maxRestartSteps  = 16
	maxFaults        = 8
	maxFaultLength   = 63
	historyTimeGrain = time.Second // metav1.Time's resolution once written
)

// HistoryLimit is spec.historyLimit, defaulted and bounded.
func HistoryLimit(spec v1alpha1.TrustAnchorRotationSpec) int {
	if spec.HistoryLimit == nil || *spec.HistoryLimit <= 0 {
		return DefaultHistoryLimit
	}
	return min(int(*spec.HistoryLimit), maxHistory)
}

// TrackHistory updates st.History for the status about to be written, whose checkpoint
// (st.Checkpoint) follows prev (the checkpoint written before; nil when none). jump is the jump
// that moved the checkpoint, nil when none; passed are the steps the workflow passed on the way
// (Result.Passed), with prevStep the step it passed them from.
func TrackHistory(rot *Ordered, st *v1alpha1.TrustAnchorRotationStatus, prev *v1alpha1.Checkpoint, spec v1alpha1.TrustAnchorRotationSpec,
	s *State, jump *workflow.JumpRecord, passed []string, now time.Time) {
	now = now.Truncate(historyTimeGrain)
	cur := st.Checkpoint
	if prev != nil && prev.Rotation != "" && prev.StartTime != nil && !sameRotation(prev, cur) {
		if i := findRecord(st.History, prev.Rotation, prev.StartTime); i >= 0 && st.History[i].Outcome == v1alpha1.RotationInProgress {
			r := &st.History[i]
			outcome := v1alpha1.RotationCompleted
			if jump != nil && jump.Supersedes {
				outcome = v1alpha1.RotationSuperseded
				addFault(r, jump.Reason)
			}
			addUserRestarts(rot, r, spec, prev.Step, passed)
			closeRecord(r, outcome, now)
		}
	}
	if cur == nil || cur.Rotation == "" || cur.StartTime == nil || rot.named(cur.Step).Idle() {
		trimHistory(st, spec)
		return
	}
	i := findRecord(st.History, cur.Rotation, cur.StartTime)
	if i < 0 {
		r := v1alpha1.RotationRecord{Rotation: cur.Rotation, StartTime: metav1.NewTime(cur.StartTime.Time.Truncate(historyTimeGrain)), Outcome: v1alpha1.RotationInProgress}
		if from := s.Previous.Fingerprint(); from != cur.Rotation {
			r.From = from
		}
		st.History = append([]v1alpha1.RotationRecord{r}, st.History...)
		i = 0
	}
	r := &st.History[i]
	if r.Outcome != v1alpha1.RotationInProgress {
		trimHistory(st, spec)
		return
	}
	enterPhase(r, v1alpha1.Phase(rot.named(cur.Step).Phase), now)
	if sameRotation(prev, cur) {
		addUserRestarts(rot, r, spec, prev.Step, passed)
	}
	if jump == nil && actedAnew(prev, cur) && restartsPods(rot.named(cur.Step)) {
		addRestart(r, cur.Step, v1alpha1.RestartedByOperator, 1)
	}
	if jump != nil && !jump.Supersedes {
		addFault(r, jump.Reason)
	}
	for _, c := range st.Conditions {
		if c.Status == metav1.ConditionTrue && (c.Type == v1alpha1.ConditionOutOfOrderIssuerRotation || c.Type == v1alpha1.ConditionIdentityRestartedEarly) {
			addFault(r, c.Reason)
		}
	}
	if s != nil {
		if drift, ok := CheckBundle(rot, s, cur.Step); ok {
			addFault(r, drift.Reason)
		}
	}
	trimHistory(st, spec)
}

// sameRotation reports whether two checkpoints belong to the same rotation.
func sameRotation(a, b *v1alpha1.Checkpoint) bool {
	if a == nil || b == nil || a.Rotation == "" || a.Rotation != b.Rotation || a.StartTime == nil || b.StartTime == nil {
		return false
	}
	return a.StartTime.Time.Truncate(historyTimeGrain).Equal(b.StartTime.Time.Truncate(historyTimeGrain))
}

func findRecord(h []v1alpha1.RotationRecord, rotation string, start *metav1.Time) int {
	t := start.Time.Truncate(historyTimeGrain)
	for i := range h {
		if h[i].Rotation == rotation && h[i].StartTime.Time.Truncate(historyTimeGrain).Equal(t) {
			return i
		}
	}
	return -1
}

// elapsed is how long the record's closed phase visits last together.
func elapsed(r *v1alpha1.RotationRecord) time.Duration {
	var d time.Duration
	for _, p := range r.Phases {
		d += p.Duration.Duration
	}
	return d
}

// settleLast sets the open (last) phase visit's duration to what is left of the wall time from
// the start to now, so that the visits add up to it exactly.
func settleLast(r *v1alpha1.RotationRecord, now time.Time) {
	if len(r.Phases) == 0 {
		return
	}
	last := &r.Phases[len(r.Phases)-1]
	last.Duration.Duration = 0
	last.Duration.Duration = max(now.Sub(r.StartTime.Time)-elapsed(r), 0)
}

// enterPhase closes the open visit and opens one of phase, when the phase changed. Visits past
// the bound are added to the last one.
func enterPhase(r *v1alpha1.RotationRecord, phase v1alpha1.Phase, now time.Time) {
	if phase == "" || phase == v1alpha1.PhaseSynced {
		return
	}
	if n := len(r.Phases); n > 0 && r.Phases[n-1].Phase == phase {
		return
	}
	settleLast(r, now)
	if len(r.Phases) >= maxPhaseVisits {
		return
	}
	r.Phases = append(r.Phases, v1alpha1.PhaseDuration{Phase: phase})
}

func closeRecord(r *v1alpha1.RotationRecord, outcome v1alpha1.RotationOutcome, now time.Time) {
	settleLast(r, now)
	t := metav1.NewTime(now)
	r.FinishTime, r.Outcome = &t, outcome
}

// actedAnew reports whether the checkpoint saved is a new act: another step or another token
// than the one saved before. An act repeated under its token (after a crash) is not.
func actedAnew(prev, cur *v1alpha1.Checkpoint) bool {
	if cur.Token == "" || cur.Acts == 0 {
		return false
	}
	return prev == nil || prev.Step != cur.Step || prev.Token != cur.Token
}

// restartsPods reports whether the step's act restarts pods: the control plane's or, under
// automatic restarts, the workloads'.
func restartsPods(st Step) bool {
	return st.ReloadsBundle || restartsForCertificates(st.Name)
}

// addUserRestarts records the restarts the user made: a step that waits on the user restarting
// workloads, which the workflow passed from (the checkpoint was at it: it had waited) while the
// spec left restarts to the user.
func addUserRestarts(rot *Ordered, r *v1alpha1.RotationRecord, spec v1alpha1.TrustAnchorRotationSpec, from string, passed []string) {
	if len(passed) == 0 || passed[0] != from {
		return
	}
	st := rot.named(from)
	if st.Manual == nil || !restartsPods(st) || st.Automated != nil && spec.DataPlaneRestart.Policy == v1alpha1.Automatic {
		return
	}
	addRestart(r, from, v1alpha1.RestartedByUser, 0)
}

func addRestart(r *v1alpha1.RotationRecord, step string, by v1alpha1.RestartActor, acts int32) {
	for i := range r.Restarts {
		if rr := &r.Restarts[i]; rr.Step == step && rr.By == by {
			rr.Acts += acts
			return
		}
	}
	if len(r.Restarts) < maxRestartSteps {
		r.Restarts = append(r.Restarts, v1alpha1.RestartRecord{Step: step, By: by, Acts: acts})
	}
}

func addFault(r *v1alpha1.RotationRecord, reason string) {
	if reason == "" {
		return
	}
	if len(reason) > maxFaultLength {
		reason = reason[:maxFaultLength]
	}
	for _, f := range r.Faults {
		if f == reason {
			return
		}
	}
	if len(r.Faults) < maxFaults {
		r.Faults = append(r.Faults, reason)
	}
}

// trimHistory keeps the latest spec.historyLimit entries.
func trimHistory(st *v1alpha1.TrustAnchorRotationStatus, spec v1alpha1.TrustAnchorRotationSpec) {
	if n := HistoryLimit(spec); len(st.History) > n {
		st.History = st.History[:n]
	}
	if len(st.History) == 0 {
		st.History = nil
	}
}

// RecordDuration is a finished entry's wall time, zero for one in progress.
func RecordDuration(r v1alpha1.RotationRecord) time.Duration {
	if r.FinishTime == nil {
		return 0
	}
	return r.FinishTime.Sub(r.StartTime.Time)
}

// Finished returns the entries of next that are finished and were not in prev (absent, or in
// progress): the rotations a status write finishes, for the operator's Events.
func Finished(prev, next []v1alpha1.RotationRecord) []v1alpha1.RotationRecord {
	var out []v1alpha1.RotationRecord
	for _, r := range next {
		if r.Outcome == v1alpha1.RotationInProgress {
			continue
		}
		if i := findRecord(prev, r.Rotation, &r.StartTime); i >= 0 && prev[i].Outcome != v1alpha1.RotationInProgress {
			continue
		}
		out = append(out, r)
	}
	return out
}
