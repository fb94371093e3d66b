package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestTakeoverKilledAtEveryStep is the standard takeover of TestTakeoverFromHandMadeCertificates
// with the operator SIGKILLed at every kill point of the fault suite (StepKillPoints) in turn,
// within the one takeover: each operator is started to die at the next point, and the next one
// resumes from the checkpoint. A point whose step the takeover passes without acting there is
// re-armed past it. Expected: the takeover completes, restarting each workload twice and each
// control-plane Deployment no more than the uninterrupted takeover does, with no mTLS violation
// and no key material in any operator's log.
func TestTakeoverKilledAtEveryStep(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e, _ := newHandMadeEnv(t, ctx, c)
	start := time.Now()
	cmAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	e.Mesh.ResetRolloutStats()
	// Bootstrap has no point of its own here: the takeover's first write, linkerd-previous-anchor
	// from the hand-made anchor, is the operator's repair of a missing previous anchor (an
	// idempotent write of a value the cluster holds), made before the engine's bootstrap, which
	// then has nothing to do.
	k := newKillChain(e, StepKillPoints(steps.Rotation(nil)))

	e.cli("takeover", "--yes")
	k.wait("the keep annotations asked for", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return strings.Contains(tar.Status.BlockingMessage, "helm.sh/resource-policy=keep")
	})
	for _, kind := range []string{"configmaps", "secrets"} {
		e.annotateKeep(kind)
	}
	k.wait("the expanded bundle propagating", phaseIs(v1alpha1.PhasePropagatingTrustRoots))
	e.Restart(e.Apps)
	k.wait("the scheme switch asked for", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseWaitingForIdentityRotation && strings.Contains(tar.Status.BlockingMessage, "identity.issuer.scheme=kubernetes.io/tls")
	})
	e.switchScheme()
	k.wait("the reduced bundle propagating", phaseIs(v1alpha1.PhaseRemovingOldTrustRoots))
	e.Restart(e.Apps)
	k.wait("Synced on cert-manager's anchor", func(tar *v1alpha1.TrustAnchorRotation) bool {
		return tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.PreviousAnchorFingerprint == steps.Fingerprint(cmAnchor)
	})
	e.Operator = k.finish()

	t.Logf("%d kill point(s): %d fired (%s), %d passed over without an act there and re-armed (%s)",
		len(k.points), len(k.fired), strings.Join(k.fired, ", "), len(k.passed), strings.Join(k.passed, ", "))
	if len(k.fired)+len(k.passed) != len(k.points) {
		t.Errorf("the chain ended at point %d of %d", len(k.fired)+len(k.passed), len(k.points))
	}
	if b := e.bundle(); b != steps.RenderBundle(cmAnchor) {
		t.Errorf("Synced with a bundle other than cert-manager's anchor alone:\n%s", b)
	}
	e.checkRestarts(2, "onto the expanded bundle, then onto cert-manager's anchor alone")
	e.checkTakeoverControlPlaneRestarts()
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Errorf("mTLS violations: %v", err)
	}
	var keys KeyMaterial
	if err := keys.Collect(ctx, c.Kube()); err != nil {
		t.Fatal(err)
	}
	if keys.Keys() == 0 {
		t.Fatal("no private key collected to look for")
	}
	for _, op := range k.ops {
		data, err := os.ReadFile(op.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, found := range keys.Find("operator log "+op.LogPath, data) {
			t.Error(found)
		}
	}
	e.removeChartIssuer()
}

func phaseIs(p v1alpha1.Phase) func(*v1alpha1.TrustAnchorRotation) bool {
	return func(tar *v1alpha1.TrustAnchorRotation) bool { return tar.Status.Phase == p }
}

// killChain runs the operators of a rotation, each started to die at the next kill point.
type killChain struct {
	e      *Env
	points []string
	order  map[string]int // step name -> its place in the rotation
	next   int            // the armed point
	op     *Operator
	ops    []*Operator
	// fired are the points at which an operator died; passed those the rotation went past
	// without reaching, each followed by a kill of ours to arm the next.
	fired, passed []string
	// beyond: the checkpoint has been past the idle step, so a return to it is the rotation's end.
	beyond bool
}

func newKillChain(e *Env, points []string) *killChain {
	k := &killChain{e: e, points: slices.Clone(points), order: map[string]int{}}
	for i, st := range steps.Rotation(nil) {
		k.order[st.Name] = i
	}
	// In the order the rotation reaches them: StepKillPoints lists the user's waits last.
	slices.SortStableFunc(k.points, func(a, b string) int {
		_, sa, _ := strings.Cut(a, ":")
		_, sb, _ := strings.Cut(b, ":")
		return k.order[sa] - k.order[sb]
	})
	k.start()
	return k
}

// armed is the armed point's kind and step; "" once every point was used.
func (k *killChain) armed() (kind, step string) {
	if k.next >= len(k.points) {
		return "", ""
	}
	kind, step, _ = strings.Cut(k.points[k.next], ":")
	return kind, step
}

// start runs an operator armed with the next point ("enter" points are the test's own kills).
func (k *killChain) start() {
	env := []string{"POD_NAMESPACE=" + k.e.Release.Namespace}
	if kind, _ := k.armed(); kind != "" && kind != "enter" {
		env = append(env, app.CrashEnv+"="+k.points[k.next])
	}
	// One operator at a time, as the fault suite runs them: no Lease to wait out after a kill.
	args := append(append([]string{}, k.e.Release.OperatorArgs...), "--leader-elect=false")
	k.op = StartOperatorWithEnv(k.e.T, env, k.e.Release.Kubeconfig, args...)
	k.ops = append(k.ops, k.op)
}

// killAndRestart kills the running operator, as a crash would, and starts the next.
func (k *killChain) killAndRestart() {
	k.op.Kill()
	<-k.op.Done()
	k.start()
}

// poll moves the chain on from what the status shows: an operator that died at its point is
// followed by the next; an "enter" point is the test's kill at its step; a point whose step the
// rotation went past is given up.
func (k *killChain) poll(tar *v1alpha1.TrustAnchorRotation) {
	cur := stepOf(tar)
	if i, ok := k.order[cur]; ok && i > k.order[steps.StepDetectAnchorRotation] {
		k.beyond = true
	}
	kind, step := k.armed()
	switch {
	case k.op.Exited():
		if kind == "" || kind == "enter" || k.op.ExitCode() != -1 {
			k.e.T.Errorf("an operator exited with %d, not at a kill point (armed: %q)", k.op.ExitCode(), kind+":"+step)
		} else {
			k.fired = append(k.fired, k.points[k.next])
			k.next++
		}
		k.start()
	case kind == "enter" && cur == step:
		k.fired = append(k.fired, k.points[k.next])
		k.next++
		k.killAndRestart()
	case kind != "" && (k.order[cur] > k.order[step] || k.beyond && cur == steps.StepDetectAnchorRotation):
		k.e.T.Logf("kill point %s passed over: the checkpoint is at %s", k.points[k.next], cur)
		k.passed = append(k.passed, k.points[k.next])
		k.next++
		k.killAndRestart()
	}
}

// wait polls the status until done holds, moving the chain on at each read.
func (k *killChain) wait(what string, done func(*v1alpha1.TrustAnchorRotation) bool) {
	k.e.T.Helper()
	if _, err := WaitRotation(k.e.Ctx, k.e.TARs, rotationName, 5*time.Minute, what, func(tar *v1alpha1.TrustAnchorRotation) bool {
		k.poll(tar)
		return done(tar)
	}); err != nil {
		k.e.T.Fatal(err)
	}
}

// finish gives the points left up and returns the operator running now, armed with none.
func (k *killChain) finish() *Operator {
	for ; k.next < len(k.points); k.next++ {
		k.passed = append(k.passed, k.points[k.next])
	}
	k.killAndRestart()
	return k.op
}
