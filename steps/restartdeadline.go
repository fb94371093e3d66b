package steps

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// DefaultNaturalChurnPeriod is spec.naturalChurnPeriod's default: a week of deploys, scaling and
// node drains.
const DefaultNaturalChurnPeriod = 7 * 24 * time.Hour

// NaturalChurnPeriod is spec.naturalChurnPeriod, defaulted.
func NaturalChurnPeriod(spec v1alpha1.TrustAnchorRotationSpec) time.Duration {
	if spec.NaturalChurnPeriod != nil && spec.NaturalChurnPeriod.Duration > 0 {
		return spec.NaturalChurnPeriod.Duration
	}
	return DefaultNaturalChurnPeriod
}

// RestartDeadlineOf is status.restartDeadline: in a cross-signed rotation whose one data-plane
// restart is the user's (spec.dataPlaneRestart.policy Manual), the moment the pods the cluster's
// churn has not replaced yet should be restarted by hand, counted from the phase's start
// (RemovingOldTrustRoots: the bundle holds the new anchor alone). Until every pod restarted, pods
// that trust only the old anchor rely on the bridge in the identity issuer's chain, and the next
// rotation cannot start. nil in any other phase or strategy, and with automatic restarts, which
// restart at once within their budget.
func RestartDeadlineOf(s *State, spec v1alpha1.TrustAnchorRotationSpec, phase v1alpha1.Phase, since *metav1.Time) *v1alpha1.RestartDeadline {
	if phase != v1alpha1.PhaseRemovingOldTrustRoots || since == nil || !s.CrossSigned() || s.automaticRestartsIn(spec) {
		return nil
	}
	p := NaturalChurnPeriod(spec)
	return &v1alpha1.RestartDeadline{Deadline: metav1.NewTime(since.Add(p)), Since: *since, ChurnPeriod: metav1.Duration{Duration: p}}
}

func (s *State) automaticRestartsIn(spec v1alpha1.TrustAnchorRotationSpec) bool {
	return spec.DataPlaneRestart.Policy == v1alpha1.Automatic
}

// restartDeadlineNote is what the blocking message says of the restart deadline.
func restartDeadlineNote(d *v1alpha1.RestartDeadline, now time.Time) string {
	when := d.Deadline.UTC().Format(time.RFC3339)
	if now.After(d.Deadline.Time) {
		return fmt.Sprintf("the restart was left to natural churn until %s (status.restartDeadline, spec.naturalChurnPeriod %s), which has passed: restart the workloads named", when, d.ChurnPeriod.Duration)
	}
	return fmt.Sprintf("the restart is left to natural churn until %s (status.restartDeadline, spec.naturalChurnPeriod %s)", when, d.ChurnPeriod.Duration)
}

// crossSignedStalledAfter is how long a cross-signed rotation may wait in a phase before it is
// Stalled: its two waits on the cluster's own pace are not blocked by a person until those run
// out. RenewingWorkloadCerts waits for proxies to refresh by themselves, which takes up to a day
// (70 % of Linkerd's default 24h certificate lifetime, and LINKERD2_PROXY_IDENTITY_MAX_REFRESH's
// default 24h); RemovingOldTrustRoots, with the restart left to churn, waits until
// status.restartDeadline.
func crossSignedStalledAfter(spec v1alpha1.TrustAnchorRotationSpec, phase v1alpha1.Phase, limit time.Duration) time.Duration {
	switch {
	case phase == v1alpha1.PhaseRenewingWorkloadCerts:
		return max(limit, 24*time.Hour)
	case phase == v1alpha1.PhaseRemovingOldTrustRoots && spec.DataPlaneRestart.Policy != v1alpha1.Automatic:
		return max(limit, NaturalChurnPeriod(spec))
	}
	return limit
}
