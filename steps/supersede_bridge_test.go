package steps

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// issuedWith is an identity issuer whose Secret's tls.crt carries chain after it, as
// cert-manager's CA issuer writes it.
func issuedWith(c *testCA, chain ...*testCA) stateOpt {
	return func(s *State) {
		s.Issuer = src("linkerd", "linkerd-identity-issuer", c)
		s.Issuer.Chain = certsOf(chain...)
	}
}

// anchorWith is a trust anchor whose Secret's tls.crt carries chain after it.
func anchorWith(c *testCA, chain ...*testCA) stateOpt {
	return func(s *State) {
		s.Anchor = src("cert-manager", "linkerd-trust-anchor", c)
		s.Anchor.Chain = certsOf(chain...)
	}
}

func certsOf(cs ...*testCA) []*x509.Certificate {
	out := []*x509.Certificate{}
	for _, c := range cs {
		out = append(out, c.cert)
	}
	return out
}

// A cross-signed rotation A -> B is superseded by a renewal of the anchor to C before
// retire-previous-anchor: B's issuer already serves [I_B, B] and every pod still trusts A alone.
// The round starts again towards C at expand-trust-bundle.
//
//   - C as cert-manager cross-signs it (signed by B, its Secret [C, B]): the round stays
//     cross-signed, the bundle stays [A] and nothing restarts. The issuer on B, which leads to A
//     through B, is renewed onto C by the operator (identityIssuerRenewal Automatic), not
//     reported as unrelated to the anchors; the issuer renewed onto C is accepted once its chain
//     [I_C, C, B] leads to A, and refused, naming its Secret, while it lacks the bridge B.
//   - C self-signed, or signed by B but carried without B: no issuer under C can present a chain
//     that pods trusting only A accept, so the round goes on as a Standard one, says so in its
//     jump, and expands the bundle with C before anything else.
func TestCrossSignedSupersededBeforeRetirement(t *testing.T) {
	a := anchorCA(t, "anchor")
	b := newCert(t, "anchor", a, true, time.Now().Add(24*time.Hour))
	issuerB := newCert(t, "issuer", b, true, time.Now().Add(time.Hour))
	cSigned := newCert(t, "anchor", b, true, time.Now().Add(48*time.Hour))
	cSelf := newCert(t, "anchor", nil, true, time.Now().Add(48*time.Hour))

	type run struct {
		s   *State
		st  v1alpha1.TrustAnchorRotationStatus
		w   *convergingWriter
		wf  *workflow.Workflow[*State]
		log []string
	}
	start := func(t *testing.T, opts ...stateOpt) *run {
		t.Helper()
		base := []stateOpt{anchorWith(cSigned, b), previous(a), bundleOf(a), issuedWith(issuerB, b),
			bundlePods(6, 6), certPods(2, 6), crossSigned, func(s *State) {
				s.Spec.IdentityIssuerRenewal = v1alpha1.Automatic
				s.IssuerCertificate = IssuerCertificate{Namespace: "linkerd", Name: "linkerd-identity-issuer", Found: true, Revision: 3}
			}}
		s := rotatingState(pki{oldAnchor: a, newAnchor: cSigned, oldIssuer: issuerB}, append(base, opts...)...)
		r := &run{s: s, st: v1alpha1.TrustAnchorRotationStatus{Checkpoint: &v1alpha1.Checkpoint{
			Step: StepRenewWorkloadCertificates, Rotation: Fingerprint(b.cert), Strategy: v1alpha1.StrategyCrossSigned}}}
		r.w = newConvergingWriter(s)
		wf, err := NewWorkflow(Rotation(r.w))
		if err != nil {
			t.Fatal(err)
		}
		r.wf = wf
		return r
	}
	n := 0
	advance := func(t *testing.T, r *run) workflow.Result {
		t.Helper()
		if err := r.s.FromStatus(rotationSteps, &r.st); err != nil {
			t.Fatal(err)
		}
		res, err := r.wf.Advance(context.Background(), WorkflowCheckpoint(r.st.Checkpoint), r.s, func(_ context.Context, next workflow.Checkpoint) error {
			SaveCheckpoint(rotationSteps, &r.st, next, r.s, r.s.Now)
			return nil
		}, func() string { n++; return NewActStamp(time.Now().Add(time.Duration(n) * time.Second)) })
		if err != nil {
			t.Fatal(err)
		}
		r.st = Project(rotationSteps, r.st, r.s.Spec, 1, r.s, res, r.s.Now)
		r.log = append(r.log, res.Checkpoint.Step+" "+res.Decision.Reason)
		r.s.Now = r.s.Now.Add(time.Second)
		return res
	}
	// until advances until the rotation stops at a step without acting or jumping, or has
	// renewed the identity issuer (cert-manager then marks its Certificate Issuing).
	until := func(t *testing.T, r *run) workflow.Result {
		t.Helper()
		var res workflow.Result
		for range 20 {
			if res = advance(t, r); !res.Acted && res.Jumped == nil || len(r.w.renewed) > 0 && !r.s.IssuerCertificate.Issuing {
				r.s.IssuerCertificate.Issuing = len(r.w.renewed) > 0
				return res
			}
		}
		t.Fatalf("no rest after 20 passes: %s", strings.Join(r.log, "; "))
		return res
	}

	t.Run("cross-signed by B: stays cross-signed and renews the issuer", func(t *testing.T) {
		r := start(t)
		res := advance(t, r)
		if res.Jumped == nil || res.Checkpoint.Step != StepExpandTrustBundle {
			t.Fatalf("no jump to %s: %s %q", StepExpandTrustBundle, res.Decision.Reason, res.Decision.Message)
		}
		if strings.Contains(res.Jumped.Message, "Standard") {
			t.Errorf("the jump falls back to the standard strategy for a bridged anchor: %q", res.Jumped.Message)
		}
		res = until(t, r)
		if got := r.st.Checkpoint; got.Strategy != v1alpha1.StrategyCrossSigned || got.Rotation != Fingerprint(cSigned.cert) {
			t.Fatalf("checkpoint %+v, want the cross-signed rotation towards C\npath: %s", got, strings.Join(r.log, "; "))
		}
		if res.Checkpoint.Step != StepWaitForIdentityIssuer || len(r.w.renewed) != 1 {
			t.Fatalf("stopped at %s: %s %q, renewed %v; want the issuer renewed onto C at %s\npath: %s",
				res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message, r.w.renewed, StepWaitForIdentityIssuer, strings.Join(r.log, "; "))
		}
		if r.s.Bundle.Data != RenderBundle(a.cert) || len(r.w.restarts) > 0 {
			t.Fatalf("bundle %s, restarts %v: want [A] and none", fingerprints(r.s.Bundle.Certs), r.w.restarts)
		}

		// cert-manager renews the issuer onto C, but its chain lacks B: refused, naming it.
		issuerC := newCert(t, "issuer", cSigned, true, time.Now().Add(time.Hour))
		issuedWith(issuerC, cSigned)(r.s)
		r.s.IssuerCertificate.Revision++
		r.s.IssuerCertificate.Issuing = false
		res = until(t, r)
		if res.Checkpoint.Step != StepWaitForIdentityIssuer || res.Decision.Reason != ReasonIssuerChainNotBridged ||
			!strings.Contains(res.Decision.Message, "Secret linkerd/linkerd-identity-issuer") {
			t.Fatalf("an issuer chain without the bridge: %s %s %q", res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message)
		}
		// With the bridge, [I_C, C, B], it is the issuer switch.
		issuedWith(issuerC, cSigned, b)(r.s)
		res = advance(t, r)
		if rp := rotationSteps.position(res.Checkpoint.Step); rp <= rotationSteps.position(StepWaitForIdentityIssuer) {
			t.Fatalf("the bridged issuer did not pass %s: %s %s %q", StepWaitForIdentityIssuer, res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message)
		}
	})

	for name, anchorOpt := range map[string]stateOpt{
		"self-signed":                    anchorWith(cSelf),
		"signed by B, carried without B": anchorWith(cSigned),
	} {
		t.Run(name+": falls back to the standard strategy", func(t *testing.T) {
			r := start(t, anchorOpt)
			res := advance(t, r)
			if res.Jumped == nil || !strings.Contains(res.Jumped.Message, "goes on as a Standard one") ||
				!strings.Contains(res.Jumped.Message, "Secret cert-manager/linkerd-trust-anchor") {
				t.Fatalf("jump %+v: want one that says the rotation goes on as a standard one, naming the anchor's Secret", res.Jumped)
			}
			if got := r.st.Checkpoint.Strategy; got != v1alpha1.StrategyStandard {
				t.Fatalf("status.checkpoint.strategy %s, want Standard", got)
			}
			res = advance(t, r)
			want := RenderBundle(r.s.Anchor.Cert, a.cert)
			if !res.Acted || r.s.Bundle.Data != want {
				t.Fatalf("%s %s %q: bundle %s, want it expanded to [C, A] first\npath: %s", res.Checkpoint.Step, res.Decision.Reason, res.Decision.Message,
					fingerprints(r.s.Bundle.Certs), strings.Join(r.log, "; "))
			}
			if r.st.Checkpoint.Strategy != v1alpha1.StrategyStandard {
				t.Fatalf("the strategy changed back to %s", r.st.Checkpoint.Strategy)
			}
		})
	}
}

// A step that starts over (a jump that supersedes nothing) stays in its rotation's strategy,
// whatever spec.strategy says since: a standard rotation whose anchor need not be cross-signed
// must not go on as a cross-signed one.
func TestStartOverKeepsTheStrategy(t *testing.T) {
	started := time.Now().Add(-time.Hour)
	prev := &v1alpha1.Checkpoint{Step: StepPropagateTrustRoots, Rotation: "abc", Strategy: v1alpha1.StrategyStandard}
	s := &State{Spec: v1alpha1.TrustAnchorRotationSpec{Strategy: v1alpha1.StrategyCrossSigned}}
	next := workflow.Checkpoint{Step: StepPropagateTrustRoots, Jump: &workflow.JumpRecord{From: StepPropagateTrustRoots, To: StepPropagateTrustRoots, Reason: ReasonStepStartedOver}}
	cp := SavedCheckpoint(rotationSteps, prev, next, s, started)
	if cp.Strategy != v1alpha1.StrategyStandard || cp.Rotation != "abc" {
		t.Fatalf("checkpoint after the start-over: %+v, want the standard rotation abc", cp)
	}
}

// BridgePath finds the path webpki finds: through the presented bridges, depth first, a root
// ending it; not through an expired bridge, nor one on the path already, nor deeper than webpki
// goes.
func TestBridgePath(t *testing.T) {
	a := anchorCA(t, "anchor")
	b := newCert(t, "anchor", a, true, time.Now().Add(24*time.Hour))
	c := newCert(t, "anchor", b, true, time.Now().Add(24*time.Hour))
	issuerC := newCert(t, "issuer", c, true, time.Now().Add(time.Hour))
	expiredB := newCert(t, "anchor", a, true, time.Now().Add(-time.Minute))
	now := time.Now()

	cases := map[string]struct {
		presented, roots []*testCA
		room             int
		want             []*testCA
	}{
		"through C and B to A":             {presented: []*testCA{c, b}, roots: []*testCA{a}, room: maxSubCAs, want: []*testCA{issuerC, c, b}},
		"in any order":                     {presented: []*testCA{b, c}, roots: []*testCA{a}, room: maxSubCAs, want: []*testCA{issuerC, c, b}},
		"a root first":                     {presented: []*testCA{c, b}, roots: []*testCA{a, c}, room: maxSubCAs, want: []*testCA{issuerC}},
		"none without B":                   {presented: []*testCA{c}, roots: []*testCA{a}, room: maxSubCAs},
		"none through an expired bridge":   {presented: []*testCA{c, expiredB}, roots: []*testCA{a}, room: maxSubCAs},
		"none beyond the depth webpki has": {presented: []*testCA{c, b}, roots: []*testCA{a}, room: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path, _, ok := BridgePath(issuerC.cert, certsOf(tc.presented...), certsOf(tc.roots...), now, tc.room)
			if ok != (tc.want != nil) || fingerprints(path) != fingerprints(certsOf(tc.want...)) {
				t.Fatalf("path %s (found %v), want %s", fingerprints(path), ok, fingerprints(certsOf(tc.want...)))
			}
		})
	}
}
