package steps

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Linked clusters share one trust anchor: a proxy in west validates east's gateway (or, on a
// flat network, east's pods) against its own bundle, and the reverse. So each cluster's operator
// holds its rotation at two remote gates, reading every linked cluster's TrustAnchorRotation
// (one object per cluster; it never writes there):
//
//   - wait-for-remote-trust-roots, before restart-identity: no cluster lets its identity load a
//     new-anchor issuer until every linked cluster's data plane runs with a bundle that holds the
//     new anchor (status.trustBundle converged, its anchors holding it);
//   - wait-for-remote-certificates, before retire-previous-anchor: no cluster drops the old
//     anchor until every linked cluster's meshed pods present certificates on the new anchor's
//     path (status.workloadCertificates converged on the new anchor).
//
// A remote that cannot be read, whose report is stale, whose operator does not report, or which
// is on another anchor pair holds the gate: missing information never counts as converged. With
// no linked cluster the gates pass at once, so a single-cluster rotation never shows their
// phase, WaitingForRemoteClusters.

// DefaultRemoteStaleAfter is how old the last read of a remote cluster's TrustAnchorRotation may
// be before its report counts as stale. The operator's watch on it reconnects every minute or so
// (each reconnection is a read), and any change is read at once.
const DefaultRemoteStaleAfter = 3 * time.Minute

// Remote is a linked cluster as the operator last observed it: its TrustAnchorRotation.
type Remote struct {
	// Name of the cluster (a Link's target cluster name, or spec.remoteClusters[].name).
	Name string
	// Source says where it was found: "Link <ns>/<name>" or "spec.remoteClusters".
	Source string
	// RotationName is the remote TrustAnchorRotation's name.
	RotationName string
	// Problem says why the remote TrustAnchorRotation cannot be read now (credentials,
	// connection, permissions); "" while the operator's watch on it is live.
	Problem string
	// Found is false when the remote cluster has no TrustAnchorRotation of that name.
	Found bool
	// Generation and Status are the remote TrustAnchorRotation's, when Found.
	Generation int64
	Status     v1alpha1.TrustAnchorRotationStatus
	// LastObserved is when the remote TrustAnchorRotation was last read; zero if never.
	LastObserved time.Time
}

// RemoteGate is one of the two remote gates.
type RemoteGate int

const (
	// GateTrustRoots: every linked data plane runs with a bundle that holds the new anchor.
	GateTrustRoots RemoteGate = iota + 1
	// GateCertificates: every linked cluster's meshed pods present new-anchor certificates.
	GateCertificates
)

// waitForRemoteTrustRootsStep is the first remote gate. It passes at once without linked
// clusters: a single-cluster rotation never shows it.
func waitForRemoteTrustRootsStep() Step {
	return Step{
		Step: remoteGateStep(StepWaitForRemoteTrustRoots, GateTrustRoots,
			"Wait until every linked cluster's data plane runs with a trust bundle holding the new anchor; passes at once without linked clusters."),
		Gate: GateTrustRoots, ReliesOnBundle: true,
	}
}

// waitForRemoteCertificatesStep is the second remote gate.
func waitForRemoteCertificatesStep() Step {
	return Step{
		Step: remoteGateStep(StepWaitForRemoteCertificates, GateCertificates,
			"Wait until every linked cluster's meshed pods present certificates on the new anchor's path; passes at once without linked clusters."),
		Gate: GateCertificates, ReliesOnBundle: true,
	}
}

func remoteGateStep(name string, gate RemoteGate, doc string) workflow.Step[*State] {
	return workflow.Step[*State]{
		Name: name, Phase: string(v1alpha1.PhaseWaitingForRemoteClusters), Doc: doc,
		Observe: observeRemotes(gate), Describe: describeRemotes(gate),
	}
}

// RemoteGateAt returns the gate a step is, and whether it is one.
func RemoteGateAt(rot *Ordered, step string) (RemoteGate, bool) {
	g := rot.named(step).Gate
	return g, g != 0
}

// Remote blocking reasons.
const (
	ReasonRemoteUnreadable         = "RemoteUnreadable"
	ReasonRemoteRotationMissing    = "RemoteRotationMissing"
	ReasonRemoteReportStale        = "RemoteReportStale"
	ReasonRemoteOperatorSilent     = "RemoteOperatorNotReporting"
	ReasonRemoteAnchorsDiffer      = "RemoteAnchorsDiffer"
	ReasonRemoteAnchorNotReceived  = "RemoteAnchorNotReceived"
	ReasonRemoteTrustBundlePending = "RemoteTrustBundleConverging"
	ReasonRemoteCertificatesBehind = "RemoteCertificatesRenewing"
)

// RemoteAnchor is a cluster's current trust-anchor fingerprint, from its status: Project writes
// the trust-anchor Secret's fingerprint first in sourceFingerprints, then the previous anchor's,
// each only when usable. "" when the remote's anchor is unusable.
func RemoteAnchor(st *v1alpha1.TrustAnchorRotationStatus) string {
	switch {
	case len(st.SourceFingerprints) == 2:
		return st.SourceFingerprints[0].Fingerprint
	case len(st.SourceFingerprints) == 1 && st.PreviousAnchorFingerprint == "":
		return st.SourceFingerprints[0].Fingerprint
	}
	return ""
}

// CheckRemote decides whether a linked cluster lets this cluster's rotation pass a gate: ok, or
// a reason and a message that names the cluster. newAnchor and previous are this cluster's
// trust-anchor fingerprints (the rotation's new anchor and the one it retires).
func CheckRemote(r Remote, gate RemoteGate, newAnchor, previous string, now time.Time, staleAfter time.Duration) (reason, message string, ok bool) {
	name := fmt.Sprintf("cluster %s", r.Name)
	rot := r.RotationName
	if rot == "" {
		rot = DefaultRotationName
	}
	switch {
	case r.Problem != "":
		return ReasonRemoteUnreadable, fmt.Sprintf("%s: cannot read its TrustAnchorRotation %s (%s): %s", name, rot, r.Source, r.Problem), false
	case r.LastObserved.IsZero():
		return ReasonRemoteUnreadable, fmt.Sprintf("%s: its TrustAnchorRotation %s (%s) has not been read yet", name, rot, r.Source), false
	case !r.Found:
		return ReasonRemoteRotationMissing, fmt.Sprintf("%s has no TrustAnchorRotation %s: install the trust-rotation operator there", name, rot), false
	}
	if staleAfter <= 0 {
		staleAfter = DefaultRemoteStaleAfter
	}
	if age := now.Sub(r.LastObserved); age > staleAfter {
		return ReasonRemoteReportStale, fmt.Sprintf("%s: its report was last read %s ago (more than %s)", name, age.Round(time.Second), staleAfter), false
	}
	st := &r.Status
	if st.Checkpoint == nil || st.ObservedGeneration < r.Generation || st.TrustBundle == nil || st.WorkloadCertificates == nil {
		return ReasonRemoteOperatorSilent, fmt.Sprintf("%s: its TrustAnchorRotation %s has no up-to-date report: is its trust-rotation operator running?", name, rot), false
	}
	ours := []string{newAnchor, previous}
	theirs := []string{RemoteAnchor(st), st.PreviousAnchorFingerprint}
	for _, fp := range theirs {
		if fp == "" || !slices.Contains(ours, fp) {
			return ReasonRemoteAnchorsDiffer, fmt.Sprintf("%s is on trust anchors [%s (current), %s (previous)], this cluster on [%s (new), %s (previous)]: linked clusters must share the trust anchor",
				name, ShortFingerprint(theirs[0]), ShortFingerprint(theirs[1]), ShortFingerprint(newAnchor), ShortFingerprint(previous)), false
		}
	}
	if theirs[0] != newAnchor {
		return ReasonRemoteAnchorNotReceived, fmt.Sprintf("%s: its trust anchor Secret does not hold the new anchor %s yet (it holds %s)", name, ShortFingerprint(newAnchor), ShortFingerprint(theirs[0])), false
	}
	switch gate {
	case GateTrustRoots:
		c := st.TrustBundle
		if !slices.Contains(c.Anchors, newAnchor) {
			return ReasonRemoteTrustBundlePending, fmt.Sprintf("%s: its data plane does not run with a bundle holding the new anchor %s yet (phase %s)", name, ShortFingerprint(newAnchor), orSynced(st.Phase)), false
		}
		if c.Status != v1alpha1.Converged {
			return ReasonRemoteTrustBundlePending, fmt.Sprintf("%s: %d of %d meshed pod(s) run with a trust bundle holding the new anchor %s (phase %s)", name, c.ConvergedPods, c.TargetPods, ShortFingerprint(newAnchor), orSynced(st.Phase)), false
		}
	case GateCertificates:
		c := st.WorkloadCertificates
		if !slices.Equal(c.Anchors, []string{newAnchor}) || c.Status != v1alpha1.Converged {
			converged := int32(0)
			if slices.Equal(c.Anchors, []string{newAnchor}) {
				converged = c.ConvergedPods
			}
			return ReasonRemoteCertificatesBehind, fmt.Sprintf("%s: %d of %d meshed pod(s) present a certificate on the new anchor %s (phase %s)", name, converged, c.TargetPods, ShortFingerprint(newAnchor), orSynced(st.Phase)), false
		}
	}
	return "", "", true
}

func orSynced(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return v1alpha1.PhaseSynced
	}
	return p
}

// observeRemotes is a remote gate's observation: done when every linked cluster lets the
// rotation pass (at once when there is none), else waiting on the first that holds it, the
// message naming every cluster that does.
func observeRemotes(gate RemoteGate) func(*State, string) workflow.Decision {
	return func(s *State, _ string) (d workflow.Decision) {
		defer s.timedByAnchor(&d)
		if d := anchorProblem(s); d != nil {
			return *d
		}
		if len(s.Remotes) == 0 {
			return workflow.Completed("NoRemoteClusters", "no linked cluster")
		}
		var reason string
		var msgs, names []string
		var stale []time.Time
		defer func() { d = d.RecheckBy(s.after(stale...)) }()
		for _, r := range s.Remotes {
			names = append(names, r.Name)
			if !r.LastObserved.IsZero() {
				// A report that is not read again turns stale with nothing else changing.
				stale = append(stale, r.LastObserved.Add(s.remoteStaleAfter()+time.Second))
			}
			why, msg, ok := CheckRemote(r, gate, s.Anchor.Fingerprint(), s.Previous.Fingerprint(), s.Now, s.RemoteStaleAfter)
			if ok {
				continue
			}
			if reason == "" {
				reason = why
			}
			msgs = append(msgs, msg)
		}
		if reason != "" {
			return workflow.Waiting(reason, "Waiting for linked clusters: "+strings.Join(msgs, "; "))
		}
		what := "data planes run with a trust bundle holding"
		if gate == GateCertificates {
			what = "meshed pods present certificates on"
		}
		return workflow.Completed("RemoteClustersConverged", fmt.Sprintf("linked cluster(s) %s: %s the new anchor %s", strings.Join(names, ", "), what, ShortFingerprint(s.Anchor.Fingerprint())))
	}
}

func describeRemotes(gate RemoteGate) func(*State) []string {
	return func(s *State) []string {
		var out []string
		for _, r := range s.Remotes {
			what := "its data plane trusts the new anchor"
			if gate == GateCertificates {
				what = "its meshed pods present new-anchor certificates"
			}
			out = append(out, fmt.Sprintf("wait until cluster %s (%s) reports %s", r.Name, r.Source, what))
		}
		return out
	}
}

// remoteStatuses projects the linked clusters into status.remoteClusters: what each reports,
// and why it blocks the gate at step, if the step is one. The published lastObserved advances
// when the rest of the entry changes, or once it is a minute behind: each cluster watches the
// others' status, so publishing every read would have linked operators write each other's
// reads back and forth.
func remoteStatuses(rot *Ordered, prev []v1alpha1.RemoteClusterStatus, s *State, step string) []v1alpha1.RemoteClusterStatus {
	if len(s.Remotes) == 0 {
		return nil
	}
	gate, atGate := RemoteGateAt(rot, step)
	out := make([]v1alpha1.RemoteClusterStatus, 0, len(s.Remotes))
	for _, r := range s.Remotes {
		e := v1alpha1.RemoteClusterStatus{Name: r.Name, Source: r.Source}
		if r.Found { // the last report read, also while the watch is down
			st := r.Status.DeepCopy()
			e.Phase = orSynced(st.Phase)
			if st.Checkpoint != nil {
				e.Rotation = st.Checkpoint.Rotation
			}
			e.TrustBundle, e.WorkloadCertificates = st.TrustBundle, st.WorkloadCertificates
			if st.TrustBundle != nil {
				e.Anchors = st.TrustBundle.Anchors
			}
		}
		if atGate && s.Rotating() {
			if why, msg, ok := CheckRemote(r, gate, s.Anchor.Fingerprint(), s.Previous.Fingerprint(), s.Now, s.RemoteStaleAfter); !ok {
				e.BlockingReason, e.BlockingMessage = why, msg
			}
		}
		if !r.LastObserved.IsZero() {
			t := metav1.NewTime(r.LastObserved)
			e.LastObserved = &t
			for _, p := range prev {
				if p.Name != r.Name || p.LastObserved == nil {
					continue
				}
				q := p.DeepCopy()
				q.LastObserved = nil
				e.LastObserved = nil
				same := equality.Semantic.DeepEqual(*q, e)
				e.LastObserved = &t
				if same && r.LastObserved.Sub(p.LastObserved.Time) < time.Minute {
					e.LastObserved = p.LastObserved.DeepCopy()
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// remoteStaleAfter is RemoteStaleAfter, defaulted.
func (s *State) remoteStaleAfter() time.Duration {
	if s.RemoteStaleAfter <= 0 {
		return DefaultRemoteStaleAfter
	}
	return s.RemoteStaleAfter
}
