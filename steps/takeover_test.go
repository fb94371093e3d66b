package steps

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/jsonpath"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// handMadePKI is a mesh installed as Linkerd's documentation installs it: an anchor made by hand
// (a year long, as `step certificate create --profile root-ca --not-after 8760h` makes it) and an
// issuer under it, rendered by Helm; cert-manager's anchor and its issuer beside them.
type handMadePKI struct {
	hand, handIssuer, cm, cmIssuer *testCA
}

func newHandMadePKI(t *testing.T, handExpires time.Duration) handMadePKI {
	p := handMadePKI{
		hand: newCert(t, "root.linkerd.cluster.local", nil, true, time.Now().Add(handExpires)),
		cm:   newCert(t, "root.linkerd.cluster.local", nil, true, time.Now().Add(8760*time.Hour)),
	}
	p.handIssuer = newCert(t, "identity.linkerd.cluster.local", p.hand, true, time.Now().Add(handExpires))
	p.cmIssuer = newCert(t, "identity.linkerd.cluster.local", p.cm, true, time.Now().Add(48*time.Hour))
	return p
}

// state is the mesh before the takeover: the ConfigMap and the issuer Secret rendered by the
// release linkerd-control-plane (not kept), identity on the chart's scheme signing with the
// hand-made issuer, cert-manager's issuer staged in tls.crt, no previous anchor recorded.
func (p handMadePKI) state(opts ...stateOpt) *State {
	now := time.Now()
	s := &State{Config: DefaultConfig(), Now: now, ControlPlane: map[string]Deployment{}}
	helm := HelmRenderFrom(map[string]string{HelmReleaseNameAnnotation: "linkerd-control-plane", HelmReleaseNamespaceAnnotation: "linkerd"})
	for _, o := range []stateOpt{anchor(p.cm), issuer(p.handIssuer), bundleOf(p.hand), deploy("linkerd-identity", "", true),
		deploy("linkerd-destination", "", true), deploy("linkerd-proxy-injector", "", true)} {
		o(s)
	}
	s.Bundle.Helm, s.Issuer.Helm, s.Issuer.ChartIssuer = helm, helm, true
	s.StagedIssuer = src("linkerd", "linkerd-identity-issuer", p.cmIssuer)
	d := s.ControlPlane["linkerd-identity"]
	d.IssuerScheme = SchemeLinkerd
	s.ControlPlane["linkerd-identity"] = d
	for _, o := range opts {
		o(s)
	}
	return s
}

func takeoverRequested(s *State) { s.Spec.Takeover = true }
func keptByHelm(s *State)        { s.Bundle.Helm.Keep, s.Issuer.Helm.Keep = true, true }

// The operator writes nothing on a mesh that runs on hand-made certificates until the user asks
// for the takeover and Helm can no longer delete what it keeps, and never when the hand-made
// certificates expire before a takeover could finish: bootstrap waits, saying why, and the
// previous anchor is not recreated from the bundle either (the operator's repair).
func TestTakeoverGate(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	short := newHandMadePKI(t, 48*time.Hour)
	shortIssuer := p
	shortIssuer.handIssuer = newCert(t, "identity.linkerd.cluster.local", p.hand, true, time.Now().Add(50*time.Hour))
	for _, tc := range []struct {
		name   string
		s      *State
		reason string
		says   []string
	}{
		{"not requested", p.state(), ReasonTakeoverNotRequested,
			[]string{"ConfigMap linkerd/linkerd-identity-trust-roots trusts anchor CN=root.linkerd.cluster.local (" + ShortFingerprint(Fingerprint(p.hand.cert)),
				"not cert-manager's trust anchor " + ShortFingerprint(Fingerprint(p.cm.cert)), "linkerd trust takeover",
				"identity signs with the issuer Linkerd's chart rendered, CN=identity.linkerd.cluster.local"}},
		{"requested, Helm would delete", p.state(takeoverRequested), ReasonTakeoverHandoverPending,
			[]string{"kubectl annotate -n linkerd configmap linkerd-identity-trust-roots helm.sh/resource-policy=keep; then kubectl annotate -n linkerd secret linkerd-identity-issuer helm.sh/resource-policy=keep; then " +
				"helm upgrade linkerd-control-plane linkerd/linkerd-control-plane -n linkerd --reuse-values --set identity.externalCA=true"}},
		{"requested, the ConfigMap kept, the Secret not", p.state(takeoverRequested, func(s *State) { s.Bundle.Helm.Keep = true }), ReasonTakeoverHandoverPending,
			[]string{"the takeover waits for Helm to let go of what it renders, so that no helm upgrade deletes it: kubectl annotate -n linkerd secret linkerd-identity-issuer helm.sh/resource-policy=keep; then helm upgrade"}},
		{"the hand-made anchor expires too soon", short.state(takeoverRequested, keptByHelm), ReasonTakeoverTooLate,
			[]string{"CN=root.linkerd.cluster.local (" + ShortFingerprint(Fingerprint(short.hand.cert)), short.hand.cert.NotAfter.UTC().Format(time.RFC3339), "within 72h0m0s"}},
		{"the hand-made issuer expires too soon", shortIssuer.state(takeoverRequested, keptByHelm, issuer(shortIssuer.handIssuer)), ReasonTakeoverTooLate,
			[]string{"CN=identity.linkerd.cluster.local (" + ShortFingerprint(Fingerprint(shortIssuer.handIssuer.cert))}},
		{"too late, requested or not", short.state(), ReasonTakeoverTooLate, nil},
		// Misstep "the scheme switched before cert-manager's PKI": identity reads a tls.crt
		// that is not there.
		{"identity switched to a tls.crt that is not there", p.state(takeoverRequested, keptByHelm, func(s *State) {
			d := s.ControlPlane["linkerd-identity"]
			d.IssuerScheme = SchemeKubernetes
			s.ControlPlane["linkerd-identity"] = d
			s.Issuer = Source{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Err: errors.New("no tls.crt key"), Helm: s.Issuer.Helm}
		}), "IssuerUnavailable", []string{"the identity issuer Secret linkerd/linkerd-identity-issuer: no tls.crt key", "-identity-scheme=kubernetes.io/tls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := observeBootstrap(tc.s, "")
			if d.Outcome != workflow.Wait || d.Reason != tc.reason {
				t.Fatalf("bootstrap: %s %s (%s), want to wait with %s", d.Outcome, d.Reason, d.Message, tc.reason)
			}
			for _, want := range tc.says {
				if !strings.Contains(d.Message, want) {
					t.Errorf("message %q does not say %q", d.Message, want)
				}
			}
			if prev, ok := RecreatePrevious(tc.s, StepBootstrap); ok {
				t.Errorf("the previous anchor would be recreated from the bundle (%s) before the takeover may start", Fingerprint(prev))
			}
		})
	}
}

// Once it may start, the takeover is bootstrap's: the hand-made anchor becomes the previous
// anchor (its certificate alone), and the standard rotation moves the mesh from it onto
// cert-manager's, expanding the bundle to both.
func TestTakeoverStartsAsARotationFromTheHandMadeAnchor(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	s := p.state(takeoverRequested, keptByHelm)
	if d := observeBootstrap(s, ""); d.Outcome != workflow.Act || d.Reason != "PreviousAnchorMissing" {
		t.Fatalf("bootstrap: %s %s (%s), want to write the previous anchor", d.Outcome, d.Reason, d.Message)
	}
	w := newConvergingWriter(s)
	if err := actBootstrap(w)(context.Background(), s, ""); err != nil {
		t.Fatal(err)
	}
	if !s.Previous.Usable() || !s.Previous.Cert.Equal(p.hand.cert) {
		t.Fatalf("previous anchor %v, want the hand-made anchor", s.Previous.Cert)
	}
	if !s.Rotating() {
		t.Fatal("no rotation from the hand-made anchor to cert-manager's")
	}
	if got, want := s.DesiredBundle(), RenderBundle(p.cm.cert, p.hand.cert); got != want {
		t.Fatalf("desired bundle is not cert-manager's anchor and the hand-made one")
	}
	if d := s.takeoverGate(); d != nil {
		t.Fatalf("the gate still waits once the previous anchor is recorded: %s", d.Message)
	}
}

// A mesh that does not look hand-made (identity on cert-manager's scheme, the bundle not Helm's)
// and trusts an anchor besides cert-manager's is one whose anchor was renewed while the operator
// was away: bootstrap keeps taking that anchor as the previous one, no takeover asked.
func TestAnchorRenewedWhileAwayIsNoTakeover(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	s := p.state(func(s *State) {
		s.Bundle.Helm = HelmRender{}
		d := s.ControlPlane["linkerd-identity"]
		d.IssuerScheme = SchemeKubernetes
		s.ControlPlane["linkerd-identity"] = d
	})
	if got := s.TakeoverAnchors(); got != nil {
		t.Fatalf("takeover anchors %d, want none", len(got))
	}
	if prev, ok := RecreatePrevious(s, StepBootstrap); !ok || !prev.Equal(p.hand.cert) {
		t.Fatalf("previous anchor not taken from the bundle: %v %v", prev, ok)
	}
}

// While identity reads the issuer Linkerd's chart rendered, a renewal of cert-manager's issuer
// moves nothing: wait-for-identity-issuer waits for the helm upgrade that switches identity's
// scheme, prints it, and never renews, even when the spec automates renewals.
func TestIssuerSchemeSwitchIsTheUsersHelmUpgrade(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	inRotation := func(s *State) {
		s.Previous = src("linkerd", "linkerd-previous-anchor", p.hand)
		bundleOf(p.cm, p.hand)(s)
		s.TrustBundle = Convergence{Converged: 3, Target: 3}
		s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
	}
	upgrade := "helm upgrade linkerd-control-plane linkerd/linkerd-control-plane -n linkerd --reuse-values --set identity.externalCA=true --set identity.issuer.scheme=kubernetes.io/tls"
	step := stepNamed(t, StepWaitForIdentityIssuer)
	for _, tc := range []struct {
		name, reason string
		s            *State
		says         string
	}{
		{"cert-manager's issuer staged", ReasonWaitingForIssuerScheme, p.state(inRotation), upgrade},
		{"none staged", "IssuerSchemeNotReady", p.state(inRotation, func(s *State) {
			s.StagedIssuer = Source{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Err: errors.New("no tls.crt key")}
		}),
			"apply the identity issuer's Certificate"},
		{"staged on another anchor", "IssuerSchemeNotReady", p.state(inRotation, func(s *State) { s.StagedIssuer = src("linkerd", "linkerd-identity-issuer", p.handIssuer) }),
			"cmctl renew -n linkerd linkerd-identity-issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := observeIssuerRenewal(tc.s, "")
			if d.Outcome != workflow.Wait || d.Reason != tc.reason || !strings.Contains(d.Message, tc.says) {
				t.Fatalf("%s %s (%s), want to wait with %s saying %q", d.Outcome, d.Reason, d.Message, tc.reason, tc.says)
			}
			if got := step.Manual(tc.s); got != upgrade {
				t.Errorf("the plan asks the user to run %q, want %q", got, upgrade)
			}
			if got := step.Automated(tc.s); got != "" {
				t.Errorf("the plan says the operator does it (%q), spec.identityIssuerRenewal Automatic or not", got)
			}
		})
	}
	// After the upgrade identity reads tls.crt: the issuer is cert-manager's, the step is done.
	s := p.state(inRotation, issuer(p.cmIssuer), func(s *State) {
		d := s.ControlPlane["linkerd-identity"]
		d.IssuerScheme = SchemeKubernetes
		s.ControlPlane["linkerd-identity"] = d
		s.StagedIssuer = Source{}
		s.Issuer.ChartIssuer = true // the Secret still holds crt.pem
	})
	if d := observeIssuerRenewal(s, ""); d.Outcome != workflow.Done {
		t.Fatalf("after the scheme switch: %s %s (%s), want done", d.Outcome, d.Reason, d.Message)
	}
	if note := s.ChartIssuerLeft(); !strings.Contains(note, `"path":"/data/crt.pem"`) {
		t.Errorf("no closing note for the chart's issuer left in the Secret: %q", note)
	}
}

// Misstep "the ConfigMap deleted" (a helm upgrade with identity.externalCA=true before the keep
// annotation): the operator does not create a bundle from cert-manager's anchor under an
// identity that signs with the hand-made issuer, and prints the commands that recreate it from
// the roots Linkerd's injector wrote into the pods. The JSONPath in them is run here with
// client-go's jsonpath, kubectl's own, over a pod as the injector writes it (native sidecar).
func TestBundleLostUnderHandMadeIssuer(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	s := p.state(takeoverRequested, noBundle())
	d := observeBootstrap(s, "")
	if d.Outcome != workflow.Wait || d.Reason != ReasonTrustRootsLost || !strings.Contains(d.Message, "kubectl create configmap -n linkerd linkerd-identity-trust-roots --from-file=ca-bundle.crt=roots.pem") {
		t.Fatalf("bootstrap: %s %s (%s), want to wait for the ConfigMap to be recreated", d.Outcome, d.Reason, d.Message)
	}
	if prev, ok := RecreatePrevious(s, StepBootstrap); ok {
		t.Fatalf("previous anchor recreated (%s) with the bundle lost", Fingerprint(prev))
	}
	if prev, ok := bootstrapPrevious(s); ok {
		t.Fatalf("bootstrap would write previous anchor %s", Fingerprint(prev))
	}

	roots := RenderBundle(p.hand.cert)
	list := map[string]any{"items": []any{map[string]any{"spec": map[string]any{
		"initContainers": []any{map[string]any{"name": "linkerd-proxy", "env": []any{
			map[string]any{"name": "LINKERD2_PROXY_IDENTITY_DIR", "value": "/var/run/linkerd/identity/end-entity"},
			map[string]any{"name": "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", "value": roots}}}},
		"containers": []any{map[string]any{"name": "app"}}}}}}
	jp := jsonpath.New("roots")
	if err := jp.Parse(RootsJSONPath); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := jp.Execute(&out, list); err != nil {
		t.Fatal(err)
	}
	if out.String() != roots {
		t.Fatalf("the JSONPath prints %q, want the pod's trust anchors", out.String())
	}

	// A fresh install: no bundle, cert-manager's issuer. Bootstrap creates both.
	fresh := p.state(noBundle(), issuer(p.cmIssuer))
	if msg := fresh.bundleLostUnderForeignIssuer(); msg != "" {
		t.Fatalf("a fresh install is taken for a lost bundle: %s", msg)
	}
}

// Misstep "the scheme switched before the data plane trusts the new anchor": the wait of
// propagate-trust-roots warns against it beforehand, and once it happened, the identity pods
// started on cert-manager's issuer are reported (IdentityRestartedEarly) as for any issuer
// switched early.
func TestSchemeSwitchedEarly(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	propagating := func(s *State) {
		s.Previous = src("linkerd", "linkerd-previous-anchor", p.hand)
		bundleOf(p.cm, p.hand)(s)
		s.TrustBundle = Convergence{Converged: 1, Target: 3}
		s.RotationStart = s.Now.Add(-time.Hour)
	}
	s := p.state(propagating)
	d := stepNamed(t, StepPropagateTrustRoots).Observe(s, "")
	if d.Outcome != workflow.Wait || !strings.Contains(d.Message, "do not switch identity's issuer scheme") {
		t.Fatalf("propagate-trust-roots: %s %s (%s), want a wait that warns against the scheme switch", d.Outcome, d.Reason, d.Message)
	}
	switched := p.state(propagating, issuer(p.cmIssuer), identityPod("linkerd-identity-new", -time.Minute, ""), func(s *State) {
		d := s.ControlPlane["linkerd-identity"]
		d.IssuerScheme = SchemeKubernetes
		s.ControlPlane["linkerd-identity"] = d
	})
	if got := switched.IdentityRestartedEarly(rotationSteps, StepPropagateTrustRoots); len(got) != 1 || got[0] != "linkerd/linkerd-identity-new" {
		t.Fatalf("identity restarted early: %v, want the pod started on cert-manager's issuer", got)
	}
	if d := stepNamed(t, StepPropagateTrustRoots).Observe(switched, ""); strings.Contains(d.Message, "do not switch") {
		t.Errorf("still warns against a switch made already: %s", d.Message)
	}
}

// The desired bundle is the ConfigMap's own bytes when it holds exactly the desired anchors, in
// order: Linkerd's chart trims the final newline, and the injector stamps pods with the digest of
// the bytes it read, so a cross-signed takeover, which keeps the hand-made anchor alone until the
// issuer switch, counts every pod injected from the chart's ConfigMap as converged.
func TestDesiredBundleKeepsTheBytesOfTheSameAnchors(t *testing.T) {
	p := newHandMadePKI(t, 8760*time.Hour)
	chart := strings.TrimSpace(RenderBundle(p.hand.cert))
	crossSigned := p.state(func(s *State) {
		s.Bundle.Data = chart
		s.Previous = src("linkerd", "linkerd-previous-anchor", p.hand)
		s.Spec.Strategy = v1alpha1.StrategyCrossSigned
	})
	if got := crossSigned.DesiredBundle(); got != chart {
		t.Fatalf("desired bundle %q, want the chart's bytes %q", got, chart)
	}
	if d := observeBundleWritten(crossSigned, ""); d.Outcome != workflow.Done {
		t.Errorf("the bundle is rewritten for its bytes alone: %s %s", d.Outcome, d.Message)
	}
	standard := p.state(func(s *State) {
		s.Bundle.Data = chart
		s.Previous = src("linkerd", "linkerd-previous-anchor", p.hand)
	})
	if got, want := standard.DesiredBundle(), RenderBundle(p.cm.cert, p.hand.cert); got != want {
		t.Fatalf("expanded bundle %q, want both anchors rendered", got)
	}
	twice := p.state(func(s *State) {
		s.Bundle.Data = RenderBundle(p.hand.cert) + RenderBundle(p.hand.cert)
		s.Bundle.Certs = []*x509.Certificate{p.hand.cert, p.hand.cert}
		s.Previous = src("linkerd", "linkerd-previous-anchor", p.hand)
		s.Spec.Strategy = v1alpha1.StrategyCrossSigned
	})
	if got := twice.DesiredBundle(); got != RenderBundle(p.hand.cert) {
		t.Errorf("a bundle holding the anchor twice is kept: %q", got)
	}
}
