package steps

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// expandTrustBundleStep writes the expanded bundle, the first write of a rotation.
func expandTrustBundleStep(w Writer) Step {
	return Step{
		Step:                  writeBundleStep(w, StepExpandTrustBundle, "Write the expanded trust bundle: the new anchor and the previous one."),
		CrossSignedSkips:      "the trust bundle keeps the previous anchor alone until every live certificate chains to the new one: the identity issuer's chain carries the new anchor, signed by the previous one, to the pods that trust only it",
		RunsInBridgedRecovery: true,
	}
}

// reduceTrustBundleStep writes the reduced bundle once the previous anchor is retired.
func reduceTrustBundleStep(w Writer) Step {
	return Step{
		Step: writeBundleStep(w, StepReduceTrustBundle, "Write the reduced trust bundle: the new anchor alone."),
	}
}

// writeBundleStep writes the bundle the rotation wants at the step (State.DesiredBundle).
func writeBundleStep(w Writer, name, doc string) workflow.Step[*State] {
	return workflow.Step[*State]{
		Name: name, Phase: string(v1alpha1.PhaseRefreshingControlPlane), Doc: doc,
		Observe: observeBundleWritten, Act: actWriteDesiredBundle(w), Describe: describeBundleWrite,
	}
}

func observeBundleWritten(s *State, _ string) (d workflow.Decision) {
	defer s.timedByAnchor(&d)
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if d := previousProblem(s); d != nil {
		return *d
	}
	if s.Bundle.Data != s.DesiredBundle() {
		if d := KeptAnchorProblem(s, s.DesiredBundle()); d != nil {
			return *d
		}
		return workflow.ActNeeded("TrustBundleOutdated", fmt.Sprintf("ConfigMap %s/%s does not hold the desired bundle yet", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	return workflow.Completed("TrustBundleWritten", fmt.Sprintf("ConfigMap %s/%s holds %s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, describeAnchors(s)))
}

func actWriteDesiredBundle(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		bundle := s.DesiredBundle()
		if bundle == "" {
			return fmt.Errorf("refusing to write an empty trust bundle to ConfigMap %s/%s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
		}
		if d := KeptAnchorProblem(s, bundle); d != nil {
			return fmt.Errorf("%s", d.Message)
		}
		return w.WriteTrustRoots(ctx, bundle)
	}
}

func describeBundleWrite(s *State) []string {
	return []string{fmt.Sprintf("write ConfigMap %s/%s: %s -> %s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap,
		fingerprints(s.Bundle.Certs), describeAnchors(s))}
}

func describeAnchors(s *State) string {
	if a := s.FinishingOn(); a != nil {
		return fmt.Sprintf("[%s] (the trust anchor was renewed again, to %s: the next rotation adds it)", ShortFingerprint(Fingerprint(a)), ShortFingerprint(s.Anchor.Fingerprint()))
	}
	if !s.Rotating() {
		return fmt.Sprintf("[%s]", ShortFingerprint(s.Anchor.Fingerprint()))
	}
	inFlight := ""
	for _, a := range s.InFlight {
		inFlight += fmt.Sprintf(", %s (in flight)", ShortFingerprint(Fingerprint(a)))
	}
	return fmt.Sprintf("[%s (new)%s, %s (previous)]", ShortFingerprint(s.Anchor.Fingerprint()), inFlight, ShortFingerprint(s.Previous.Fingerprint()))
}

func fingerprints(certs []*x509.Certificate) string {
	var fps []string
	for _, c := range certs {
		fps = append(fps, ShortFingerprint(Fingerprint(c)))
	}
	return "[" + strings.Join(fps, ", ") + "]"
}
