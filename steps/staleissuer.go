package steps

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// --- identity serving a stale issuer ------------------------------------------------------------
//
// Between rotations cert-manager renews the identity issuer about daily, and Linkerd's identity
// picks the new one up by itself: it watches its issuer volume's directory and loads the files
// again when the kubelet swaps them (linkerd2 pkg/identity/service.go, Service.Run). When that
// reload is missed (linkerd2 #15109: no "Updated identity issuer" for one renewal), identity
// goes on signing with the issuer it has, and caps every certificate at that issuer's expiry
// (pkg/tls/ca.go, findFirstExpiration): once it expires, every proxy's certificate expires with
// it. Nothing else in the cluster says so: the stale issuer is on the same anchor, so every
// certificate still verifies.
//
// The operator sees it from the probes it makes anyway — every pod is probed as it starts, and
// its leaf says when it was issued and by which issuer — with no extra read: a certificate
// issued later than IssuerReloadTolerance after the operator first saw the issuer in the Secret
// must be signed by that issuer. One signed by another, from a moment when an identity pod
// running now was already up, is identity serving a stale issuer. A restart of identity cures
// it, and is safe between rotations: a new identity pod loads the issuer from the Secret and the
// roots from the trust-roots ConfigMap, and refuses to start unless the first chains to the
// second (controller/cmd/identity/main.go verifies the issuer against the roots), which the
// operator checks before it restarts anything.

// DefaultIssuerReloadTolerance is how long after the operator first saw an issuer in the Secret
// identity may still sign with the one before: the kubelet refreshes a Secret volume at the
// pod's next sync (--sync-frequency, 1m by default, plus up to as much jitter), and identity
// reloads on the files' change at once. The proxies' own refresh does not enter into it: the
// evidence is the issue time of a certificate, read from the certificate itself.
const DefaultIssuerReloadTolerance = 5 * time.Minute

// StaleLeaves are the workload certificates the probes read that were issued after identity
// should have loaded the issuer in the Secret, signed by another issuer, one entry per signer.
type StaleLeaves struct {
	// Signer is the issuer that signed them.
	Signer *x509.Certificate
	// Pods is how many live pods present one, and Example one of them ("namespace/name").
	Pods    int
	Example string
	// Latest is when the most recent of them was issued.
	Latest time.Time
}

// IssuerObservation is when the operator first saw the issuer in the Secret
// (status.activeIssuerFingerprint and status.activeIssuerObservedTime).
type IssuerObservation struct {
	Fingerprint string
	At          time.Time
}

// issuerWatchFromStatus reads what the stale-issuer watch keeps in the status: the issuer last
// observed and since when, and the condition the previous leader left.
func (s *State) issuerWatchFromStatus(st *v1alpha1.TrustAnchorRotationStatus) {
	s.IssuerObserved = IssuerObservation{Fingerprint: st.ActiveIssuerFingerprint}
	if st.ActiveIssuerObservedTime != nil {
		s.IssuerObserved.At = st.ActiveIssuerObservedTime.Time
	}
	s.StaleReported = ""
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionIdentityIssuerStale); c != nil && c.Status == metav1.ConditionTrue {
		s.StaleReported = c.Message
	}
}

// IssuerObservedAt is when the operator first saw the issuer the Secret holds now: the status's
// time when it names that issuer, now otherwise (the issuer is new, or the status has none: an
// operator installed later waits for certificates issued from then on). Zero when the issuer is
// unusable.
func (s *State) IssuerObservedAt(now time.Time) time.Time {
	fp := s.Issuer.Fingerprint()
	switch {
	case fp == "":
		return time.Time{}
	case fp == s.IssuerObserved.Fingerprint && !s.IssuerObserved.At.IsZero():
		return s.IssuerObserved.At
	}
	return now
}

// StaleIssuer returns the stale issuer's certificates that say identity still signs with it now,
// nil when none do or when it is not for the operator to say: during a rotation (its steps
// restart identity onto the issuer, and identity keeps a previous issuer on purpose meanwhile)
// or at bootstrap. Certificates signed by another issuer before every identity pod running now
// started were signed by a pod that has gone: a restarted identity reads the Secret at start.
// Of several stale issuers, the one that signed most recently.
func (s *State) StaleIssuer(step string) *StaleLeaves {
	if !Watching(step) || s.Rotating() || !s.Issuer.Usable() {
		return nil
	}
	var oldest time.Time
	for _, p := range s.ControlPlane[s.Config.IdentityDeployment].Members {
		if oldest.IsZero() || p.Started.Before(oldest) {
			oldest = p.Started
		}
	}
	var out *StaleLeaves
	for i := range s.StaleLeaves {
		l := &s.StaleLeaves[i]
		if l.Signer == nil || bytes.Equal(l.Signer.Raw, s.Issuer.Cert.Raw) || !oldest.IsZero() && !l.Latest.After(oldest) {
			continue
		}
		if out == nil || l.Latest.After(out.Latest) {
			out = l
		}
	}
	return out
}

// StaleIssuerCarried reports whether the status's IdentityIssuerStale=True stands although
// StaleIssuer finds nothing: the operator restarted and has not probed every pod again yet, so
// what the previous leader saw is not known to be over.
func (s *State) StaleIssuerCarried(step string) bool {
	return s.StaleReported != "" && s.StaleLeavesPartial && Watching(step) && !s.Rotating() && s.StaleIssuer(step) == nil
}

// StaleIssuerMessage says what StaleIssuer found, what it costs, and what is done about it.
func (s *State) StaleIssuerMessage(l *StaleLeaves) string {
	return fmt.Sprintf("linkerd-identity still signs workload certificates with issuer %s (expires %s), not with issuer %s that Secret %s has held since %s: "+
		"%d pod(s) present a certificate it issued since, the latest at %s (example: %s); identity missed the reload of its issuer, and every certificate it signs expires with %s",
		ShortFingerprint(Fingerprint(l.Signer)), l.Signer.NotAfter.UTC().Format(time.RFC3339), ShortFingerprint(s.Issuer.Fingerprint()), s.Issuer.Ref(),
		s.IssuerObservedAt(s.Now).UTC().Format(time.RFC3339), l.Pods, l.Latest.UTC().Format(time.RFC3339), l.Example, ShortFingerprint(Fingerprint(l.Signer)))
}

// staleIssuerRestartProblem says why the operator must not restart identity onto the issuer in
// the Secret, "" when it may: the issuer must chain to an anchor of the ConfigMap's bundle, which
// a new identity pod loads as its roots, or identity would not start.
func (s *State) staleIssuerRestartProblem() string {
	for _, a := range s.Bundle.Certs {
		if bytes.Equal(a.Raw, s.Issuer.Cert.Raw) || SignedBy(s.Issuer.Cert, a) || ChainsTo(append([]*x509.Certificate{s.Issuer.Cert}, s.Issuer.Chain...), a) {
			return ""
		}
	}
	return fmt.Sprintf("the issuer in Secret %s chains to no anchor of ConfigMap %s/%s: a restarted identity would refuse it and not start",
		s.Issuer.Ref(), s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
}

// staleIssuerToken is the token of the restart for the stale issuer l: the checkpoint's when it
// is for that issuer already (the restart is made once), a fresh one otherwise.
func staleIssuerToken(s *State, l *StaleLeaves, token string) string {
	fp := ShortFingerprint(Fingerprint(l.Signer))
	if t, err := ParseActToken(token); err == nil && t.Verb == TokenStaleIssuer && len(t.Args) == 1 && t.Args[0] == fp {
		return token
	}
	return ActToken{Stamp: NewActStamp(s.Now), Verb: TokenStaleIssuer, Args: []string{fp}}.String()
}

// observeStaleIssuer is detect-anchor-rotation's decision while identity serves a stale issuer.
func observeStaleIssuer(s *State, l *StaleLeaves, token string) workflow.Decision {
	msg := s.StaleIssuerMessage(l)
	ns, name := s.Config.LinkerdNamespace, s.Config.IdentityDeployment
	if s.Spec.StaleIssuerRestart != v1alpha1.Automatic {
		return workflow.Waiting(v1alpha1.ReasonIdentityIssuerStale, fmt.Sprintf(
			"%s; restart it (kubectl rollout restart -n %s deploy/%s), or set spec.staleIssuerRestart: Automatic", msg, ns, name))
	}
	if p := s.staleIssuerRestartProblem(); p != "" {
		return workflow.Waiting(v1alpha1.ReasonIdentityIssuerStale, msg+"; not restarting it: "+p)
	}
	if tok := staleIssuerToken(s, l, token); tok == token && s.ControlPlane[name].RestartedAt == token {
		// Restarted for this issuer already: the certificates it signed go with the pods that
		// ran before the restart, or identity missed the reload at start too, which a second
		// restart would not cure.
		return workflow.Waiting(v1alpha1.ReasonIdentityIssuerStale, fmt.Sprintf(
			"%s; Deployment %s/%s was restarted for it (restartedAt %q): waiting for every identity pod started before to go", msg, ns, name, token))
	}
	return workflow.ActNeeded(v1alpha1.ReasonIdentityIssuerStale, fmt.Sprintf("%s; restarting Deployment %s/%s (spec.staleIssuerRestart Automatic)", msg, ns, name))
}

// actStaleIssuer restarts identity under the stale issuer's token, once.
func actStaleIssuer(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, token string) error {
		name := s.Config.IdentityDeployment
		if s.ControlPlane[name].RestartedAt == token {
			return nil
		}
		return w.RestartDeployment(ctx, s.Config.LinkerdNamespace, name, token)
	}
}

func describeStaleIssuer(s *State) []string {
	return []string{fmt.Sprintf("restart Deployment %s/%s: it signs with a stale issuer", s.Config.LinkerdNamespace, s.Config.IdentityDeployment)}
}
