package steps

import (
	"context"
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// retirePreviousAnchorStep retires the old anchor once every pod is on the new one.
func retirePreviousAnchorStep(w Writer) Step {
	return Step{
		Step: workflow.Step[*State]{
			Name: StepRetirePreviousAnchor, Phase: string(v1alpha1.PhaseRefreshingControlPlane),
			Doc:     "Copy the current anchor's certificate into linkerd-previous-anchor, retiring the old anchor.",
			Observe: observeRetired, Act: actRetire(w), Describe: describeRetire,
		},
		ReliesOnBundle: true,
	}
}

// retiresPreviousAnchor reports whether step is retire-previous-anchor, whose act writes the
// anchor the bundle is reduced to: once it retired (or the anchor was renewed again since), the
// bundle it relies on is the next step's to change (checkBundle).
func retiresPreviousAnchor(step string) bool { return step == StepRetirePreviousAnchor }

func observeRetired(s *State, _ string) (d workflow.Decision) {
	defer s.timedByAnchor(&d)
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if s.Previous.Fingerprint() == s.Anchor.Fingerprint() {
		return workflow.Completed("PreviousAnchorRetired", fmt.Sprintf("Secret %s holds the current anchor %s", s.Previous.Ref(), ShortFingerprint(s.Anchor.Fingerprint())))
	}
	if a := s.FinishingOn(); a != nil {
		// Retired, then the anchor was renewed again: writing the newer anchor now would drop
		// the one every live certificate chains to from the reduced bundle.
		return workflow.Completed("PreviousAnchorRetired", fmt.Sprintf("Secret %s holds the anchor %s this rotation moved to (the trust anchor was renewed again since, to %s: the next rotation starts once this one is done)",
			s.Previous.Ref(), ShortFingerprint(Fingerprint(a)), ShortFingerprint(s.Anchor.Fingerprint())))
	}
	return workflow.ActNeeded("PreviousAnchorOutdated", fmt.Sprintf("Secret %s still holds the old anchor %s", s.Previous.Ref(), ShortFingerprint(s.Previous.Fingerprint())))
}

func actRetire(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error { return w.WritePreviousAnchor(ctx, s.Anchor.Cert) }
}

func describeRetire(s *State) []string {
	return []string{fmt.Sprintf("write Secret %s: certificate %s -> %s (no key)", s.Previous.Ref(), ShortFingerprint(s.Previous.Fingerprint()), ShortFingerprint(s.Anchor.Fingerprint()))}
}
