package faults

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
)

// reductionPoints are the crash points at which the anchor is renewed between
// retire-previous-anchor (previous := the rotation's anchor) and reduce-trust-bundle:
//   - acted:retire-previous-anchor  the previous anchor was written, the checkpoint is still at
//     retire-previous-anchor;
//   - save:reduce-trust-bundle      the checkpoint is at reduce-trust-bundle with its token, the
//     bundle not yet reduced.
var reductionPoints = []string{"acted:" + steps.StepRetirePreviousAnchor, "save:" + steps.StepReduceTrustBundle}

// renewWhileDown restarts dead operators as the supervisor does, except that the first time the
// operator is found dead (killed by its crash hook) it renews the trust anchor before starting
// the next one: the restarted operator finds the renewed anchor at exactly the checkpoint the
// crash hook stopped the previous one at.
type renewWhileDown struct {
	e     *e2e.Env
	sup   *Supervisor
	first *e2e.Operator
	// before and renewed are the anchor when the operator died, and the one it was renewed to.
	before, renewed *x509.Certificate
}

func (r *renewWhileDown) Ensure() bool {
	if r.renewed == nil && r.first.Exited() {
		r.before = r.e.SecretCert("cert-manager", "linkerd-trust-anchor")
		r.renewed = r.e.Renew("cert-manager", "linkerd-trust-anchor")
		r.e.T.Logf("operator down: renewed the anchor %.12s -> %.12s", steps.Fingerprint(r.before), steps.Fingerprint(r.renewed))
	}
	return r.sup.Ensure()
}

// TestAnchorRenewedAtReduction renews the trust anchor (A2 -> A3) while the operator is down
// between retire-previous-anchor and reduce-trust-bundle of the rotation A1 -> A2, at each of
// reductionPoints. Expected: the round finishes on the bundle it was reducing to, {A2}, and
// restarts the control plane onto it; the next round then expands to {A3, A2}, and completes on
// {A3} — no bundle holds A3 before the next round's expansion, the previous anchor goes A2 then
// A3 (never straight to A3), each control-plane Deployment is restarted three times per round,
// and the oracle sees 0 mTLS violations.
func TestAnchorRenewedAtReduction(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	for _, point := range reductionPoints {
		t.Run(point, func(t *testing.T) {
			e := *e
			e.T = t
			RepeatOnReissue(t, func() string {
				runStart := time.Now()
				a1 := e.SecretCert("cert-manager", "linkerd-trust-anchor")
				sup := NewSupervisor(t, &e)
				defer sup.Stop()
				l := NewLedger(t, &e)
				defer l.Close()
				r := &renewWhileDown{e: &e, sup: sup, first: sup.Start(point)}
				// drive renews A1 -> A2, and plays the user through both rounds.
				Drive(t, &e, r, DriveOpts{timeout: 8 * time.Minute})
				if r.renewed == nil {
					t.Fatalf("the operator never crashed at %s", point)
				}
				a2, a3 := r.before, r.renewed
				CheckOracle(t, &e, runStart)
				if why := l.Reissued(t, &e, 2); why != "" {
					return why
				}
				l.mu.Lock()
				bundles, previous := l.bundleSeq, l.previousSeq
				l.mu.Unlock()
				want := []string{steps.RenderBundle(a2, a1), steps.RenderBundle(a2), steps.RenderBundle(a3, a2), steps.RenderBundle(a3)}
				if strings.Join(bundles, "|") != strings.Join(want, "|") {
					t.Errorf("trust bundles written %s, want [A2 A1] [A2] [A3 A2] [A3] (A1 %.12s, A2 %.12s, A3 %.12s)",
						describeBundles(bundles), steps.Fingerprint(a1), steps.Fingerprint(a2), steps.Fingerprint(a3))
				}
				wantPrev := []string{string(steps.EncodePEM(a2)), string(steps.EncodePEM(a3))}
				if strings.Join(previous, "|") != strings.Join(wantPrev, "|") {
					t.Errorf("linkerd-previous-anchor written %d times %s, want A2 then A3", len(previous), describeBundles(previous))
				}
				l.mu.Lock()
				for _, d := range controlPlane {
					if n := len(l.restarts[d]); n != 6 {
						t.Errorf("Deployment %s was restarted %d times, want 6 (3 per round)", d, n)
					}
				}
				l.mu.Unlock()
				checkEvent(t, &e, "RotationSuperseded", "renewed again ("+steps.Fingerprint(a3)[:12])
				t.Logf("%s: both rounds complete in %s; %s", point, time.Since(runStart).Round(time.Second), l.Summary())
				return ""
			})
		})
		if t.Failed() {
			break
		}
	}
	CheckOracle(t, e, start)
}
