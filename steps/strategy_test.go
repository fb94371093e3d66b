package steps

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// crossPKI is a cross-signed rotation's certificates: the new anchor signed by the old one, as
// cert-manager's CA issuer over the anchor's own Secret issues it, and an issuer under it.
type crossPKI struct{ oldAnchor, newAnchor, oldIssuer, newIssuer *testCA }

func newCrossPKI(t *testing.T) crossPKI {
	p := crossPKI{oldAnchor: anchorCA(t, "anchor")}
	p.newAnchor = newCert(t, "anchor", p.oldAnchor, true, time.Now().Add(24*time.Hour))
	p.oldIssuer = newCert(t, "old-issuer", p.oldAnchor, true, time.Now().Add(time.Hour))
	p.newIssuer = newCert(t, "new-issuer", p.newAnchor, true, time.Now().Add(time.Hour))
	return p
}

func crossSigned(s *State) { s.Spec.Strategy = v1alpha1.StrategyCrossSigned }

// crossState is a cross-signed rotation under way: the checkpoint recorded the strategy.
func crossState(p crossPKI, opts ...stateOpt) *State {
	base := rotatingState(pki{oldAnchor: p.oldAnchor, newAnchor: p.newAnchor, oldIssuer: p.oldIssuer, newIssuer: p.newIssuer},
		bundleOf(p.oldAnchor), func(s *State) { s.Rotation, s.Strategy = Fingerprint(p.newAnchor.cert), v1alpha1.StrategyCrossSigned })
	for _, o := range opts {
		o(base)
	}
	return base
}

func TestCrossSignedSteps(t *testing.T) {
	p := newCrossPKI(t)
	selfSigned := anchorCA(t, "anchor")
	cases := map[string]struct {
		step        string
		state       *State
		wantOutcome workflow.Outcome
		wantReason  string
		wantInMsg   string
	}{
		"detect refuses a renewed anchor the previous one did not sign, naming both Secrets": {
			step: StepDetectAnchorRotation, state: rotatingState(newPKI(t), bundleOf(newPKI(t).oldAnchor), crossSigned),
			wantOutcome: workflow.Wait, wantReason: ReasonTrustAnchorNotCrossSigned, wantInMsg: "Secret cert-manager/linkerd-trust-anchor is not signed by the previous anchor",
		},
		"detect refuses a self-signed renewal with the same subject": {
			step: StepDetectAnchorRotation, state: rotatingState(pki{newAnchor: selfSigned, oldAnchor: p.oldAnchor}, bundleOf(p.oldAnchor), crossSigned),
			wantOutcome: workflow.Wait, wantReason: ReasonTrustAnchorNotCrossSigned, wantInMsg: "linkerd-pki-cross-signed.yaml",
		},
		"detect starts a rotation on a cross-signed anchor": {
			step: StepDetectAnchorRotation, state: rotatingState(pki{newAnchor: p.newAnchor, oldAnchor: p.oldAnchor}, bundleOf(p.oldAnchor), crossSigned),
			wantOutcome: workflow.Done, wantReason: "TrustAnchorRenewed",
		},
		"expand-trust-bundle is not needed": {
			step: StepExpandTrustBundle, state: crossState(p), wantOutcome: workflow.Done, wantReason: ReasonNotNeededCrossSigned, wantInMsg: "previous anchor alone",
		},
		"refresh-control-plane is not needed": {
			step: StepRefreshControlPlane, state: crossState(p), wantOutcome: workflow.Done, wantReason: ReasonNotNeededCrossSigned,
		},
		"propagate-trust-roots restarts nothing": {
			step: StepPropagateTrustRoots, state: crossState(p, bundlePods(10, 10)), wantOutcome: workflow.Done, wantReason: ReasonNotNeededCrossSigned,
		},
		"propagate-trust-roots waits for pods behind the unchanged bundle, naming them": {
			step: StepPropagateTrustRoots, state: crossState(p, bundlePods(8, 10, WorkloadCount{"apps/Deployment/web", 2})),
			wantOutcome: workflow.Wait, wantReason: "TrustBundleConverging", wantInMsg: "restart: apps/Deployment/web (2 pods); spec.strategy CrossSigned: the bundle is unchanged",
		},
		"restart-identity is not needed": {
			step: StepRestartIdentity, state: crossState(p), wantOutcome: workflow.Done, wantReason: ReasonNotNeededCrossSigned,
		},
		"the issuer switch waits for the issuer under the new anchor": {
			step: StepWaitForIdentityIssuer, state: crossState(p), wantOutcome: workflow.Wait,
		},
		"the issuer switch is done once the issuer is under the new anchor, the bridge in its chain": {
			step: StepWaitForIdentityIssuer, state: crossState(p, issuedWith(p.newIssuer, p.newAnchor)), wantOutcome: workflow.Done,
		},
		"the issuer switch waits while the issuer's chain lacks the bridge, naming its Secret": {
			step: StepWaitForIdentityIssuer, state: crossState(p, issuer(p.newIssuer)),
			wantOutcome: workflow.Wait, wantReason: ReasonIssuerChainNotBridged, wantInMsg: "Secret linkerd/linkerd-identity-issuer presents the chain",
		},
		"renewal waits for proxies to refresh, and restarts nothing past the fallback": {
			step: StepRenewWorkloadCertificates,
			state: crossState(p, issuer(p.newIssuer), certPods(3, 10), func(s *State) {
				s.Spec.DataPlaneRestart.Policy = v1alpha1.Automatic
				s.PhaseSince = s.Now.Add(-time.Hour)
				s.Workloads = map[string]*Workload{}
			}),
			wantOutcome: workflow.Wait, wantReason: "WorkloadCertificatesRenewing", wantInMsg: "nothing is restarted",
		},
		"the reduction writes the new anchor alone once the previous anchor is retired": {
			step: StepReduceTrustBundle, state: crossState(p, issuer(p.newIssuer), previous(p.newAnchor), certPods(10, 10), func(s *State) { s.Retiring = Fingerprint(p.newAnchor.cert) }),
			wantOutcome: workflow.Act, wantReason: "TrustBundleOutdated",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := stepNamed(t, tc.step)
			d := st.Observe(tc.state, "")
			if d.Outcome != tc.wantOutcome || tc.wantReason != "" && d.Reason != tc.wantReason || !strings.Contains(d.Message, tc.wantInMsg) {
				t.Errorf("got %v %s %q, want %v %s containing %q", d.Outcome, d.Reason, d.Message, tc.wantOutcome, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

func TestCrossSignedBundles(t *testing.T) {
	p := newCrossPKI(t)
	s := crossState(p, issuer(p.newIssuer))
	if got, want := s.DesiredBundle(), RenderBundle(p.oldAnchor.cert); got != want {
		t.Errorf("bundle while proxies move onto the new issuer: %v, want the previous anchor alone", BundleFingerprints(got))
	}
	retired := crossState(p, issuer(p.newIssuer), previous(p.newAnchor))
	if got, want := retired.DesiredBundle(), RenderBundle(p.newAnchor.cert); got != want {
		t.Errorf("bundle once retired: %v, want the new anchor alone", BundleFingerprints(got))
	}
	// A chain [new issuer, new anchor] verifies to the old anchor through the bridge, so the
	// old bundle keeps every live chain; once reduced, to the new anchor.
	chain := []*x509.Certificate{p.newIssuer.cert, p.newAnchor.cert}
	if !ChainsTo(chain, p.oldAnchor.cert) || !ChainsTo(chain, p.newAnchor.cert) {
		t.Error("the bridged chain does not chain to both anchors")
	}
	if ChainsTo(chain[:1], p.oldAnchor.cert) {
		t.Error("the new issuer alone chains to the old anchor")
	}
}

// A rotation finishes the way it started: a standard rotation under way (its checkpoint has no
// strategy) stays standard when spec.strategy changes, and a new one takes the spec's.
func TestCrossSignedIsCheckpointed(t *testing.T) {
	p := newCrossPKI(t)
	standard := crossState(p, crossSigned, func(s *State) { s.Strategy = "" })
	if standard.CrossSigned() {
		t.Error("a rotation whose checkpoint names no strategy runs cross-signed because the spec says so")
	}
	if d := stepNamed(t, StepExpandTrustBundle).Observe(standard, ""); d.Reason == ReasonNotNeededCrossSigned {
		t.Errorf("a standard rotation skips the expansion: %+v", d)
	}
	idle := crossState(p, crossSigned, func(s *State) { s.Rotation, s.Strategy = "", "" })
	if !idle.CrossSigned() {
		t.Error("no rotation under way: spec.strategy CrossSigned is not in effect")
	}
	cp := SavedCheckpoint(rotationSteps, nil, workflow.Checkpoint{Step: StepWaitForIdentityIssuer}, idle, idle.Now)
	if cp.Strategy != v1alpha1.StrategyCrossSigned || cp.Rotation != Fingerprint(p.newAnchor.cert) {
		t.Errorf("the checkpoint of a new rotation: %+v", cp)
	}
	next := SavedCheckpoint(rotationSteps, cp, workflow.Checkpoint{Step: StepRenewWorkloadCertificates}, standard, standard.Now)
	if next.Strategy != v1alpha1.StrategyCrossSigned {
		t.Errorf("the checkpoint lost the rotation's strategy: %+v", next)
	}
}

// A cross-signed rotation whose restart is the user's carries the churn deadline in its status
// and blocking message from the phase's start; automatic restarts and the standard strategy
// have none.
func TestRestartDeadline(t *testing.T) {
	p := newCrossPKI(t)
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	spec := v1alpha1.TrustAnchorRotationSpec{Strategy: v1alpha1.StrategyCrossSigned, NaturalChurnPeriod: &metav1.Duration{Duration: 48 * time.Hour}}
	res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepRemoveOldTrustRoots}, Phase: string(v1alpha1.PhaseRemovingOldTrustRoots),
		Decision: workflow.Waiting("WorkloadsBehind", "Waiting for 3 pod(s)")}
	s := crossState(p, issuer(p.newIssuer), previous(p.newAnchor), bundleOf(p.newAnchor), func(s *State) { s.Retiring = Fingerprint(p.newAnchor.cert) })
	prev := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseRefreshingControlPlane}

	st := Project(rotationSteps, prev, spec, 1, s, res, start)
	d := st.RestartDeadline
	if d == nil || !d.Deadline.Time.Equal(start.Add(48*time.Hour)) || !d.Since.Time.Equal(start) || d.ChurnPeriod.Duration != 48*time.Hour {
		t.Fatalf("status.restartDeadline: %+v", d)
	}
	if want := "left to natural churn until 2026-06-03T12:00:00Z"; !strings.Contains(st.BlockingMessage, want) {
		t.Errorf("blocking message %q lacks %q", st.BlockingMessage, want)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "stalled after 48h") {
		t.Errorf("Stalled while the restart is left to churn: %+v", c)
	}
	// Two days later, from the same phase start: past it.
	late := Project(rotationSteps, st, spec, 1, s, res, start.Add(49*time.Hour))
	if !late.RestartDeadline.Deadline.Time.Equal(d.Deadline.Time) || !strings.Contains(late.BlockingMessage, "which has passed") {
		t.Errorf("past the deadline: %+v, %q", late.RestartDeadline, late.BlockingMessage)
	}
	if !meta.IsStatusConditionTrue(late.Conditions, v1alpha1.ConditionStalled) {
		t.Errorf("not Stalled past the restart deadline: %+v", late.Conditions)
	}

	auto := spec
	auto.DataPlaneRestart.Policy = v1alpha1.Automatic
	if st := Project(rotationSteps, prev, auto, 1, s, res, start); st.RestartDeadline != nil {
		t.Errorf("automatic restarts got a churn deadline: %+v", st.RestartDeadline)
	}
	standard := crossState(p, issuer(p.newIssuer), previous(p.newAnchor), bundleOf(p.newAnchor), func(s *State) { s.Strategy = "" })
	if st := Project(rotationSteps, prev, spec, 1, standard, res, start); st.RestartDeadline != nil {
		t.Errorf("a standard rotation got a churn deadline: %+v", st.RestartDeadline)
	}
	if st := Project(rotationSteps, prev, spec, 1, s, workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepDetectAnchorRotation}, Phase: string(v1alpha1.PhaseSynced)}, start); st.RestartDeadline != nil {
		t.Errorf("Synced with a churn deadline: %+v", st.RestartDeadline)
	}
}

// Proxies refresh by themselves within a day: a cross-signed rotation waiting on them for hours
// is not Stalled, a standard one is.
func TestCrossSignedRenewalIsNotStalledByTheHour(t *testing.T) {
	p := newCrossPKI(t)
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepRenewWorkloadCertificates}, Phase: string(v1alpha1.PhaseRenewingWorkloadCerts),
		Decision: workflow.Waiting("WorkloadCertificatesRenewing", "Waiting for 3 pod(s)")}
	prev := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhaseRenewingWorkloadCerts, LastPhaseTransitionTime: &metav1.Time{Time: start},
		Checkpoint: &v1alpha1.Checkpoint{Step: StepRenewWorkloadCertificates, Rotation: Fingerprint(p.newAnchor.cert), Strategy: v1alpha1.StrategyCrossSigned}}
	s := crossState(p, issuer(p.newIssuer))
	spec := v1alpha1.TrustAnchorRotationSpec{Strategy: v1alpha1.StrategyCrossSigned}
	if st := Project(rotationSteps, prev, spec, 1, s, res, start.Add(5*time.Hour)); meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionStalled) {
		t.Errorf("Stalled 5h into the proxies' own refresh: %+v", meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled))
	}
	if st := Project(rotationSteps, prev, spec, 1, s, res, start.Add(25*time.Hour)); !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionStalled) {
		t.Error("not Stalled after a day without the proxies' refresh")
	}
	standard := prev.DeepCopy()
	standard.Checkpoint.Strategy = ""
	s.Strategy = ""
	if st := Project(rotationSteps, *standard, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, start.Add(5*time.Hour)); !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionStalled) {
		t.Error("a standard rotation is not Stalled 5h into RenewingWorkloadCerts")
	}
}
