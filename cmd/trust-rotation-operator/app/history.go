package app

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// ReasonRotationRecorded is the reason of the Normal Event the operator records for each
// rotation status.history closes: completed or superseded, with its wall time.
const ReasonRotationRecorded = "RotationRecorded"

// historyMetrics mirror status.nextRotation and status.history.
type historyMetrics struct {
	deadline        *prometheus.GaugeVec
	lastDuration    *prometheus.GaugeVec
	restartDeadline *prometheus.GaugeVec
}

func newHistoryMetrics(r *prometheus.Registry) historyMetrics {
	h := historyMetrics{
		deadline: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_next_rotation_deadline_timestamp_seconds",
			Help: "The latest moment (Unix seconds) the next rotation can start and still finish, its final restart included, before the trust anchor expires with spec.rotationDeadlineMargin to spare (status.nextRotation.deadline); absent while the trust anchor is unusable.",
		}, nil),
		lastDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_last_rotation_duration_seconds",
			Help: "Wall time of the latest finished rotation in status.history, by outcome (Completed, Superseded); absent until one finished.",
		}, []string{"outcome"}),
		restartDeadline: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_restart_deadline_timestamp_seconds",
			Help: "When a cross-signed rotation's one data-plane restart, left to natural churn (spec.dataPlaneRestart.policy Manual), should be done (status.restartDeadline.deadline); absent otherwise.",
		}, nil),
	}
	r.MustRegister(h.deadline, h.lastDuration, h.restartDeadline)
	return h
}

// ObserveHistory sets the deadline and last-rotation gauges from the status.
func (m *Metrics) ObserveHistory(st *v1alpha1.TrustAnchorRotationStatus) {
	m.history.deadline.Reset()
	if n := st.NextRotation; n != nil {
		m.history.deadline.WithLabelValues().Set(float64(n.Deadline.Unix()))
	}
	m.history.restartDeadline.Reset()
	if d := st.RestartDeadline; d != nil {
		m.history.restartDeadline.WithLabelValues().Set(float64(d.Deadline.Unix()))
	}
	m.history.lastDuration.Reset()
	for _, r := range st.History {
		if r.Outcome != v1alpha1.RotationInProgress {
			m.history.lastDuration.WithLabelValues(string(r.Outcome)).Set(steps.RecordDuration(r).Seconds())
			break
		}
	}
}

// recordFinished records a Normal Event for each rotation the status write finished.
func (c *Controller) recordFinished(tar *v1alpha1.TrustAnchorRotation, prev, next []v1alpha1.RotationRecord) {
	for _, r := range steps.Finished(prev, next) {
		c.recorder.Eventf(tar, corev1.EventTypeNormal, ReasonRotationRecorded, "rotation to trust anchor %s %s after %s (%d phase(s), %d restart step(s), faults: %s)",
			steps.ShortFingerprint(r.Rotation), outcomeVerb(r.Outcome), steps.RecordDuration(r).Round(time.Second), len(r.Phases), len(r.Restarts), faultsOrNone(r.Faults))
	}
}

func outcomeVerb(o v1alpha1.RotationOutcome) string {
	if o == v1alpha1.RotationSuperseded {
		return "superseded"
	}
	return "completed"
}

func faultsOrNone(fs []string) string {
	if len(fs) == 0 {
		return "none"
	}
	out := fs[0]
	for _, f := range fs[1:] {
		out += ", " + f
	}
	return out
}
