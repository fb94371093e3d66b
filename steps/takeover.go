package steps

import (
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
)

// --- taking over a mesh on Linkerd's own certificates ---------------------------------------
//
// A mesh installed as Linkerd's documentation installs it trusts an anchor made by hand (H),
// handed to the linkerd-control-plane chart, which renders the trust-roots ConfigMap from it and
// the identity issuer Secret in its own layout (crt.pem/key.pem, identity run with
// -identity-scheme=linkerd.io/tls). Moving it onto cert-manager's anchor (C) is a standard
// rotation whose previous anchor is H, read from the ConfigMap (bootstrapPrevious) — with two
// traps of Helm's and one of identity's, which this file keeps the operator out of
// (docs/design/takeover.md):
//
//   - Helm deletes the ConfigMap and the issuer Secret when it stops rendering them, unless the
//     live objects are annotated helm.sh/resource-policy=keep: the operator writes nothing before
//     both are (takeoverGate);
//   - identity reads the issuer the chart rendered (crt.pem), not cert-manager's (tls.crt), until
//     the chart's identity.issuer.scheme is kubernetes.io/tls: the operator reads the issuer
//     identity reads (State.Issuer, see IssuerKey), and wait-for-identity-issuer asks for that
//     helm upgrade instead of a renewal (SchemeSwitch);
//   - nothing of this is done unless the user asked for it (spec.takeover), and not when the
//     hand-made certificates expire before a takeover can finish.

// Identity's issuer schemes: the -identity-scheme argument of Linkerd's identity container, the
// chart's identity.issuer.scheme (linkerd2 controller/cmd/identity/main.go: linkerd.io/tls reads
// crt.pem and key.pem, kubernetes.io/tls reads tls.crt and tls.key).
const (
	SchemeLinkerd     = "linkerd.io/tls"
	SchemeKubernetes  = "kubernetes.io/tls"
	IdentitySchemeArg = "-identity-scheme="
	// ChartIssuerKey is where Linkerd's chart puts the issuer certificate under linkerd.io/tls
	// (charts/linkerd-control-plane/templates/identity.yaml).
	ChartIssuerKey = "crt.pem"
)

// IssuerKey is the key of the issuer Secret whose certificate identity signs with under scheme:
// crt.pem under linkerd.io/tls, tls.crt otherwise (kubernetes.io/tls, and "" when the scheme is
// unknown, as this project's install runs it).
func IssuerKey(scheme string) string {
	if scheme == SchemeLinkerd {
		return ChartIssuerKey
	}
	return CertificateKey
}

// Helm's annotations on an object it rendered, and the one that keeps it when Helm stops
// rendering it (helm.sh/helm pkg/kube ResourcePolicyAnno, KeepPolicy).
const (
	HelmReleaseNameAnnotation      = "meta.helm.sh/release-name"
	HelmReleaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
	HelmResourcePolicyAnnotation   = "helm.sh/resource-policy"
	HelmKeep                       = "keep"
)

// HelmRender is what an object's annotations say of the Helm release that rendered it.
type HelmRender struct {
	// Release and Namespace name the release ("" when Helm did not render the object, or it was
	// adopted: linkerd trust bundle --adopt removes the annotations).
	Release, Namespace string
	// Keep: helm.sh/resource-policy=keep, so Helm leaves the object when it stops rendering it.
	Keep bool
}

// HelmRenderFrom reads an object's annotations.
func HelmRenderFrom(annotations map[string]string) HelmRender {
	return HelmRender{Release: annotations[HelmReleaseNameAnnotation], Namespace: annotations[HelmReleaseNamespaceAnnotation],
		Keep: annotations[HelmResourcePolicyAnnotation] == HelmKeep}
}

// Rendered reports whether a Helm release rendered the object.
func (h HelmRender) Rendered() bool { return h.Release != "" }

// IdentityScheme is the issuer scheme identity's Deployment runs with, "" when unknown.
func (s *State) IdentityScheme() string {
	return s.ControlPlane[s.Config.IdentityDeployment].IssuerScheme
}

// handMade reports whether the mesh shows the signs of certificates handed to Linkerd's chart:
// identity reads the chart's issuer layout, or the chart renders the trust bundle.
func (s *State) handMade() bool {
	return s.IdentityScheme() == SchemeLinkerd || s.Bundle.Helm.Rendered()
}

// TakeoverAnchors are the anchors the trust bundle holds besides cert-manager's current and
// in-flight ones while no previous anchor is recorded, on a mesh whose certificates were handed
// to Linkerd's chart: the hand-made anchors a takeover moves the mesh off. nil otherwise.
func (s *State) TakeoverAnchors() []*x509.Certificate {
	if s.Previous.Found || !s.Anchor.Usable() || !s.handMade() {
		return nil
	}
	skip := map[string]bool{s.Anchor.Fingerprint(): true}
	for _, a := range s.InFlight {
		skip[Fingerprint(a)] = true
	}
	var out []*x509.Certificate
	for _, c := range s.Bundle.Certs {
		if !skip[Fingerprint(c)] {
			out = append(out, c)
		}
	}
	return out
}

// TakeoverMargin is how long the hand-made anchor and issuer must stay valid for a takeover to
// start: three workload-certificate lifetimes, one for the data plane's restart onto the expanded
// bundle, one for the proxies' renewals onto cert-manager's issuer, one to spare.
const TakeoverMargin = 3 * DefaultWorkloadCertificateLifetime

// Takeover reasons: the bootstrap's waits on a mesh that runs on hand-made certificates.
const (
	ReasonTakeoverNotRequested    = "TakeoverNotRequested"
	ReasonTakeoverHandoverPending = "TakeoverHandoverPending"
	ReasonTakeoverTooLate         = "TakeoverTooLate"
)

// takeoverGate is the Wait decision of a takeover that may not start yet, nil when there is no
// takeover to make (TakeoverAnchors is empty) or it may start: the hand-made anchors become the
// previous anchor then. The checks, in order: the hand-made anchor and the issuer identity signs
// with outlive TakeoverMargin (past it, moving the mesh is a recovery, not a rotation); identity
// reads an issuer at all; the user asked for the takeover (spec.takeover); and every object Helm
// renders that the takeover keeps — the ConfigMap, the issuer Secret — is annotated keep, so that
// the helm upgrades it asks for delete neither.
func (s *State) takeoverGate() *workflow.Decision {
	d := s.takeoverCheck()
	if d != nil {
		s.timedByTakeover(d)
	}
	return d
}

// takeoverCheck is takeoverGate without the moments its verdict depends on.
func (s *State) takeoverCheck() *workflow.Decision {
	hand := s.TakeoverAnchors()
	if len(hand) == 0 {
		return nil
	}
	bundleRef := s.Config.LinkerdNamespace + "/" + s.Config.TrustRootsConfigMap
	deadline := s.Now.Add(TakeoverMargin)
	for _, c := range s.takeoverExpiries(hand) {
		if c.NotAfter.Before(deadline) {
			d := workflow.Waiting(ReasonTakeoverTooLate, fmt.Sprintf(
				"the mesh runs on certificates made by hand, and %s expires %s, within %s: too soon for a takeover onto cert-manager's trust anchor %s to finish before it (identity stops certifying once its issuer's chain expires); "+
					"renew the hand-made issuer with its anchor's key first (Linkerd's \"Replacing the identity issuer\"), or, once expired, recover the mesh by hand",
				describeCert(c), c.NotAfter.UTC().Format(time.RFC3339), TakeoverMargin, ShortFingerprint(s.Anchor.Fingerprint())))
			return &d
		}
	}
	if !s.Issuer.Usable() {
		// Identity reads no issuer there: its pods exit at start (the scheme switched before
		// cert-manager wrote tls.crt, say). No takeover restarts the control plane onto that.
		d := workflow.Waiting("IssuerUnavailable", fmt.Sprintf("the mesh runs on certificates made by hand, and %s (identity runs with %s%s): fix it before a takeover starts",
			s.Issuer.Problem("the identity issuer Secret"), IdentitySchemeArg, s.IdentityScheme()))
		return &d
	}
	if !s.Spec.Takeover {
		d := workflow.Waiting(ReasonTakeoverNotRequested, fmt.Sprintf(
			"ConfigMap %s trusts %s, made by hand (not cert-manager's trust anchor %s)%s; nothing is written until the takeover is requested: linkerd trust takeover (docs/adopting.md, \"From Linkerd's own certificates\")",
			bundleRef, describeCerts(hand), ShortFingerprint(s.Anchor.Fingerprint()), s.schemeNote()))
		return &d
	}
	if cmds := s.handoverCommands(); len(cmds) > 0 {
		d := workflow.Waiting(ReasonTakeoverHandoverPending, fmt.Sprintf(
			"the takeover waits for Helm to let go of what it renders, so that no helm upgrade deletes it: %s", strings.Join(cmds, "; then ")))
		return &d
	}
	return nil
}

// timedByTakeover has *d depend on the time each hand-made certificate a takeover depends on
// comes within TakeoverMargin of its expiry (takeoverGate): past it, a takeover may not start.
func (s *State) timedByTakeover(d *workflow.Decision) {
	hand := s.TakeoverAnchors()
	if len(hand) == 0 {
		return
	}
	for _, c := range s.takeoverExpiries(hand) {
		*d = d.RecheckBy(s.after(c.NotAfter.Add(-TakeoverMargin)))
	}
}

// TakeoverGate is takeoverGate, for the CLI.
func TakeoverGate(s *State) *workflow.Decision { return s.takeoverGate() }

// takeoverExpiries are the hand-made certificates a takeover depends on until identity signs
// with cert-manager's issuer: the hand-made anchors, and the issuer identity signs with when it
// is not cert-manager's.
func (s *State) takeoverExpiries(hand []*x509.Certificate) []*x509.Certificate {
	out := append([]*x509.Certificate(nil), hand...)
	if s.Issuer.Usable() && !SignedBy(s.Issuer.Cert, s.Anchor.Cert) {
		out = append(out, s.Issuer.Cert)
	}
	return out
}

// handoverCommands are the user's moves that let a takeover start: annotate keep whatever the
// chart renders and the takeover keeps, then stop rendering the ConfigMap. None once done.
func (s *State) handoverCommands() []string {
	ns := s.Config.LinkerdNamespace
	var annotate []string
	if b := s.Bundle.Helm; b.Rendered() && !b.Keep {
		annotate = append(annotate, fmt.Sprintf("kubectl annotate -n %s configmap %s %s=%s", ns, s.Config.TrustRootsConfigMap, HelmResourcePolicyAnnotation, HelmKeep))
	}
	if i := s.Issuer.Helm; i.Rendered() && !i.Keep {
		annotate = append(annotate, fmt.Sprintf("kubectl annotate -n %s secret %s %s=%s", ns, s.Config.IssuerSecret, HelmResourcePolicyAnnotation, HelmKeep))
	}
	if len(annotate) == 0 {
		return nil
	}
	return append(annotate, s.HandoverUpgrade())
}

// HandoverUpgrade is the takeover's first helm upgrade: the chart stops rendering the trust-roots
// ConfigMap (manifests/linkerd/takeover-handover-values.yaml).
func (s *State) HandoverUpgrade() string { return s.HelmUpgrade("--set identity.externalCA=true") }

// HelmUpgrade is the helm upgrade of the release that renders the control plane, with the
// user's values kept and the given ones set. The release is the one the ConfigMap or the
// issuer Secret names, Linkerd's documented one when neither does.
func (s *State) HelmUpgrade(set string) string {
	h := s.Bundle.Helm
	if !h.Rendered() {
		h = s.Issuer.Helm
	}
	release, ns := h.Release, h.Namespace
	if release == "" {
		release, ns = "linkerd-control-plane", s.Config.LinkerdNamespace
	}
	return fmt.Sprintf("helm upgrade %s linkerd/linkerd-control-plane -n %s --reuse-values %s", release, ns, set)
}

// SchemeSwitch is what wait-for-identity-issuer asks of the user while identity reads the
// issuer Linkerd's chart rendered: the helm upgrade that makes it read cert-manager's. "" under
// any other scheme.
func (s *State) SchemeSwitch() string {
	if s.IdentityScheme() != SchemeLinkerd {
		return ""
	}
	return s.HelmUpgrade("--set identity.externalCA=true --set identity.issuer.scheme=" + SchemeKubernetes)
}

// schemeSwitchProblem is the Wait decision of wait-for-identity-issuer while identity reads the
// chart's issuer: the helm upgrade to run once cert-manager's issuer, on the new anchor, is in
// the Secret's tls.crt (StagedIssuer), or what is wrong with it before. nil under another scheme.
func (s *State) schemeSwitchProblem() *workflow.Decision {
	cmd := s.SchemeSwitch()
	if cmd == "" {
		return nil
	}
	staged, ref := s.StagedIssuer, s.Issuer.Ref()
	var d workflow.Decision
	switch {
	case !staged.Usable():
		d = workflow.Waiting("IssuerSchemeNotReady", fmt.Sprintf(
			"identity reads the issuer Linkerd's chart rendered (Secret %s key %s, %s%s), and cert-manager's is not there to switch to: %s; apply the identity issuer's Certificate (manifests/cert-manager/linkerd-pki.yaml) before the helm upgrade",
			ref, ChartIssuerKey, IdentitySchemeArg, SchemeLinkerd, staged.Problem("key "+CertificateKey+" of Secret")))
	case !SignedBy(staged.Cert, s.Anchor.Cert):
		d = workflow.Waiting("IssuerSchemeNotReady", fmt.Sprintf(
			"identity reads the issuer Linkerd's chart rendered (Secret %s key %s), and cert-manager's in key %s (%s) is not signed by the new trust anchor %s: renew it (%s) before the helm upgrade",
			ref, ChartIssuerKey, CertificateKey, ShortFingerprint(Fingerprint(staged.Cert)), ShortFingerprint(s.Anchor.Fingerprint()), renewIssuerCommand(s)))
	default:
		d = workflow.Waiting(ReasonWaitingForIssuerScheme, fmt.Sprintf(
			"identity reads the issuer Linkerd's chart rendered (Secret %s key %s, %s%s); every meshed pod trusts the new trust anchor, so switch identity to cert-manager's issuer %s: %s",
			ref, ChartIssuerKey, IdentitySchemeArg, SchemeLinkerd, ShortFingerprint(Fingerprint(staged.Cert)), cmd))
	}
	return &d
}

// ReasonWaitingForIssuerScheme: wait-for-identity-issuer waits for the user's helm upgrade that
// switches identity onto cert-manager's issuer.
const ReasonWaitingForIssuerScheme = "WaitingForIssuerScheme"

// schemeNote completes a message about a hand-made mesh with the issuer identity signs with.
func (s *State) schemeNote() string {
	if s.IdentityScheme() != SchemeLinkerd || !s.Issuer.Usable() {
		return ""
	}
	return fmt.Sprintf(", and identity signs with the issuer Linkerd's chart rendered, %s", describeCert(s.Issuer.Cert))
}

// ChartIssuerLeft is the closing note of a takeover, "" when there is none: identity reads
// cert-manager's issuer, and the Secret still holds the one Linkerd's chart rendered, with its
// key.
func (s *State) ChartIssuerLeft() string {
	if s.IdentityScheme() == SchemeLinkerd || !s.Issuer.ChartIssuer {
		return ""
	}
	return fmt.Sprintf("Secret %s still holds the issuer Linkerd's chart rendered (%s, with its private key), which identity no longer reads: "+
		`kubectl patch secret -n %s %s --type=json -p '[{"op":"remove","path":"/data/crt.pem"},{"op":"remove","path":"/data/key.pem"}]'`+
		", remove the %s annotations, and destroy the hand-made anchor's key",
		s.Issuer.Ref(), ChartIssuerKey, s.Config.LinkerdNamespace, s.Config.IssuerSecret, HelmResourcePolicyAnnotation)
}

// describeCert names a certificate as a user finds it again: subject, fingerprint, expiry.
func describeCert(c *x509.Certificate) string {
	return fmt.Sprintf("CN=%s (%s, expires %s)", c.Subject.CommonName, ShortFingerprint(Fingerprint(c)), c.NotAfter.UTC().Format(time.RFC3339))
}

func describeCerts(certs []*x509.Certificate) string {
	parts := make([]string, len(certs))
	for i, c := range certs {
		parts[i] = describeCert(c)
	}
	if len(parts) == 1 {
		return "anchor " + parts[0]
	}
	return "anchors " + strings.Join(parts, ", ")
}
