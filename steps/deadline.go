package steps

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The next rotation's deadline (status.nextRotation) is the latest moment a rotation can start
// and still finish — its final restart included — before the current trust anchor expires,
// with a margin to spare:
//
//	deadline = expiry - margin - duration
//	expiry   = the anchor's NotAfter, or the earliest NotAfter of a bridge certificate the
//	           anchor's or the issuer's Secret carries when that comes first (Linkerd identity
//	           caps every workload certificate at it: see bridges)
//	duration = max(expected, least)
//	expected = the longest completed rotation in status.history, or
//	           spec.expectedRotationDuration until the history holds one
//	least    = workload certificate lifetime            (proxies left alone renew within it)
//	         + identity issuer lifetime, unless spec.identityIssuerRenewal is Automatic
//	           (cert-manager renews the issuer by itself within one lifetime when nobody runs
//	           cmctl renew)
//
// Every term is read from objects, not from the clock, so the deadline changes only when one of
// them does: the anchor is renewed, a rotation finishes with a new longest duration, the spec
// or a lifetime changes.

// Defaults of the spec fields the deadline reads.
const (
	DefaultExpectedRotationDuration = 24 * time.Hour
	DefaultRotationDeadlineMargin   = 24 * time.Hour
	// DefaultWorkloadCertificateLifetime is Linkerd identity's issuanceLifetime default, used
	// until a probe read a live certificate.
	DefaultWorkloadCertificateLifetime = 24 * time.Hour
)

// DeadlineInputs are what the deadline reads besides the anchor, the issuer and the history.
type DeadlineInputs struct {
	// WorkloadCertificateLifetime is the longest lifetime of the workload certificates the
	// probes read (NotAfter - NotBefore), zero when none was read.
	WorkloadCertificateLifetime time.Duration
	// OldestMeshedPod is when the longest-running meshed pod outside the control plane was
	// created, zero when unknown. It is reported, not added: under manual restarts every meshed
	// pod must be restarted during a rotation, and a pod's age says how long this mesh leaves
	// pods alone, not how soon it will restart them.
	OldestMeshedPod time.Time
}

// ExpectedRotationDuration is spec.expectedRotationDuration, defaulted.
func ExpectedRotationDuration(spec v1alpha1.TrustAnchorRotationSpec) time.Duration {
	if d := spec.ExpectedRotationDuration; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return DefaultExpectedRotationDuration
}

// RotationDeadlineMargin is spec.rotationDeadlineMargin, defaulted.
func RotationDeadlineMargin(spec v1alpha1.TrustAnchorRotationSpec) time.Duration {
	if d := spec.RotationDeadlineMargin; d != nil && d.Duration >= 0 {
		return d.Duration
	}
	return DefaultRotationDeadlineMargin
}

// LongestCompleted is the longest wall time of the completed rotations in the history, with
// its entry; ok is false when none completed.
func LongestCompleted(history []v1alpha1.RotationRecord) (d time.Duration, r v1alpha1.RotationRecord, ok bool) {
	for _, h := range history {
		if h.Outcome != v1alpha1.RotationCompleted {
			continue
		}
		if w := RecordDuration(h); !ok || w > d {
			d, r, ok = w, h, true
		}
	}
	return d, r, ok
}

// NextRotationDeadline computes status.nextRotation; nil while the trust anchor is unusable.
func NextRotationDeadline(s *State, spec v1alpha1.TrustAnchorRotationSpec, history []v1alpha1.RotationRecord) *v1alpha1.NextRotation {
	if s == nil || !s.Anchor.Usable() {
		return nil
	}
	expected := ExpectedRotationDuration(spec)
	basis := fmt.Sprintf("spec.expectedRotationDuration %s (no completed rotation recorded yet)", expected)
	if d, r, ok := LongestCompleted(history); ok {
		expected = d
		basis = fmt.Sprintf("longest completed rotation %s (to %s, started %s)", d, ShortFingerprint(r.Rotation), r.StartTime.UTC().Format(time.RFC3339))
	}
	certs := s.Deadline.WorkloadCertificateLifetime
	certsFrom := "observed"
	if certs <= 0 {
		certs, certsFrom = DefaultWorkloadCertificateLifetime, "Linkerd's default"
	}
	least := certs
	leastWhy := fmt.Sprintf("workload certificate lifetime %s (%s)", certs, certsFrom)
	if spec.IdentityIssuerRenewal != v1alpha1.Automatic && s.Issuer.Usable() {
		issuer := s.Issuer.Cert.NotAfter.Sub(s.Issuer.Cert.NotBefore)
		least += issuer
		leastWhy += fmt.Sprintf(" + identity issuer lifetime %s (renewed by hand or on cert-manager's schedule)", issuer)
	}
	duration := expected
	if least > expected {
		duration = least
		basis = fmt.Sprintf("%s, less than the least a rotation takes: %s", basis, leastWhy)
	} else {
		basis = fmt.Sprintf("%s, at least %s", basis, leastWhy)
	}
	if t := s.Deadline.OldestMeshedPod; !t.IsZero() && spec.DataPlaneRestart.Policy != v1alpha1.Automatic {
		// The day only: the oldest pod changes with every restart of it, and the status would
		// be written again each time.
		basis += fmt.Sprintf("; every meshed pod is restarted during a rotation, the oldest was created on %s", t.UTC().Format(time.DateOnly))
	}
	margin := RotationDeadlineMargin(spec)
	n := &v1alpha1.NextRotation{
		AnchorNotAfter:   metav1.NewTime(s.Anchor.Cert.NotAfter.Truncate(time.Second)),
		RotationDuration: metav1.Duration{Duration: duration},
		Margin:           metav1.Duration{Duration: margin},
	}
	expiry := s.Anchor.Cert.NotAfter
	if b, ok := s.firstExpiringBridge(); ok {
		expiry = b.cert.NotAfter
		n.BridgeNotAfter = ptr.To(metav1.NewTime(expiry.Truncate(time.Second)))
		// First, so that the 1024 characters never cut it.
		basis = fmt.Sprintf("the bridge certificate %s (%s) expires at %s, before the trust anchor: linkerd-identity caps every workload certificate at it, "+
			"so the next rotation must go back to a self-signed trust anchor (strategy Standard) before then; %s",
			ShortFingerprint(Fingerprint(b.cert)), b.where, expiry.UTC().Format(time.RFC3339), basis)
	}
	if len(basis) > 1024 {
		basis = basis[:1024]
	}
	n.Basis = basis
	n.Deadline = metav1.NewTime(expiry.Add(-margin - duration).Truncate(time.Second))
	return n
}

// firstExpiringBridge is the bridge certificate (see bridges) that expires first, when it
// expires before the trust anchor.
func (s *State) firstExpiringBridge() (bridge, bool) {
	var first bridge
	found := false
	for _, b := range s.bridges() {
		if b.cert.NotAfter.Before(s.Anchor.Cert.NotAfter) && (!found || b.cert.NotAfter.Before(first.cert.NotAfter)) {
			first, found = b, true
		}
	}
	return first, found
}

// DeadlineWithin describes the deadline against now: how far it is, or that it has passed.
func DeadlineWithin(n *v1alpha1.NextRotation, now time.Time) string {
	left := n.Deadline.Sub(now)
	if left <= 0 {
		if b := n.BridgeNotAfter; b != nil {
			return fmt.Sprintf("passed %s ago: a rotation started now may not finish before a bridge certificate of the trust anchor's chain expires at %s", ReadableDuration(-left), b.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("passed %s ago: a rotation started now may not finish before the trust anchor expires at %s", ReadableDuration(-left), n.AnchorNotAfter.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("in %s", ReadableDuration(left))
}

// ReadableDuration renders a duration for people: "3d4h", "1h30m", "5m", "20s".
func ReadableDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= 48*time.Hour {
		days, hours := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
		if hours == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, hours)
	}
	if d >= time.Hour {
		d = d.Round(time.Minute)
	}
	return CompactDuration(d)
}
