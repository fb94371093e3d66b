package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Metrics mirrors the TrustAnchorRotation status, with the names the user guide documents.
type Metrics struct {
	Registry *prometheus.Registry

	phase                  *prometheus.GaugeVec
	bundleConverged        prometheus.Gauge
	bundleTarget           prometheus.Gauge
	certsConverged         prometheus.Gauge
	certsTarget            prometheus.Gauge
	activeIssuer           *prometheus.GaugeVec
	previousAnchor         *prometheus.GaugeVec
	refreshIntervalSeconds prometheus.Gauge
	acts                   *prometheus.CounterVec
}

// NewMetrics registers the operator's metrics, plus the Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_phase", Help: "1 for the active rotation phase, 0 for every other phase.",
		}, []string{"phase"}),
		bundleConverged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_trust_bundle_converged_pods", Help: "Meshed pods injected with the desired trust bundle.",
		}),
		bundleTarget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_trust_bundle_target_pods", Help: "Meshed pods that must be injected with the desired trust bundle.",
		}),
		certsConverged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_workload_certificates_converged_pods", Help: "Meshed pods presenting a certificate from the active issuer.",
		}),
		certsTarget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_workload_certificates_target_pods", Help: "Meshed pods that must present a certificate from the active issuer.",
		}),
		activeIssuer: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_active_issuer_info", Help: "Fingerprint of the active identity issuer (value 1).",
		}, []string{"fingerprint"}),
		previousAnchor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_previous_anchor_info", Help: "Fingerprint of the previous trust anchor (value 1).",
		}, []string{"fingerprint"}),
		refreshIntervalSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_workload_certificate_refresh_interval_seconds",
			Help: "Accelerated workload certificate refresh interval in effect; 0 when no override is in effect.",
		}),
		acts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trust_rotation_step_acts_total", Help: "Acts run by each rotation step.",
		}, []string{"step"}),
	}
	m.Registry.MustRegister(m.phase, m.bundleConverged, m.bundleTarget, m.certsConverged, m.certsTarget,
		m.activeIssuer, m.previousAnchor, m.refreshIntervalSeconds, m.acts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, p := range v1alpha1.Phases {
		m.phase.WithLabelValues(string(p)).Set(0)
	}
	return m
}

// Observe sets the gauges from a status.
func (m *Metrics) Observe(st *v1alpha1.TrustAnchorRotationStatus) {
	for _, p := range v1alpha1.Phases {
		v := 0.0
		if p == st.Phase {
			v = 1
		}
		m.phase.WithLabelValues(string(p)).Set(v)
	}
	if st.TrustBundle != nil {
		m.bundleConverged.Set(float64(st.TrustBundle.ConvergedPods))
		m.bundleTarget.Set(float64(st.TrustBundle.TargetPods))
	}
	if st.WorkloadCertificates != nil {
		m.certsConverged.Set(float64(st.WorkloadCertificates.ConvergedPods))
		m.certsTarget.Set(float64(st.WorkloadCertificates.TargetPods))
	}
	setInfo(m.activeIssuer, st.ActiveIssuerFingerprint)
	setInfo(m.previousAnchor, st.PreviousAnchorFingerprint)
	if st.WorkloadCertificateRefreshInterval != nil {
		m.refreshIntervalSeconds.Set(st.WorkloadCertificateRefreshInterval.Seconds())
	} else {
		m.refreshIntervalSeconds.Set(0)
	}
}

// setInfo keeps exactly one series, for the current fingerprint.
func setInfo(g *prometheus.GaugeVec, fingerprint string) {
	g.Reset()
	if fingerprint != "" {
		g.WithLabelValues(fingerprint).Set(1)
	}
}
