package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// --- an emergency rotation (rotate --emergency) ------------------------------------------------
//
// After a key compromise the old anchor must leave every pod's roots as fast as the mesh can
// restart. The standard order loses no pair — expand, restart everything, switch the issuer,
// restart, reduce, restart — and what makes it slow is waiting: for maintenance windows, restart
// budgets, the proxies' own refresh, the user's renewal of the issuer. An emergency rotation is
// that order with every wait lifted (docs/design/recovery.md, case 4): rotate sets the spec that
// lifts them before it renews the anchor, and records the request in an annotation that
// inspect --history reads back as a post-incident summary. The operator itself runs the rotation
// as any other.

// EmergencyAnnotation records on the TrustAnchorRotation the last emergency rotation rotate
// --emergency started: the anchor it retires as compromised and when it was asked for (JSON,
// emergencyRequest).
const EmergencyAnnotation = "trust.linkerd.io/emergency-rotation"

// emergencyRequest is EmergencyAnnotation's value.
type emergencyRequest struct {
	// Compromised is the fingerprint of the anchor the emergency rotation retires.
	Compromised string    `json:"compromised"`
	RequestedAt time.Time `json:"requestedAt"`
	// DuringRotation is set when the request met a rotation away from Compromised in progress:
	// the emergency lifted its waits. Recorded rather than read from the times, which are
	// seconds apart or not at all when the rotation started just before the request.
	DuringRotation bool `json:"duringRotation,omitempty"`
}

// minRefreshInterval is the shortest workloadCertificateRefreshInterval the CRD accepts: the
// proxies' LINKERD2_PROXY_IDENTITY_MIN_REFRESH.
const minRefreshInterval = "10s"

// emergencyView is what an emergency rotation's plan prints before the steps: what it costs,
// and what rotate sets.
type emergencyView struct {
	Compromised string `json:"compromised"`
	// InProgress is "phase P, step S" when a rotation away from the compromised anchor is in
	// progress: the emergency lifts its waits and renews nothing.
	InProgress string `json:"inProgress,omitempty"`
	// Workloads and Pods are the meshed workloads and pods the rotation restarts, outside the
	// control plane.
	Workloads int `json:"workloads"`
	Pods      int `json:"pods"`
	// LostPairs says which pods lose mTLS to which, and for how long.
	LostPairs string `json:"lostPairs"`
	// TrustedUntil says until when pods trust the compromised anchor.
	TrustedUntil string   `json:"trustedUntil"`
	Restarts     string   `json:"restarts"`
	Sets         []string `json:"sets"`
	Restore      string   `json:"restore,omitempty"`

	patch map[string]any
}

// emergencyFacts says what an emergency rotation away from the anchor the mesh trusts costs,
// and the spec that lifts every wait.
func emergencyFacts(s *steps.State, spec v1alpha1.TrustAnchorRotationSpec, pods []*podindex.Pod, inProgress string) *emergencyView {
	v := &emergencyView{Compromised: s.Previous.Fingerprint(), InProgress: inProgress}
	workloads := map[string]bool{}
	for _, p := range pods {
		if p.Meshed && p.Alive && !isControlPlane(s, p) {
			v.Pods++
			if p.Workload != "" {
				workloads[p.Workload] = true
			}
		}
	}
	v.Workloads = len(workloads)
	budget := int32(min(max(v.Workloads, 1), 10000))
	v.LostPairs = "none: the standard order keeps every pair of pods verifying each other (each pod trusts both anchors before any certificate of the new one is issued, and keeps trusting the old one until every certificate of it is gone)"
	v.TrustedUntil = fmt.Sprintf("the control plane until %s, every meshed pod until its restart at %s: three rounds of restarts (the expanded bundle, the new issuer, the reduced bundle), each of every workload at once",
		steps.StepRefreshControlPlaneReduced, steps.StepRemoveOldTrustRoots)
	v.Restarts = fmt.Sprintf("linkerd-identity, linkerd-destination and linkerd-proxy-injector 3 times each; every meshed workload (%d, %d pods) twice, and a third time where its proxies have not moved onto the new issuer within twice %s",
		v.Workloads, v.Pods, minRefreshInterval)
	if inProgress != "" {
		v.TrustedUntil = fmt.Sprintf("every meshed pod until its restart at %s: the rotation in progress (%s) goes on from where it is, each remaining round of restarts of every workload at once",
			steps.StepRemoveOldTrustRoots, inProgress)
		v.Restarts = "what remains of the rotation in progress, at most: " + v.Restarts
	}

	v.patch = map[string]any{}
	var restore []string
	set := func(field string, value any, text string, was any) {
		v.patch[field] = value
		v.Sets = append(v.Sets, text)
		b, _ := json.Marshal(was)
		restore = append(restore, fmt.Sprintf("%q:%s", field, b))
	}
	if spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		set("identityIssuerRenewal", v1alpha1.Automatic, "identityIssuerRenewal: Automatic", nilIfEmpty(string(spec.IdentityIssuerRenewal)))
	}
	if spec.Strategy == v1alpha1.StrategyCrossSigned && inProgress == "" { // a rotation in progress keeps its checkpoint's strategy
		set("strategy", v1alpha1.StrategyStandard, "strategy: Standard (a cross-signed rotation would keep handing out a chain through the compromised anchor)", string(spec.Strategy))
	}
	if iv := spec.WorkloadCertificateRefreshInterval; iv == nil || iv.Duration > 10*time.Second {
		was := any(nil)
		if iv != nil {
			was = iv.Duration.String()
		}
		set("workloadCertificateRefreshInterval", minRefreshInterval, "workloadCertificateRefreshInterval: "+minRefreshInterval, was)
	}
	r := spec.DataPlaneRestart
	if r.Policy != v1alpha1.Automatic || r.MaxConcurrent != budget || r.MaxConcurrentPerNamespace != budget || len(r.MaintenanceWindows) > 0 {
		v.patch["dataPlaneRestart"] = map[string]any{"policy": v1alpha1.Automatic, "maxConcurrent": budget, "maxConcurrentPerNamespace": budget, "maintenanceWindows": nil}
		text := fmt.Sprintf("dataPlaneRestart: policy Automatic, maxConcurrent %d, maxConcurrentPerNamespace %d", budget, budget)
		if len(r.MaintenanceWindows) > 0 {
			text += fmt.Sprintf(", its %d maintenance window(s) removed", len(r.MaintenanceWindows))
		}
		v.Sets = append(v.Sets, text)
		was, _ := json.Marshal(map[string]any{"policy": orDefault(string(r.Policy), string(v1alpha1.Manual)), "maxConcurrent": nilIfZero(r.MaxConcurrent),
			"maxConcurrentPerNamespace": nilIfZero(r.MaxConcurrentPerNamespace), "maintenanceWindows": r.MaintenanceWindows})
		restore = append(restore, fmt.Sprintf("%q:%s", "dataPlaneRestart", was))
	}
	if len(restore) > 0 {
		v.Restore = fmt.Sprintf(`kubectl patch trustanchorrotation %%s --type=merge -p '{"spec":{%s}}'`, strings.Join(restore, ","))
	}
	return v
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nilIfZero(n int32) any {
	if n == 0 {
		return nil
	}
	return n
}

// applyTo returns spec with what rotate --emergency sets.
func (v *emergencyView) applyTo(spec v1alpha1.TrustAnchorRotationSpec) v1alpha1.TrustAnchorRotationSpec {
	b, err := json.Marshal(v.patch)
	if err != nil {
		return spec
	}
	out := *spec.DeepCopy()
	if r, ok := v.patch["dataPlaneRestart"]; ok && r != nil {
		out.DataPlaneRestart.MaintenanceWindows = nil
	}
	_ = json.Unmarshal(b, &out)
	return out
}

// renderEmergency prints the emergency rotation's costs before the steps.
func renderEmergency(w io.Writer, rotation string, v *emergencyView) {
	if v.InProgress != "" {
		fmt.Fprintf(w, "\nEmergency: the rotation in progress away from the trust anchor %s (compromised) goes on with every wait lifted; the anchor is not renewed again:\n", steps.ShortFingerprint(v.Compromised))
	} else {
		fmt.Fprintf(w, "\nEmergency rotation away from the trust anchor %s (compromised), every wait lifted:\n", steps.ShortFingerprint(v.Compromised))
	}
	fmt.Fprintf(w, "  pods that lose mTLS: %s\n", v.LostPairs)
	fmt.Fprintf(w, "  the compromised anchor stays trusted by %s\n", v.TrustedUntil)
	fmt.Fprintf(w, "  it restarts: %s\n", v.Restarts)
	if len(v.Sets) > 0 {
		fmt.Fprintf(w, "  it sets on TrustAnchorRotation %s: %s\n", rotation, strings.Join(v.Sets, "; "))
	}
}

// emergencySummary is inspect --history's post-incident summary of the emergency rotation the
// annotation records, read from the rotation's record.
type emergencySummary struct {
	Compromised string    `json:"compromised"`
	RequestedAt time.Time `json:"requestedAt"`
	// DuringRotation: the rotation was in progress at the request.
	DuringRotation bool `json:"duringRotation,omitempty"`
	// Record is the rotation's record, absent until the operator started it.
	Started *time.Time `json:"started,omitempty"`
	// IssuerSwitched is when identity signed under the new anchor alone (the end of
	// WaitingForIdentityRotation), CertificatesMoved when every pod presented a certificate of
	// it (the end of RenewingWorkloadCerts), Untrusted when no pod trusted the compromised anchor
	// any more (the rotation's end).
	IssuerSwitched    *time.Time `json:"issuerSwitched,omitempty"`
	CertificatesMoved *time.Time `json:"certificatesMoved,omitempty"`
	Untrusted         *time.Time `json:"untrusted,omitempty"`
	Outcome           string     `json:"outcome,omitempty"`
	Restarts          string     `json:"restarts,omitempty"`
	Faults            []string   `json:"faults,omitempty"`
}

// readEmergency reads the annotation and the record of the rotation away from the anchor it
// names; nil when the TrustAnchorRotation records no emergency rotation.
func readEmergency(tar *v1alpha1.TrustAnchorRotation) (*emergencySummary, error) {
	raw, ok := tar.Annotations[EmergencyAnnotation]
	if !ok {
		return nil, nil
	}
	var req emergencyRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		return nil, fmt.Errorf("TrustAnchorRotation %s: annotation %s does not parse: %v", tar.Name, EmergencyAnnotation, err)
	}
	sum := &emergencySummary{Compromised: req.Compromised, RequestedAt: req.RequestedAt, DuringRotation: req.DuringRotation}
	for _, r := range tar.Status.History {
		// The rotation away from the compromised anchor started at the request, or was in
		// progress then (rotate --emergency during a rotation).
		if r.From != req.Compromised || r.FinishTime != nil && r.FinishTime.Time.Before(req.RequestedAt.Truncate(time.Second)) {
			continue
		}
		start := r.StartTime.Time
		sum.Started, sum.Outcome, sum.Restarts, sum.Faults = &start, string(r.Outcome), restartsCell(r.Restarts), r.Faults
		at := start
		for _, p := range r.Phases {
			at = at.Add(p.Duration.Duration)
			end := at
			switch p.Phase {
			case v1alpha1.PhaseWaitingForIdentityRotation:
				sum.IssuerSwitched = &end
			case v1alpha1.PhaseRenewingWorkloadCerts:
				sum.CertificatesMoved = &end
			}
		}
		if r.FinishTime != nil && r.Outcome == v1alpha1.RotationCompleted {
			end := r.FinishTime.Time
			sum.Untrusted = &end
		}
		break
	}
	return sum, nil
}

// renderEmergencySummary prints the post-incident summary.
func renderEmergencySummary(w io.Writer, s *emergencySummary, now time.Time) {
	fmt.Fprintf(w, "\nEmergency rotation away from the compromised trust anchor %s, requested at %s:\n", steps.ShortFingerprint(s.Compromised), s.RequestedAt.UTC().Format(time.RFC3339))
	after := func(t *time.Time, what string) {
		if t == nil {
			fmt.Fprintf(w, "  %s: not yet\n", what)
			return
		}
		fmt.Fprintf(w, "  %s: %s (%s after the request)\n", what, t.UTC().Format(time.RFC3339), steps.CompactDuration(t.Sub(s.RequestedAt).Round(time.Second)))
	}
	if s.Started == nil {
		fmt.Fprintf(w, "  not started yet (%s since the request)\n", steps.CompactDuration(now.Sub(s.RequestedAt).Round(time.Second)))
		return
	}
	if s.DuringRotation || s.Started.Before(s.RequestedAt.Truncate(time.Second)) {
		fmt.Fprintf(w, "  rotation started: %s, in progress at the request (its waits lifted then)\n", s.Started.UTC().Format(time.RFC3339))
	} else {
		after(s.Started, "rotation started")
	}
	after(s.IssuerSwitched, "identity signs under the new anchor alone")
	after(s.CertificatesMoved, "every pod presents a certificate of the new anchor")
	after(s.Untrusted, "no pod trusts the compromised anchor")
	fmt.Fprintf(w, "  outcome: %s; restarts: %s; faults: %s\n", s.Outcome, s.Restarts, orNone(strings.Join(s.Faults, ",")))
}
