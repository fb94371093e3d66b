package steps

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestDecisionsSayWhenTheTimeChangesThem: the operator observes only on a change or at the
// moment a decision named (Decision.RecheckAt, ProjectTimed), so every decision that the passing
// of time alone can change must name that moment, and decisions that do not depend on the time
// name none.
func TestDecisionsSayWhenTheTimeChangesThem(t *testing.T) {
	p := newPKI(t)
	monday10 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC) // a Monday

	t.Run("a closed maintenance window: when it opens", func(t *testing.T) {
		s := rotatingState(p, at(monday10), automatic(func(d *v1alpha1.DataPlaneRestart) {
			d.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Mon"}, Start: "11:00", End: "12:00"}}
		}), bundlePods(0, 1), workload("a/Deployment/x"))
		d := observeBundleRestarts(propagate, "expanded")(s, "")
		if d.Reason != "OutsideMaintenanceWindow" {
			t.Fatalf("got %v %s (%s)", d.Outcome, d.Reason, d.Message)
		}
		if want := monday10.Add(time.Hour); !d.RecheckAt.Equal(want) {
			t.Errorf("recheck at %v, want %v", d.RecheckAt, want)
		}
	})

	t.Run("proxies refreshing on their own: when the fallback restart is due", func(t *testing.T) {
		since := time.Now().Add(-time.Minute)
		s := rotatingState(p, automatic(), workload("a/Deployment/x", behindPods()), issuer(p.newIssuer), func(s *State) {
			s.PhaseSince = since
			s.Certificates = Convergence{Converged: 1, Target: 2, Behind: []WorkloadCount{{"a/Deployment/x", 1}}, BehindWorkloads: 1}
		})
		d := observeCertificateRestarts(s, "")
		if d.Reason != "WorkloadCertificatesRefreshing" {
			t.Fatalf("got %v %s (%s)", d.Outcome, d.Reason, d.Message)
		}
		if want := since.Add(s.fallbackAfter()); !d.RecheckAt.Equal(want) {
			t.Errorf("recheck at %v, want %v", d.RecheckAt, want)
		}
	})

	t.Run("a trust anchor not valid yet: when it becomes valid", func(t *testing.T) {
		s := rotatingState(p)
		s.Now = s.Anchor.Cert.NotBefore.Add(-time.Minute)
		d := observeDetect(s, "")
		if d.Reason != "TrustAnchorInvalid" {
			t.Fatalf("got %+v, want TrustAnchorInvalid", d)
		}
		if want := s.Anchor.Cert.NotBefore; !d.RecheckAt.Equal(want) {
			t.Errorf("recheck at %v, want %v", d.RecheckAt, want)
		}
	})

	t.Run("a valid trust anchor: when it expires", func(t *testing.T) {
		s := rotatingState(p)
		if d := anchorProblem(s); d != nil {
			t.Fatalf("got %+v, want none", d)
		}
		d := observeDetect(s, "")
		if d.Reason != "TrustAnchorRenewed" {
			t.Fatalf("got %+v, want TrustAnchorRenewed", d)
		}
		if want := s.Anchor.Cert.NotAfter.Add(time.Second); !d.RecheckAt.Equal(want) {
			t.Errorf("recheck at %v, want %v", d.RecheckAt, want)
		}
	})

	t.Run("blocked: when Stalled falls due", func(t *testing.T) {
		s := rotatingState(p)
		since := s.Now.Add(-10 * time.Minute)
		start := metav1.NewTime(since)
		prev := v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhasePropagatingTrustRoots, LastPhaseTransitionTime: &start,
			Checkpoint: &v1alpha1.Checkpoint{Step: StepPropagateTrustRoots, Rotation: "r", StartTime: &start}}
		res := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepPropagateTrustRoots}, Phase: string(v1alpha1.PhasePropagatingTrustRoots),
			Decision: workflow.Waiting("TrustBundleConverging", "restart: a/Deployment/x")}
		_, recheck := ProjectTimed(rotationSteps, prev, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now)
		if want := since.Add(DefaultStalledAfter + time.Second); !recheck.Equal(want) {
			t.Errorf("recheck at %v, want %v", recheck, want)
		}
	})

	t.Run("a linked cluster's report: when it turns stale", func(t *testing.T) {
		s := rotatingState(p)
		read := s.Now.Add(-time.Minute)
		s.Remotes = []Remote{{Name: "east", Source: "Link east", LastObserved: read}}
		d := observeRemotes(GateTrustRoots)(s, "")
		if want := read.Add(DefaultRemoteStaleAfter + time.Second); !d.RecheckAt.Equal(want) {
			t.Errorf("recheck at %v, want %v", d.RecheckAt, want)
		}
	})

	t.Run("converged and Synced: nothing but a change matters", func(t *testing.T) {
		s := rotatingState(p, bundlePods(2, 2))
		d := observeBundleRestarts(propagate, "expanded")(s, "")
		if d.Outcome != workflow.Done {
			t.Fatalf("got %v %s (%s)", d.Outcome, d.Reason, d.Message)
		}
		if !d.RecheckAt.IsZero() {
			t.Errorf("recheck at %v, want none", d.RecheckAt)
		}
	})
}

// TestLiveChainsAreLoadedOnlyForABundleWrite: grouping every pod's live chain walks the mesh, so
// the operator hands it over as a loader that only a bundle about to be written calls, once.
func TestLiveChainsAreLoadedOnlyForABundleWrite(t *testing.T) {
	p := newPKI(t)
	loads := 0
	load := func() []LiveChain { loads++; return nil }

	s := rotatingState(p)
	s.LoadLiveChainsOnDemand(load)
	if d := observeBundleWritten(s, ""); d.Outcome != workflow.Done {
		t.Fatalf("bundle written: got %v %s (%s)", d.Outcome, d.Reason, d.Message)
	}
	if loads != 0 {
		t.Errorf("the bundle holds what the rotation wants, yet the live chains were loaded %d times", loads)
	}

	s = rotatingState(p, bundleOf(p.oldAnchor))
	s.LoadLiveChainsOnDemand(load)
	observeBundleWritten(s, "")
	observeBundleWritten(s, "")
	if loads != 1 {
		t.Errorf("a bundle to write loaded the live chains %d times, want once", loads)
	}
}
