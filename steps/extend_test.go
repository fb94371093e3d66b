package steps

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// extraStep is a step a later version might add: it waits until a check passes, and the user
// runs the check. It declares its facts as every step does, its stage holds the rest, and
// nothing else names it.
func extraStep(passed *bool) Step {
	return Step{
		Step: workflow.Step[*State]{
			Name: "verify-extra", Phase: string(v1alpha1.PhaseWaitingForIdentityRotation),
			Doc: "Wait until the extra check passes (run the extra check).",
			Observe: func(s *State, _ string) workflow.Decision {
				if *passed {
					return workflow.Completed("ExtraCheckPassed", "the extra check passed")
				}
				return workflow.Waiting("ExtraCheckPending", "Waiting for the extra check")
			},
		},
		Manual:         func(s *State) string { return "run the extra check in namespace " + s.Config.LinkerdNamespace },
		ReliesOnBundle: true,
	}
}

// withStep returns the rotation with st after the step named after in the stage of that name, as
// Rotation would return it with st listed there.
func withStep(t *testing.T, w Writer, stage, after string, st Step) []Step {
	t.Helper()
	tree := rotationStages(w)
	if !insertAfter(&tree, stage, after, st) {
		t.Fatalf("no step %q in a stage %q", after, stage)
	}
	return guarded(tree.Steps())
}

func insertAfter(sg *Stage, stage, after string, st Step) bool {
	for i, p := range sg.Parts {
		switch p := p.(type) {
		case Stage:
			if insertAfter(&p, stage, after, st) {
				sg.Parts[i] = p
				return true
			}
		case Step:
			if sg.Name == stage && p.Name == after {
				sg.Parts = slices.Insert(sg.Parts, i+1, part(st))
				return true
			}
		}
	}
	return false
}

// TestAnotherStep: adding a step takes an entry in a stage of the rotation and the step's own
// file. The engine, a plan, the status projection and everything that looks a step up by its
// checkpoint's name pick it up from the Step alone, and what holds where it sits from its stage.
func TestAnotherStep(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, bundlePods(4, 4), certPods(0, 4))
	w := newConvergingWriter(s)
	passed := false
	list := withStep(t, w, "load", StepRestartIdentity, extraStep(&passed))
	wf, err := NewWorkflow(list)
	if err != nil {
		t.Fatal(err)
	}
	extra := list[slices.IndexFunc(list, func(x Step) bool { return x.Name == "verify-extra" })]
	// What looks a checkpoint's step up is given this list.
	extended := NewOrdered(list)

	// The engine runs it in its place.
	cp, n := workflow.Checkpoint{}, 0
	advance := func() workflow.Result {
		t.Helper()
		for range 20 {
			res, err := wf.Advance(context.Background(), cp, s, func(context.Context, workflow.Checkpoint) error { return nil },
				func() string { n++; return NewActStamp(time.Unix(int64(n), 0)) })
			if err != nil {
				t.Fatal(err)
			}
			cp = res.Checkpoint
			if !res.Acted {
				return res
			}
		}
		t.Fatal("no wait within 20 acts")
		return workflow.Result{}
	}
	res := advance()
	if res.Checkpoint.Step != "verify-extra" || res.Phase != string(v1alpha1.PhaseWaitingForIdentityRotation) || res.Decision.Reason != "ExtraCheckPending" {
		t.Fatalf("stopped at %s (%s, %s %q), want verify-extra waiting", res.Checkpoint.Step, res.Phase, res.Decision.Reason, res.Decision.Message)
	}

	// A plan lists it, with its Doc, and the user's part.
	plan, err := wf.Plan(context.Background(), cp, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan[0].Name != "verify-extra" || !plan[0].Current || plan[0].Doc != extra.Doc || plan[0].Decision.Reason != "ExtraCheckPending" {
		t.Errorf("plan starts with %+v, want verify-extra waiting", plan[0])
	}
	if got := extra.Manual(s); got != "run the extra check in namespace linkerd" {
		t.Errorf("manual %q", got)
	}

	// The status projection: its phase and message, a rotation under way, its facts.
	prev := v1alpha1.TrustAnchorRotationStatus{Checkpoint: &v1alpha1.Checkpoint{Step: StepRestartIdentity, Rotation: s.Anchor.Fingerprint()}}
	st := Project(extended, prev, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now)
	if st.Phase != v1alpha1.PhaseWaitingForIdentityRotation || st.BlockingMessage != "Waiting for the extra check" ||
		st.Checkpoint.Step != "verify-extra" || st.Checkpoint.Rotation != s.Anchor.Fingerprint() {
		t.Errorf("status: phase %s, message %q, checkpoint %+v", st.Phase, st.BlockingMessage, st.Checkpoint)
	}
	// Its stage's facts: the issuer has not switched, every pod must keep the expanded bundle,
	// and the pods are not moving onto the new issuer yet.
	if !extra.BeforeIssuerSwitch || !extra.NeedsExpandedPods || extra.IdentityMustWait || extra.Retiring {
		t.Errorf("facts of the step in stage load: %+v", extra.Position)
	}
	if UrgentCertificates(extended, s, "verify-extra") {
		t.Error("the step's live certificates are probed urgently before the issuer switch")
	}
	// The same step in the stage where pods move onto the new issuer holds that stage's facts.
	moving := NewOrdered(withStep(t, w, "move", StepRestartIdentityOnNewIssuer, extraStep(&passed)))
	if !UrgentCertificates(moving, s, "verify-extra") || moving.named("verify-extra").BeforeIssuerSwitch {
		t.Errorf("facts of the step in stage move: %+v", moving.named("verify-extra").Position)
	}
	// The checkpoint saved before a later act keeps the rotation: the step is in its place.
	start := metav1.NewTime(s.RotationStart)
	at := &v1alpha1.Checkpoint{Step: "verify-extra", Rotation: s.Anchor.Fingerprint(), StartTime: &start}
	if saved := SavedCheckpoint(extended, at, workflow.Checkpoint{Step: StepRestartIdentityOnNewIssuer}, s, s.Now); saved.StartTime == nil || !saved.StartTime.Equal(&start) {
		t.Errorf("the checkpoint saved after the step starts a new rotation: %+v", saved)
	}
	// An issuer renewed before the step is early, as the step says.
	s.Issuer = src("linkerd", "linkerd-identity-issuer", p.newIssuer)
	st = Project(extended, prev, v1alpha1.TrustAnchorRotationSpec{}, 1, s, res, s.Now)
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionOutOfOrderIssuerRotation); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("OutOfOrderIssuerRotation: %+v", c)
	}
	// It relies on the bundle: a drifted one parks it.
	s.Issuer = src("linkerd", "linkerd-identity-issuer", p.oldIssuer)
	good := s.Bundle
	reverted(p, "helm")(s)
	if d := extra.Observe(s, ""); d.Reason != "TrustBundleDrifted" {
		t.Errorf("over a drifted bundle: %s %q", d.Reason, d.Message)
	}
	if _, ok := CheckBundle(extended, s, "verify-extra"); !ok {
		t.Error("CheckBundle does not check the bundle at the step")
	}
	s.Bundle = good

	// Once it passes, the rotation goes on.
	passed = true
	if res := advance(); res.Checkpoint.Step != StepWaitForIdentityIssuer {
		t.Fatalf("after the extra check: at %s (%s)", res.Checkpoint.Step, res.Decision.Message)
	}
}
