package app

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// gauges gathers a gauge's series as "labels value", labels as name=value pairs.
func gauges(t *testing.T, m *Metrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			key := ""
			for _, lp := range mt.GetLabel() {
				key += lp.GetName() + "=" + lp.GetValue()
			}
			out[key] = mt.GetGauge().GetValue()
		}
	}
	return out
}

// The deadline gauge mirrors status.nextRotation and is absent without it; the last-rotation
// gauge is the latest finished entry's wall time, by outcome.
func TestObserveHistory(t *testing.T) {
	m := NewMetrics()
	at := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	start := metav1.NewTime(at.Add(-3 * time.Hour))
	end := metav1.NewTime(at.Add(-time.Hour))
	st := &v1alpha1.TrustAnchorRotationStatus{
		NextRotation: &v1alpha1.NextRotation{Deadline: metav1.NewTime(at)},
		History: []v1alpha1.RotationRecord{
			{Rotation: "b", StartTime: metav1.NewTime(at), Outcome: v1alpha1.RotationInProgress},
			{Rotation: "a", StartTime: start, FinishTime: &end, Outcome: v1alpha1.RotationSuperseded},
			{Rotation: "z", StartTime: start, FinishTime: &end, Outcome: v1alpha1.RotationCompleted},
		},
	}
	m.ObserveHistory(st)
	if got := gauges(t, m, "trust_rotation_next_rotation_deadline_timestamp_seconds"); len(got) != 1 || got[""] != float64(at.Unix()) {
		t.Errorf("deadline gauge %v, want %d", got, at.Unix())
	}
	if got := gauges(t, m, "trust_rotation_last_rotation_duration_seconds"); len(got) != 1 || got["outcome=Superseded"] != 7200 {
		t.Errorf("last rotation gauge %v, want the superseded one's 7200s", got)
	}
	if got := gauges(t, m, "trust_rotation_restart_deadline_timestamp_seconds"); len(got) != 0 {
		t.Errorf("restart deadline gauge %v without status.restartDeadline", got)
	}
	churn := metav1.NewTime(at.Add(-time.Hour))
	st.RestartDeadline = &v1alpha1.RestartDeadline{Deadline: churn, Since: start}
	m.ObserveHistory(st)
	if got := gauges(t, m, "trust_rotation_restart_deadline_timestamp_seconds"); len(got) != 1 || got[""] != float64(churn.Unix()) {
		t.Errorf("restart deadline gauge %v, want %d", got, churn.Unix())
	}
	m.ObserveHistory(&v1alpha1.TrustAnchorRotationStatus{})
	if got := gauges(t, m, "trust_rotation_next_rotation_deadline_timestamp_seconds"); len(got) != 0 {
		t.Errorf("deadline gauge %v without a deadline", got)
	}
	if got := gauges(t, m, "trust_rotation_restart_deadline_timestamp_seconds"); len(got) != 0 {
		t.Errorf("restart deadline gauge %v once the deadline is gone", got)
	}
}
