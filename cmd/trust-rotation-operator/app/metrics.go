package app

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Metrics mirrors the TrustAnchorRotation status, with the names docs/reference.md documents.
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
	certExpiry             *prometheus.GaugeVec
	reconciles             *prometheus.CounterVec
	remoteConverged        *prometheus.GaugeVec
	remoteLastObserved     *prometheus.GaugeVec
	identityRestartedEarly prometheus.Gauge
	identityIssuerStale    prometheus.Gauge
	leavesExpiring         prometheus.Gauge
	soonestLeaf            *soonestLeafCollector
	specInvalid            *prometheus.GaugeVec
	watchErrors            *prometheus.CounterVec
	probes                 *prometheus.CounterVec
	history                historyMetrics
}

// Causes of trust_rotation_reconciles_total: what made the operator observe the cluster.
const (
	CauseStart   = "start"   // the first observation once the caches synced
	CauseChange  = "change"  // a watched object or a probe result changed
	CauseRecheck = "recheck" // a moment a decision depends on came (workflow.Decision.RecheckAt; a held-back write falling due)
	CausePoll    = "poll"    // --max-poll-interval passed with nothing else
	CauseRetry   = "retry"   // the previous observation failed
)

// What trust_rotation_watch_errors_total counts the failed lists and watches of.
const (
	WatchAnchorSecret         = "anchor-secret"
	WatchPreviousAnchorSecret = "previous-anchor-secret"
	WatchIssuerSecret         = "issuer-secret"
	WatchTrustBundle          = "trust-bundle"
	WatchControlPlane         = "control-plane"
	WatchRotations            = "trust-anchor-rotations"
	WatchMeshedPods           = "meshed-pods"
)

// watchErrorHandler counts a failed list or watch of what, after client-go's default handler
// has logged it.
func (m *Metrics) watchErrorHandler(what string) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		m.watchErrors.WithLabelValues(what).Inc()
	}
}

// Groups of trust_rotation_remote_cluster_converged.
const (
	GroupTrustBundle          = "trust-bundle"
	GroupWorkloadCertificates = "workload-certificates"
)

// Certificate roles of trust_rotation_certificate_expiration_timestamp_seconds.
const (
	RoleTrustAnchor    = "trust-anchor"
	RoleTrustBundle    = "trust-bundle"
	RoleIdentityIssuer = "identity-issuer"
	RolePreviousAnchor = "previous-anchor"
	// RoleBridge: a certificate a Secret's tls.crt carries after its own, in the identity
	// issuer's (what identity serves every proxy after the issuer) or the trust anchor's (a
	// cross-signed anchor's bridges to the anchors before it).
	RoleBridge = "bridge"
)

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
			Name: "trust_rotation_workload_certificates_converged_pods", Help: "Meshed pods presenting a certificate whose chain verifies to the active issuer's trust anchor (the new anchor once the issuer is renewed onto it).",
		}),
		certsTarget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_workload_certificates_target_pods", Help: "Meshed pods that must present a certificate whose chain verifies to the active issuer's trust anchor.",
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
		certExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_certificate_expiration_timestamp_seconds",
			Help: "NotAfter (Unix seconds) of each certificate the rotation relies on: the current trust anchor, every anchor of the trust bundle, the identity issuer, the previous anchor and the bridges the issuer's and the anchor's chains carry, by role and fingerprint.",
		}, []string{"role", "fingerprint"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trust_rotation_reconciles_total",
			Help: "Observations of the cluster by the leader, by what caused them: start, change (a watched object or a probe result), recheck (a moment a decision depends on), poll (--max-poll-interval), retry (after a failure). Nothing changing, it stays still.",
		}, []string{"cause"}),
		remoteConverged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_remote_cluster_converged",
			Help: "1 when a linked cluster reports the group (trust-bundle, workload-certificates) converged, 0 otherwise, as last read from its TrustAnchorRotation.",
		}, []string{"cluster", "group"}),
		remoteLastObserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_remote_cluster_last_observed_timestamp_seconds",
			Help: "When (Unix seconds) a linked cluster's TrustAnchorRotation was last read, as published in status.remoteClusters.",
		}, []string{"cluster"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trust_rotation_certificate_probes_total",
			Help: "TLS handshakes with meshed pods' linkerd-admin ports to read their live certificates, by result: presented (a chain was read), rejected (a chain was read that the pod's proxy cannot have presented: its leaf names another identity than the pod's, or the server did not prove it holds the leaf's key) or failed (no answer, or no certificate yet).",
		}, []string{"result"}),
		identityRestartedEarly: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_identity_restarted_early_pods",
			Help: "linkerd-identity pods that started after the trust bundle was expanded while the data plane has not converged on it and the identity issuer is on the new trust anchor (condition IdentityRestartedEarly); 0 otherwise.",
		}),
		identityIssuerStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_identity_issuer_stale_pods",
			Help: "Meshed pods presenting a certificate linkerd-identity issued, between rotations, after it should have loaded the issuer in the issuer Secret, signed by another issuer (condition IdentityIssuerStale); 0 otherwise.",
		}),
		leavesExpiring: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trust_rotation_workload_certificates_expiring_pods",
			Help: "Live meshed pods presenting a workload certificate with less than 9% of its lifetime left, which their proxies did not renew at 70% of its lifetime nor at the retry after (condition WorkloadCertificatesExpiring); 0 otherwise.",
		}),
		soonestLeaf: &soonestLeafCollector{desc: prometheus.NewDesc("trust_rotation_workload_certificate_expiration_timestamp_seconds",
			"Soonest NotAfter (Unix seconds) of the workload certificates the live meshed pods presented when last probed; each pod is probed again once its proxy should have renewed. Absent before the first probe.", nil, nil)},
		specInvalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trust_rotation_spec_invalid",
			Help: "1 while a TrustAnchorRotation's spec holds a value the operator cannot use (condition SpecInvalid: a field that does not decode, an unknown time zone), 0 otherwise; one series per TrustAnchorRotation.",
		}, []string{"name"}),
	}
	m.watchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trust_rotation_watch_errors_total",
		Help: "Failed lists and watches of the operator's informers, by what they watch (each is logged, and the informer lists again after a back-off): a rising count is an operator observing from a stale cache.",
	}, []string{"watch"})
	for _, w := range []string{WatchAnchorSecret, WatchPreviousAnchorSecret, WatchIssuerSecret, WatchTrustBundle, WatchControlPlane, WatchRotations, WatchMeshedPods} {
		m.watchErrors.WithLabelValues(w)
	}
	m.Registry.MustRegister(m.watchErrors)
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "trust_rotation_undecodable_pods_total",
		Help: "Meshed pods the operator could not decode from the apiserver's protobuf and skipped (each is logged): a list goes on without the pod, a watch ends and is listed again.",
	}, func() float64 { return float64(podindex.SkippedPods()) }))
	m.Registry.MustRegister(m.phase, m.bundleConverged, m.bundleTarget, m.certsConverged, m.certsTarget,
		m.activeIssuer, m.previousAnchor, m.refreshIntervalSeconds, m.acts, m.certExpiry, m.reconciles,
		m.remoteConverged, m.remoteLastObserved, m.identityRestartedEarly, m.identityIssuerStale, m.leavesExpiring, m.soonestLeaf, m.specInvalid, m.probes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.history = newHistoryMetrics(m.Registry)
	for _, p := range v1alpha1.Phases {
		m.phase.WithLabelValues(string(p)).Set(0)
	}
	for _, c := range []string{CauseStart, CauseChange, CauseRecheck, CausePoll, CauseRetry} {
		m.reconciles.WithLabelValues(c)
	}
	for _, r := range []string{ProbePresented, ProbeRejected, ProbeFailed} {
		m.probes.WithLabelValues(r)
	}
	return m
}

// Results of trust_rotation_certificate_probes_total. A rejected chain is counted apart from a
// failure: a proxy still starting fails a few probes in every rotation, while a rejection means
// something other than the pod's proxy answers on its address, which an alert may want to see.
const (
	ProbePresented = "presented"
	ProbeRejected  = "rejected"
	ProbeFailed    = "failed"
)

// soonestLeafCollector exports trust_rotation_workload_certificate_expiration_timestamp_seconds
// from the leader's probe tracker when scraped: the soonest expiry walks every pod, which a
// scrape every half minute affords and a reconcile per change would not. It has no label: the
// pod presenting the soonest changes with every renewal, and a label per pod would be a series
// per pod over a day (condition WorkloadCertificatesExpiring names the pod that matters).
type soonestLeafCollector struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	source func() (time.Time, string, bool)
}

// setSource makes the collector read the tracker of the controller that leads now (nil: none).
func (c *soonestLeafCollector) setSource(source func() (time.Time, string, bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.source = source
}

func (c *soonestLeafCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *soonestLeafCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	source := c.source
	c.mu.Unlock()
	if source == nil {
		return
	}
	if at, _, ok := source(); ok {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(at.Unix()))
	}
}

// countProbe counts a probe of a pod's live certificate that ended with err.
func (m *Metrics) countProbe(err error) {
	var rejected *probe.ChainRejectedError
	switch {
	case err == nil:
		m.probes.WithLabelValues(ProbePresented).Inc()
	case errors.As(err, &rejected):
		m.probes.WithLabelValues(ProbeRejected).Inc()
	default:
		m.probes.WithLabelValues(ProbeFailed).Inc()
	}
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

// ObserveCertificates sets the expiry gauges from a snapshot: one series per certificate and role,
// and none for a certificate that is gone.
func (m *Metrics) ObserveCertificates(s *steps.State) {
	m.certExpiry.Reset()
	set := func(role string, c *x509.Certificate) {
		if c != nil {
			m.certExpiry.WithLabelValues(role, steps.Fingerprint(c)).Set(float64(c.NotAfter.Unix()))
		}
	}
	for _, src := range []struct {
		role string
		s    steps.Source
	}{{RoleTrustAnchor, s.Anchor}, {RoleIdentityIssuer, s.Issuer}, {RolePreviousAnchor, s.Previous}} {
		if src.s.Usable() {
			set(src.role, src.s.Cert)
		}
	}
	for _, src := range []steps.Source{s.Issuer, s.Anchor} {
		if src.Usable() {
			for _, c := range src.Chain {
				set(RoleBridge, c)
			}
		}
	}
	for _, c := range s.Bundle.Certs {
		set(RoleTrustBundle, c)
	}
}

// setInfo keeps exactly one series, for the current fingerprint.
func setInfo(g *prometheus.GaugeVec, fingerprint string) {
	g.Reset()
	if fingerprint != "" {
		g.WithLabelValues(fingerprint).Set(1)
	}
}

// ObserveRemotes sets the linked clusters' gauges from status.remoteClusters: one series per
// cluster (and group), none for a cluster no longer linked.
func (m *Metrics) ObserveRemotes(rs []v1alpha1.RemoteClusterStatus) {
	m.remoteConverged.Reset()
	m.remoteLastObserved.Reset()
	for _, r := range rs {
		for group, c := range map[string]*v1alpha1.ConvergenceStatus{GroupTrustBundle: r.TrustBundle, GroupWorkloadCertificates: r.WorkloadCertificates} {
			v := 0.0
			if c != nil && c.Status == v1alpha1.Converged {
				v = 1
			}
			m.remoteConverged.WithLabelValues(r.Name, group).Set(v)
		}
		if r.LastObserved != nil {
			m.remoteLastObserved.WithLabelValues(r.Name).Set(float64(r.LastObserved.Unix()))
		}
	}
}
