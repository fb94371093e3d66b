package faults

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// copyAnchorIntoPrevious does what the blog's CronJob does at the end of its own rotation
// (`kubectl get secret -n cert-manager linkerd-trust-anchor -o yaml | sed s/linkerd-trust-anchor/
// linkerd-previous-anchor/ | kubectl apply -f -`): linkerd-previous-anchor becomes a copy of the
// current anchor's Secret, key included.
func copyAnchorIntoPrevious(t *testing.T, e *e2e.Env) {
	t.Helper()
	kube := e.Cluster.Kube().CoreV1()
	anchor, err := kube.Secrets("cert-manager").Get(e.Ctx, "linkerd-trust-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPrevious(t, e, anchor.Data)
}

// setPrevious replaces linkerd-previous-anchor's data, as a script's apply does.
func setPrevious(t *testing.T, e *e2e.Env, data map[string][]byte) {
	t.Helper()
	secrets := e.Cluster.Kube().CoreV1().Secrets("linkerd")
	prev, err := secrets.Get(e.Ctx, "linkerd-previous-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prev.Data = data
	if _, err := secrets.Update(e.Ctx, prev, metav1.UpdateOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
		t.Fatal(err)
	}
}

// runWhileDown restarts dead operators as the supervisor does, except that the first time the
// operator is found dead (killed by its crash hook) it runs fn before starting the next one: the
// restarted operator finds what fn did at exactly the checkpoint the crash hook stopped at.
type runWhileDown struct {
	sup   *Supervisor
	first *e2e.Operator
	fn    func()
	ran   bool
}

func (r *runWhileDown) Ensure() bool {
	if !r.ran && r.first.Exited() {
		r.ran = true
		r.fn()
	}
	return r.sup.Ensure()
}

// TestPreviousAnchorOverwrittenMidRotation overwrites linkerd-previous-anchor with a copy of the
// current anchor's Secret, as the blog's CronJob does, in the middle of a rotation: the rendered
// bundle is then the new anchor alone. Expected: the operator writes no bundle that drops the old
// anchor while the identity issuer or a live certificate chains to it — it parks with a blocking
// message naming the Secret and the anchor to put back — and once the Secret is restored the
// rotation completes with 0 mTLS violations and no pod left without a certificate.
//   - expand-trust-bundle: the Secret is overwritten while the operator is down right after it
//     saved the checkpoint at that step (crash hook), before it wrote the expanded bundle; the
//     issuer is on the old anchor.
//   - renew-workload-certificates: overwritten once the issuer is on the new anchor, while the
//     workloads still present old-issuer certificates; the ConfigMap then looks drifted from the
//     rendered bundle, and "repairing" it would drop the anchor those certificates chain to.
func TestPreviousAnchorOverwrittenMidRotation(t *testing.T) {
	e := SharedEnv(t)
	start := time.Now()
	for _, step := range []string{steps.StepExpandTrustBundle, steps.StepRenewWorkloadCertificates} {
		t.Run(step, func(t *testing.T) {
			e := *e
			e.T = t
			runStart := time.Now()
			old := e.SecretCert("cert-manager", "linkerd-trust-anchor")
			sup := NewSupervisor(t, &e)
			defer sup.Stop()
			var r Restarter = sup
			overwritten, parked := false, false
			var o DriveOpts
			if step == steps.StepExpandTrustBundle {
				first := sup.Start("save:" + step)
				r = &runWhileDown{sup: sup, first: first, fn: func() { copyAnchorIntoPrevious(t, &e); overwritten = true }}
			} else {
				sup.Start("")
			}
			o.onPoll = func(tar *v1alpha1.TrustAnchorRotation) {
				if parked || stepOf(tar) != step {
					return
				}
				if !overwritten {
					copyAnchorIntoPrevious(t, &e)
					overwritten = true
				}
				// Hold the user (the driver restarts the workloads at this step) until the
				// operator parks: the old-issuer certificates are what it must keep.
				tar = waitParked(t, &e, r, step)
				checkParked(t, &e, tar, old)
				parked = true
				setPrevious(t, &e, map[string][]byte{steps.CertificateKey: steps.EncodePEM(old)})
			}
			l := NewLedger(t, &e)
			defer l.Close()
			Drive(t, &e, r, o)
			if !parked {
				t.Fatalf("the rotation never parked at %s", step)
			}
			// Nothing was written while parked: the bundle went to the expanded one, then the
			// reduced one, and never held the new anchor alone before.
			cur := e.SecretCert("cert-manager", "linkerd-trust-anchor")
			l.mu.Lock()
			bundles := l.bundleSeq
			l.mu.Unlock()
			if want := []string{steps.RenderBundle(cur, old), steps.RenderBundle(cur)}; strings.Join(bundles, "|") != strings.Join(want, "|") {
				t.Errorf("trust bundles written %s, want [new old] [new] (old %.12s, new %.12s)", describeBundles(bundles), steps.Fingerprint(old), steps.Fingerprint(cur))
			}
			CheckOracle(t, &e, runStart)
			CheckPreviousAnchorHasNoKey(t, &e)
		})
		if t.Failed() {
			break
		}
	}
	CheckOracle(t, e, start)
}

// waitParked waits until the rotation, at step, refuses to write a bundle that drops an anchor,
// restarting dead operators through r meanwhile.
func waitParked(t *testing.T, e *e2e.Env, r Restarter, step string) *v1alpha1.TrustAnchorRotation {
	t.Helper()
	tar, err := e2e.WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "the rotation to park at "+step,
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			r.Ensure()
			return stepOf(tar) == step && strings.Contains(tar.Status.BlockingMessage, "refusing to write")
		})
	if err != nil {
		t.Fatal(err)
	}
	return tar
}

// checkParked checks the blocking message of a rotation parked on an overwritten
// linkerd-previous-anchor, and that the trust bundle still holds the old anchor.
func checkParked(t *testing.T, e *e2e.Env, tar *v1alpha1.TrustAnchorRotation, old *x509.Certificate) {
	t.Helper()
	msg := tar.Status.BlockingMessage
	for _, want := range []string{"would drop anchor " + steps.Fingerprint(old)[:12], "Secret linkerd/linkerd-previous-anchor holds", "the current trust anchor", "overwritten"} {
		if !strings.Contains(msg, want) {
			t.Errorf("blockingMessage %q does not say %q", msg, want)
		}
	}
	if !strings.Contains(bundleOf(t, e), string(steps.EncodePEM(old))) {
		t.Errorf("the trust bundle lost the old anchor %.12s", steps.Fingerprint(old))
	}
	t.Logf("parked: %s", msg)
}
