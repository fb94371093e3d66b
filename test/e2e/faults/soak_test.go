package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// soakFault is a kind of fault a soak rotation draws. arm prepares one rotation: it starts the
// operators (soakRun.supervise, or its own), installs its hooks in the rotation's driveOpts,
// draws where the fault goes from soakRun.rng, and says whether the fault fired.
type soakFault struct {
	name string
	arm  func(run *soakRun)
}

// soakFaults are the faults a soak rotation draws from, each as likely. A new kind is an entry
// here and its arm function.
var soakFaults = []soakFault{
	{"none", func(*soakRun) {}},
	{"crash", armCrash},
	{"kill", armKill},
	{"leader", armLeader},
	{"early-issuer", armEarlyIssuer},
	{"api-faults", armAPIFaults},
	{"previous-deleted", armPreviousDeleted},
	{"third-anchor", armThirdAnchor},
	{"anchor-at-reduction", armAnchorAtReduction},
	{"configmap-revert", armConfigMapRevert},
	{"issuer-renewed-again", armIssuerRenewedAgain},
	{"identity-restarted-early", armIdentityRestartedEarly},
	{"three-replicas", armThreeReplicas},
	{"suspend", armSuspend},
}

// soakStrategies are the strategies a soak rotation draws from, each as likely. A rotation whose
// strategy differs from the previous one's starts by re-issuing the anchor from that strategy's
// manifest (e2e.Env.RenewForStrategy), as a user switching strategies does.
var soakStrategies = []v1alpha1.RotationStrategy{v1alpha1.StrategyStandard, v1alpha1.StrategyCrossSigned}

// soakRun is one soak rotation: what its fault set up, and whether the fault fired.
type soakRun struct {
	t   *testing.T
	e   *e2e.Env
	rng *rand.Rand
	// strategy is the rotation's, drawn before its fault (o.strategy).
	strategy v1alpha1.RotationStrategy
	// seed and index make per-rotation random sources (the API fault proxy's).
	seed  uint64
	index int
	o     DriveOpts
	// r restarts the operators it runs, stop ends them; a plain supervised operator when the
	// fault starts none.
	r    Restarter
	stop func()
	// where says where the fault was put, for the log ("at <step>").
	where string
	// fired reports, once the rotation ended, whether the fault happened (a crash point that
	// was never reached, or a step the rotation passed between two observations, did not);
	// nil: it did.
	fired func() bool
}

// supervise runs the rotation's operator under a supervisor, with the crash hook set to crash
// (app.CrashEnv; "" for none), and returns the first process.
func (run *soakRun) supervise(crash string, args ...string) (*Supervisor, *e2e.Operator) {
	sup := NewSupervisor(run.t, run.e, args...)
	first := sup.Start(crash)
	run.r, run.stop = sup, sup.Stop
	return sup, first
}

// rotationSteps are the steps a fault may be put at: every step of a rotation.
func rotationSteps() []string {
	var names []string
	for _, st := range steps.Rotation(nil) {
		if !st.Idle() {
			names = append(names, st.Name)
		}
	}
	return names
}

// at puts the fault in once, at the first observation of the rotation at step or a later one
// (a step that waits for nothing, such as a remote gate without linked clusters, is passed
// between two polls); fn reports whether it did put it in. The fault fired when it did, and
// where says at which step.
func (run *soakRun) at(step string, fn func() bool) {
	order := map[string]int{}
	for i, st := range steps.Rotation(nil) {
		order[st.Name] = i
	}
	tried, done := false, false
	run.o.onPoll = func(tar *v1alpha1.TrustAnchorRotation) {
		now := stepOf(tar)
		if tried || order[now] < order[step] {
			return
		}
		tried = true
		done = fn()
		if now != step {
			run.where = fmt.Sprintf("at %s (drawn %s)", now, step)
		}
	}
	run.where = "at " + step
	run.fired = func() bool { return done }
}

// crashed reports whether the operator's crash hook killed it.
func crashed(op *e2e.Operator) bool {
	data, err := os.ReadFile(op.LogPath)
	return err == nil && strings.Contains(string(data), "Crashing at the requested point")
}

// armCrash: the operator kills itself at a point drawn from the kill points of the rotation's
// strategy (killPoints); an enter:<step> point, a step boundary with no act, is a kill by the
// test when the status shows that step.
func armCrash(run *soakRun) {
	var points []string
	for _, p := range killPoints() {
		if strategy, at := pointStrategy(p); strategy == run.strategy {
			points = append(points, at)
		}
	}
	point := points[run.rng.IntN(len(points))]
	if step, ok := strings.CutPrefix(point, "enter:"); ok {
		sup, _ := run.supervise("")
		run.at(step, func() bool { sup.Kill(); return true })
	} else {
		_, first := run.supervise(point)
		run.fired = func() bool { return crashed(first) }
	}
	run.where = "at " + point
}

// armKill: the test SIGKILLs the operator when the status shows a step drawn at random.
func armKill(run *soakRun) {
	sup, _ := run.supervise("")
	run.at(drawStep(run.rng, rotationSteps()), func() bool { sup.Kill(); return true })
}

// armLeader: two leader-elected replicas; the leader is killed at a step drawn at random.
func armLeader(run *soakRun) {
	reps := newReplicas(run.t, run.e)
	run.r, run.stop = reps, reps.Stop
	run.at(drawStep(run.rng, rotationSteps()), func() bool {
		id, err := leader(run.e.Ctx, run.e)
		if err != nil || reps.sups[id] == nil {
			return false
		}
		reps.sups[id].Kill()
		return true
	})
}

// armEarlyIssuer: the issuer is renewed right after the anchor, before the data plane trusts
// the new anchor.
func armEarlyIssuer(run *soakRun) {
	run.supervise("")
	run.o.earlyIssuer = true
}

// armAPIFaults: the operator talks to the apiserver through a proxy that fails 10% of its
// requests and delays 5%.
func armAPIFaults(run *soakRun) {
	proxy := startFaultProxy(run.t, run.e.Release.Kubeconfig, rand.New(rand.NewPCG(run.seed, uint64(run.index))))
	proxy.set(0.1, 0.05)
	run.supervise("", "--kubeconfig", proxy.Kubeconfig)
	run.fired = func() bool { return proxy.Injected.Load() > 0 }
}

// armPreviousDeleted: linkerd-previous-anchor is deleted at a step drawn at random.
func armPreviousDeleted(run *soakRun) {
	run.supervise("")
	run.at(drawStep(run.rng, rotationSteps()), func() bool {
		err := run.e.Cluster.Kube().CoreV1().Secrets("linkerd").Delete(run.e.Ctx, "linkerd-previous-anchor", metav1.DeleteOptions{})
		return err == nil
	})
}

// armThirdAnchor: the anchor is renewed again at a step drawn at random.
func armThirdAnchor(run *soakRun) {
	run.supervise("")
	run.at(drawStep(run.rng, rotationSteps()), func() bool {
		run.e.Renew("cert-manager", "linkerd-trust-anchor")
		return true
	})
}

// armAnchorAtReduction: the anchor is renewed while the operator is down between
// retire-previous-anchor and reduce-trust-bundle (see reductionPoints and renewWhileDown).
func armAnchorAtReduction(run *soakRun) {
	point := reductionPoints[run.rng.IntN(len(reductionPoints))]
	sup, first := run.supervise(point)
	rw := &renewWhileDown{e: run.e, sup: sup, first: first}
	run.r = rw
	run.where = "at " + point
	run.fired = func() bool { return rw.renewed != nil }
}

// armConfigMapRevert: at a step drawn at random, linkerd-identity-trust-roots is written back to
// what it held before the rotation (kubectl edit, a Helm upgrade or an Argo CD self-heal do),
// as field manager kubectl-edit. It fired when that changed the ConfigMap.
func armConfigMapRevert(run *soakRun) {
	run.supervise("")
	before := bundleOf(run.t, run.e) // the anchor is renewed after arm, by the rotation's driver
	run.at(drawStep(run.rng, rotationSteps()), func() bool {
		cms := run.e.Cluster.Kube().CoreV1().ConfigMaps("linkerd")
		cm, err := cms.Get(run.e.Ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
		if err != nil || cm.Data[steps.TrustRootsKey] == before {
			return false
		}
		cm.Data[steps.TrustRootsKey] = before
		_, err = cms.Update(run.e.Ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		return err == nil
	})
}

// armIssuerRenewedAgain: cert-manager renews the identity issuer one to three times in a row
// while the data plane propagates the expanded bundle (before the issuer switch: identity skips
// it) or while the workloads renew their certificates (after it: every renewal is on the new
// anchor). TestIssuerRenewedAgainDuringRotation covers both on their own.
func armIssuerRenewedAgain(run *soakRun) {
	run.supervise("")
	n := 1 + run.rng.IntN(3)
	step := drawStep(run.rng, []string{steps.StepPropagateTrustRoots, steps.StepRenewWorkloadCertificates})
	run.at(step, func() bool {
		for range n {
			run.e.Renew("linkerd", "linkerd-identity-issuer")
		}
		return true
	})
	run.where = fmt.Sprintf("%d× at %s", n, step)
}

func drawStep(rng *rand.Rand, names []string) string { return names[rng.IntN(len(names))] }

// soakTally counts, per fault kind, the rotations that drew it and those in which it fired;
// per strategy, the rotations that drew it and those whose checkpoints recorded it alone.
type soakTally map[string]*struct{ drawn, fired int }

func (k soakTally) add(kind string, fired bool) {
	if k[kind] == nil {
		k[kind] = &struct{ drawn, fired int }{}
	}
	k[kind].drawn++
	if fired {
		k[kind].fired++
	}
}

// lines renders one line per strategy and per kind drawn, in the order of soakStrategies and
// soakFaults.
func (k soakTally) lines() []string {
	var out []string
	for _, s := range soakStrategies {
		if c := k[string(s)]; c != nil {
			out = append(out, fmt.Sprintf("soak: strategy %s: %d drawn, %d ran it (status.checkpoint.strategy)", s, c.drawn, c.fired))
		}
	}
	for _, f := range soakFaults {
		if c := k[f.name]; c != nil {
			out = append(out, fmt.Sprintf("soak: %s: %d drawn, %d fired", f.name, c.drawn, c.fired))
		}
	}
	return out
}

// TestSoak runs rotations back to back, each with a strategy drawn at random from
// soakStrategies and a fault from soakFaults (seeded; the seed is logged and TRUST_ROTATION_SEED
// repeats the run), the oracle watching throughout. TRUST_ROTATION_SOAK_ROTATIONS sets the
// number of rotations (3 by default, for CI; make soak runs 100). After them, a rotation with
// the standard strategy brings a cross-signed anchor back to the self-signed one the other
// tests expect; it counts in the rotations, violations and stuck of the last line, not in the
// draws. It ends with a line per strategy (drawn, ran: recorded in status.checkpoint.strategy)
// and per fault kind (drawn, fired) and the line
//
//	soak: <N> rotations, <M> faults, <V> violations, <S> stuck
//
// where M counts the faults that fired, and V the oracle's mTLS violations plus the pods it saw
// run without a certificate for longer than e2e.CertificateBound; it fails when V or S is not 0.
func TestSoak(t *testing.T) {
	e := SharedEnv(t)
	n := 3
	if v := os.Getenv("TRUST_ROTATION_SOAK_ROTATIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("TRUST_ROTATION_SOAK_ROTATIONS: %v", err)
		}
	}
	sd := seed(t)
	t.Logf("seed %d (TRUST_ROTATION_SEED=%d reproduces the sequence of faults)", sd, sd)
	rng := rand.New(rand.NewPCG(sd, 2))
	tally := soakTally{}
	rotations, faults, violations, stuck := 0, 0, 0, 0
	restore := false
	for i := 0; i < n+1 && stuck == 0; i++ {
		strategy := soakStrategies[rng.IntN(len(soakStrategies))]
		fault := soakFaults[rng.IntN(len(soakFaults))]
		if i == n {
			// After the drawn rotations: back to the self-signed anchor, when it is not.
			if restore = e.AnchorIssuedFor() != v1alpha1.StrategyStandard; !restore {
				break
			}
			strategy, fault = v1alpha1.StrategyStandard, soakFaults[0]
		}
		switched := e.AnchorIssuedFor() != strategy
		start := time.Now()
		run := &soakRun{t: t, e: e, rng: rng, seed: sd, index: i, strategy: strategy, o: DriveOpts{timeout: 5 * time.Minute, strategy: strategy}}
		fault.arm(run)
		if run.r == nil {
			run.supervise("")
		}
		// The strategies the rotation's checkpoints recorded: what the rotation ran, not what
		// was drawn.
		ran := map[v1alpha1.RotationStrategy]bool{}
		onPoll := run.o.onPoll
		run.o.onPoll = func(tar *v1alpha1.TrustAnchorRotation) {
			if cp := tar.Status.Checkpoint; cp != nil && cp.Rotation != "" {
				ran[cp.Strategy] = true
			}
			if onPoll != nil {
				onPoll(tar)
			}
		}
		err := DriveErr(t, e, run.r, run.o)
		run.stop()
		rotations++
		fired := fault.name != "none" && (run.fired == nil || run.fired())
		if !restore { // drawn by neither
			tally.add(fault.name, fired)
			tally.add(string(strategy), ran[strategy] && len(ran) == 1)
		}
		if !ran[strategy] || len(ran) != 1 {
			t.Errorf("rotation %d drew strategy %s, its checkpoints recorded %v", i+1, strategy, ran)
		}
		what := strings.TrimSpace(fault.name + " " + run.where)
		if fired {
			faults++
		} else if fault.name != "none" {
			what += " (did not fire)"
		}
		what = fmt.Sprintf("strategy %s, %s", strategy, what)
		switch {
		case restore:
			what += ", back to the self-signed anchor"
		case switched:
			what += ", anchor re-issued from " + filepath.Base(e2e.AnchorManifest(strategy))
		}
		vs := e.Mesh.Oracle().ViolationsSince(start)
		late := e.Mesh.Oracle().UncertifiedSince(start)
		violations += len(vs) + len(late)
		if err != nil {
			stuck++
			t.Errorf("rotation %d (%s) stuck: %v", i+1, what, err)
			t.Logf("rotation %d: rollouts not finished:\n%s", i+1, e2e.DescribeUnfinishedRollouts(e.Ctx, e.Cluster.Kube(), e.Namespaces()...))
		}
		if len(vs) > 0 {
			t.Errorf("rotation %d (%s): %d mTLS violations: %v", i+1, what, len(vs), vs)
		}
		if len(late) > 0 {
			t.Errorf("rotation %d (%s): %d pods without a certificate for longer than %s: %v", i+1, what, len(late), e2e.CertificateBound, late)
		}
		t.Logf("rotation %d: %s, %s", i+1, what, time.Since(start).Round(time.Second))
	}
	lines := append(tally.lines(), fmt.Sprintf("soak: %d rotations, %d faults, %d violations, %d stuck", rotations, faults, violations, stuck))
	for _, l := range lines {
		t.Log(l)
	}
	fmt.Fprintln(os.Stderr, strings.Join(lines, "\n"))
}

// armIdentityRestartedEarly: linkerd-identity is restarted by hand (kubectl rollout restart) once
// the rotation waits for the data plane on the expanded bundle, the issuer still on the old
// anchor. With the issuer already on the new anchor such a restart breaks mTLS by nature, which
// no operator can prevent (the e2e TestIdentityRestartedEarly shows the operator reporting it).
func armIdentityRestartedEarly(run *soakRun) {
	run.supervise("")
	identity := []meshsim.Workload{{Namespace: "linkerd", Name: meshsim.IdentityDeployment}}
	run.at(steps.StepPropagateTrustRoots, func() bool { run.e.Restart(identity); return true })
}

// armThreeReplicas: the rotation runs on a control plane of three replicas per Deployment.
func armThreeReplicas(run *soakRun) {
	sup, _ := run.supervise("")
	run.e.ScaleControlPlane(3)
	run.stop = func() { sup.Stop(); run.e.ScaleControlPlane(1) }
}
