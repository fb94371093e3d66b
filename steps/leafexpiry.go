package steps

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// --- workload certificates their proxies did not renew -----------------------------------------
//
// Every certificate the mesh depends on is watched while Synced: the anchors of the trust bundle,
// the identity issuer and the bridges their chains carry by the expiry gauges and their alerts
// (they are read from Secrets and the ConfigMap), and the workload certificates by the probes.
// A workload certificate is renewed by its own proxy: linkerd2-proxy asks identity for a new
// one at 70 % of its lifetime and, when that fails, again at 70 % of what is left of the
// certificate it still holds (linkerd/proxy/identity-client/src/certify.rs, refresh_in; the
// bed's proxy does the same, test/meshsim/refresh.go). A certificate presented with less than
// ExpiringLeafPercent (9 %) of its lifetime left was presented past both attempts: the proxy cannot
// reach linkerd-identity (a NetworkPolicy, identity down, a ServiceAccount token identity
// refuses), and when the certificate expires every peer refuses the pod. One failure alone, at
// 70 %, is retried at 91 % and does not count: a proxy whose refresh met identity's own restart
// is not a pod at risk.
//
// The probes re-read every pod once its proxy should have renewed, and again at each retry
// after that (probe.CertTracker): about one handshake per pod per 70 % of the issuance
// lifetime (24h by default), whatever the rotation's refresh override.

// ExpiringLeafPercent: a workload certificate presented with less than this share of its
// lifetime left is one its proxy did not renew (see above).
const ExpiringLeafPercent = 9

// LeafExpiring reports whether a workload certificate valid from received (its NotBefore plus
// identity's clock skew allowance) until notAfter, presented at now, has less than
// ExpiringLeafPercent of its lifetime left.
func LeafExpiring(received, notAfter, now time.Time) bool {
	life := notAfter.Sub(received)
	return life > 0 && notAfter.Sub(now)*100 < life*ExpiringLeafPercent
}

// ExpiringLeaves summarises the live pods whose last probe read a certificate LeafExpiring:
// how many, and the soonest expiry among them with the pod presenting it.
type ExpiringLeaves struct {
	Pods    int
	Soonest time.Time
	Example string
}

// ExpiringLeavesMessage says what ExpiringLeaves found, why it matters, and what to look at.
func (s *State) ExpiringLeavesMessage() string {
	l := s.ExpiringLeaves
	left := "expired " + CompactDuration(s.Now.Sub(l.Soonest)) + " ago"
	if l.Soonest.After(s.Now) {
		left = "expires in " + CompactDuration(l.Soonest.Sub(s.Now))
	}
	return fmt.Sprintf("%d meshed pod(s) present a workload certificate with less than %d%% of its lifetime left: their proxies did not renew it at 70%% of its lifetime nor at the retry after; "+
		"the soonest, presented by %s, %s (%s); check that the proxies reach linkerd-identity (Deployment %s/%s available, NetworkPolicies, the proxy's log: \"Failed to obtain identity\")",
		l.Pods, ExpiringLeafPercent, l.Example, left, l.Soonest.UTC().Format(time.RFC3339), s.Config.LinkerdNamespace, s.Config.IdentityDeployment)
}

// projectExpiringLeaves sets condition WorkloadCertificatesExpiring from s.ExpiringLeaves. Until
// the operator has read every pod since it started (s.ExpiringLeavesPartial) a True condition
// stands as the previous leader left it: what it saw is not known to be over.
func projectExpiringLeaves(st *v1alpha1.TrustAnchorRotationStatus, s *State, generation int64, now time.Time) {
	c := metav1.Condition{
		Type: v1alpha1.ConditionWorkloadCertificatesExpiring, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonWorkloadCertificatesRenewed, Message: v1alpha1.MessageWorkloadCertificatesRenewed,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
	}
	if s.ExpiringLeaves.Pods > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonWorkloadCertificatesNotRenewed, s.ExpiringLeavesMessage()
	} else if prev := meta.FindStatusCondition(st.Conditions, c.Type); prev != nil && prev.Status == metav1.ConditionTrue && s.ExpiringLeavesPartial {
		return
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
