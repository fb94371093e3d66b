package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// soakFaults are the faults a soak rotation draws from.
// "anchor-at-reduction" renews the anchor while the operator is down between
// retire-previous-anchor and reduce-trust-bundle (see reductionPoints).
// "identity-restarted-early" restarts linkerd-identity by hand (kubectl rollout restart) once the
// rotation waits for the data plane on the expanded bundle, the issuer still on the old anchor;
// with the issuer already on the new anchor such a restart breaks mTLS by nature, which no
// operator can prevent (the e2e TestIdentityRestartedEarly shows the operator reporting it).
// "three-replicas" runs the rotation on a control plane of three replicas per Deployment.
var soakFaults = []string{"none", "crash", "kill", "leader", "early-issuer", "api-faults", "previous-deleted", "third-anchor", "anchor-at-reduction",
	"identity-restarted-early", "three-replicas"}

// TestSoak runs rotations back to back, each with a fault drawn at random (seeded; the seed is
// logged and TRUST_ROTATION_SEED repeats the run) from soakFaults, the oracle watching
// throughout. TRUST_ROTATION_SOAK_ROTATIONS sets the number of rotations (3 by default, for
// CI; make soak runs 100). It ends with the line
//
//	soak: <N> rotations, <M> faults, <V> violations, <S> stuck
//
// and fails when V or S is not 0.
func TestSoak(t *testing.T) {
	e := sharedEnv(t)
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
	points := killPoints()
	names := []string{}
	for _, st := range steps.Rotation(nil)[2:] {
		names = append(names, st.Name)
	}
	rotations, faults, violations, stuck := 0, 0, 0, 0
	for i := 0; i < n && stuck == 0; i++ {
		fault := soakFaults[rng.IntN(len(soakFaults))]
		point := points[rng.IntN(len(points))]
		step := names[rng.IntN(len(names))]
		start := time.Now()
		var r restarter
		var rw *renewWhileDown
		var stop func()
		o := driveOpts{timeout: 5 * time.Minute}
		done := false
		once := func(at string, fn func()) func(*v1alpha1.TrustAnchorRotation) {
			return func(tar *v1alpha1.TrustAnchorRotation) {
				if !done && stepOf(tar) == at {
					done = true
					fn()
				}
			}
		}
		switch fault {
		case "leader":
			reps := newReplicas(t, e)
			r, stop = reps, reps.stop
			o.onPoll = once(step, func() {
				if id, err := leader(e.Ctx, e); err == nil && reps.sups[id] != nil {
					reps.sups[id].kill()
				}
			})
		case "api-faults":
			proxy := startFaultProxy(t, e.Release.Kubeconfig, rand.New(rand.NewPCG(sd, uint64(i))))
			proxy.set(0.1, 0.05)
			sup := newSupervisor(t, e, "--kubeconfig", proxy.Kubeconfig)
			sup.start("")
			r, stop = sup, sup.stop
		default:
			sup := newSupervisor(t, e)
			crash := ""
			switch fault {
			case "crash":
				crash = point
			case "anchor-at-reduction":
				crash = reductionPoints[rng.IntN(len(reductionPoints))]
				point = crash
			}
			first := sup.start(crash)
			r, stop = sup, sup.stop
			switch fault {
			case "anchor-at-reduction":
				rw = &renewWhileDown{e: e, sup: sup, first: first}
				r = rw
			case "kill":
				o.onPoll = once(step, sup.kill)
			case "early-issuer":
				o.earlyIssuer = true
			case "previous-deleted":
				o.onPoll = once(step, func() {
					_ = e.Cluster.Kube().CoreV1().Secrets("linkerd").Delete(e.Ctx, "linkerd-previous-anchor", metav1.DeleteOptions{})
				})
			case "third-anchor":
				o.onPoll = once(step, func() { e.Renew("cert-manager", "linkerd-trust-anchor") })
			case "identity-restarted-early":
				identity := []meshsim.Workload{{Namespace: "linkerd", Name: meshsim.IdentityDeployment}}
				o.onPoll = once(steps.StepPropagateTrustRoots, func() { e.Restart(identity) })
			case "three-replicas":
				e.ScaleControlPlane(3)
				stop = func() { sup.stop(); e.ScaleControlPlane(1) }
			}
		}
		what := fault
		switch fault {
		case "crash", "anchor-at-reduction":
			what += " at " + point
		case "kill", "leader", "previous-deleted", "third-anchor":
			what += " at " + step
		}
		err := driveErr(t, e, r, o)
		stop()
		if rw != nil && rw.renewed == nil {
			t.Errorf("rotation %d (%s): the operator never crashed there, the anchor was not renewed", i+1, what)
		}
		rotations++
		if fault != "none" {
			faults++
		}
		v := len(e.Mesh.Oracle().ViolationsSince(start))
		violations += v
		if err != nil {
			stuck++
			t.Errorf("rotation %d (%s) stuck: %v", i+1, what, err)
		}
		if v > 0 {
			t.Errorf("rotation %d (%s): %d mTLS violations: %v", i+1, what, v, e.Mesh.Oracle().ViolationsSince(start))
		}
		t.Logf("rotation %d: %s, %s", i+1, what, time.Since(start).Round(time.Second))
	}
	line := fmt.Sprintf("soak: %d rotations, %d faults, %d violations, %d stuck", rotations, faults, violations, stuck)
	t.Log(line)
	fmt.Fprintln(os.Stderr, line)
}
