package steps

import (
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// BridgeExpiryProblem is what the status and `linkerd trust check` say when, in a cross-signed
// rotation whose one data-plane restart is left to the cluster's churn, the bridge expires
// before status.restartDeadline; "" otherwise. The bridge is the new trust anchor B as
// cert-manager issued it: B's subject and key signed by the previous anchor A, the first
// certificate of the anchor's Secret and an intermediate of every identity issuer's chain. Until
// every pod restarted onto the reduced bundle, pods that trust only A verify
// leaf -> issuer -> B -> A: rustls-webpki checks the validity of every presented certificate
// (check_issuer_independent_properties), so once B expires those pods reject every new chain,
// and Linkerd identity clamps each workload certificate to the earliest expiry in its issuer's
// chain (pkg/tls/ca.go findFirstExpiration), B's included (docs/design/fewer-restarts.md). The
// deadline must therefore come before the bridge's NotAfter.
func BridgeExpiryProblem(s *State, deadline *v1alpha1.RestartDeadline) string {
	if deadline == nil || !s.CrossSigned() || !s.Anchor.Usable() {
		return ""
	}
	bridge := s.Anchor.Cert
	if bridge.CheckSignatureFrom(bridge) == nil {
		return "" // a self-signed anchor bridges nothing
	}
	if !bridge.NotAfter.Before(deadline.Deadline.Time) {
		return ""
	}
	return fmt.Sprintf("the bridge certificate, trust anchor %s in Secret %s (signed by the previous anchor), expires at %s, before status.restartDeadline %s: "+
		"from then on pods that still trust only the previous anchor reject every new certificate chain, and linkerd-identity issues certificates that expire with it; "+
		"restart the remaining workloads before %s, or shorten spec.naturalChurnPeriod (%s)",
		ShortFingerprint(s.Anchor.Fingerprint()), s.Anchor.Ref(), bridge.NotAfter.UTC().Format(time.RFC3339),
		deadline.Deadline.UTC().Format(time.RFC3339), bridge.NotAfter.UTC().Format(time.RFC3339), deadline.ChurnPeriod.Duration)
}
