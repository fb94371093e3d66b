package steps

import (
	"context"
	"crypto/x509"
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// bootstrapStep creates the previous-anchor Secret and the trust bundle when they are missing.
func bootstrapStep(w Writer) Step {
	return Step{Step: workflow.Step[*State]{
		Name: StepBootstrap, Phase: string(v1alpha1.PhaseSynced),
		Doc:     "Create linkerd-previous-anchor and linkerd-identity-trust-roots when they are missing.",
		Observe: observeBootstrap, Act: actBootstrap(w), Describe: describeBootstrap,
	}, Assumes: AssumeTakeoverHandedOver}
}

// bootstrapPrevious chooses the certificate to create linkerd-previous-anchor from when it is
// missing: the anchor the existing bundle trusts besides the current one, so that an anchor
// renewed while the operator was away (or a deleted previous-anchor) is never dropped; or the
// current anchor on a fresh install. ok is false when the bundle is ambiguous, or holds anchors
// made by hand that may not be taken over yet (takeoverGate).
func bootstrapPrevious(s *State) (cert *x509.Certificate, ok bool) {
	if s.takeoverGate() != nil || s.bundleLostUnderForeignIssuer() != "" {
		return nil, false
	}
	skip := map[string]bool{s.Anchor.Fingerprint(): true}
	for _, a := range s.InFlight {
		skip[Fingerprint(a)] = true // kept in the bundle in their own right
	}
	var others []*x509.Certificate
	for _, c := range s.Bundle.Certs {
		if !skip[Fingerprint(c)] {
			others = append(others, c)
		}
	}
	switch len(others) {
	case 0:
		return s.Anchor.Cert, true
	case 1:
		return others[0], true
	}
	return nil, false
}

// Bootstrapping reports whether step is the workflow's first, where the operator takes the
// cluster over (bootstrap).
func Bootstrapping(step string) bool { return step == StepBootstrap }

func observeBootstrap(s *State, _ string) (d workflow.Decision) {
	defer s.timedByAnchor(&d)
	defer s.timedByTakeover(&d)
	if d := anchorProblem(s); d != nil {
		return *d
	}
	if !s.Previous.Found {
		if d := s.takeoverGate(); d != nil {
			return *d
		}
		if msg := s.bundleLostUnderForeignIssuer(); msg != "" {
			return workflow.Waiting(ReasonTrustRootsLost, msg)
		}
		if _, ok := bootstrapPrevious(s); !ok {
			return workflow.Waiting("AmbiguousTrustBundle", fmt.Sprintf(
				"Secret %s is missing and ConfigMap %s/%s trusts %d anchors besides the current one; recreate %s with the anchor to keep",
				s.Previous.Ref(), s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap, len(s.Bundle.Certs)-1, s.Previous.Ref()))
		}
		return workflow.ActNeeded("PreviousAnchorMissing", fmt.Sprintf("Secret %s is missing", s.Previous.Ref()))
	}
	if !s.Previous.Usable() {
		return workflow.Waiting("PreviousAnchorInvalid", s.Previous.Problem("previous-anchor Secret")+"; fix or delete it")
	}
	if !s.Bundle.Found {
		return workflow.ActNeeded("TrustRootsMissing", fmt.Sprintf("ConfigMap %s/%s is missing", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	return workflow.Completed("Bootstrapped", "previous anchor and trust bundle exist")
}

func actBootstrap(w Writer) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, _ string) error {
		if !s.Previous.Found {
			prev, ok := bootstrapPrevious(s)
			if !ok {
				return fmt.Errorf("cannot choose a previous anchor from ConfigMap %s", s.Config.TrustRootsConfigMap)
			}
			// The bundle is created on the next pass, from the previous anchor just written.
			return w.WritePreviousAnchor(ctx, prev)
		}
		return w.WriteTrustRoots(ctx, s.DesiredBundle())
	}
}

func describeBootstrap(s *State) []string {
	var out []string
	if !s.Previous.Found {
		if prev, ok := bootstrapPrevious(s); ok {
			out = append(out, fmt.Sprintf("create Secret %s with certificate %s (no key)", s.Previous.Ref(), Fingerprint(prev)))
		}
	}
	if !s.Bundle.Found && s.Anchor.Usable() {
		out = append(out, fmt.Sprintf("create ConfigMap %s/%s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap))
	}
	return out
}

// RootsJSONPath is the kubectl JSONPath that prints the trust anchors Linkerd's injector wrote into
// the first listed pod's proxy (pkg/inject: the literal LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS, in
// spec.initContainers for a native sidecar, spec.containers otherwise).
const RootsJSONPath = `{.items[0].spec..env[?(@.name=="LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS")].value}`

// ReasonTrustRootsLost: the trust bundle is missing on a mesh whose identity signs with an issuer
// the current anchor did not sign: creating it from the anchor would break the mesh.
const ReasonTrustRootsLost = "TrustRootsLost"

// bundleLostUnderForeignIssuer says, when bootstrap must not create the trust bundle from the
// anchor, why and what to do; "" otherwise. A fresh install has no bundle and an issuer signed
// by cert-manager's anchor: bootstrap creates the bundle from it. But a bundle deleted under a
// running mesh — a helm upgrade with identity.externalCA=true on a ConfigMap not annotated keep —
// while identity signs with an issuer the anchor did not sign (a hand-made one) is a mesh whose
// pods trust an anchor the operator does not know: the pods injected next would trust the
// anchor alone, and reject every certificate identity signs. Linkerd's injector wrote the roots
// into every meshed pod's spec: the ConfigMap is recreated from there, by the user.
func (s *State) bundleLostUnderForeignIssuer() string {
	if s.Bundle.Found || s.Previous.Found || !s.Anchor.Usable() || !s.Issuer.Usable() || SignedBy(s.Issuer.Cert, s.Anchor.Cert) {
		return ""
	}
	ns, cm := s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap
	return fmt.Sprintf("ConfigMap %s/%s is missing, and identity signs with %s, which cert-manager's trust anchor %s did not sign: "+
		"the mesh trusts an anchor the operator does not have, and a bundle made from cert-manager's would break it; "+
		"recreate the ConfigMap with the roots the injector wrote into your meshed pods: "+
		"kubectl get pods -A -l '%s=%s,!%s' -o jsonpath='%s' > roots.pem; kubectl create configmap -n %s %s --from-file=%s=roots.pem",
		ns, cm, describeCert(s.Issuer.Cert), ShortFingerprint(s.Anchor.Fingerprint()), ControlPlaneNSLabel, ns, ControlPlaneComponentLabel,
		RootsJSONPath, ns, cm, TrustRootsKey)
}
