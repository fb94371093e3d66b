package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// seed returns TRUST_ROTATION_SEED, or a fresh seed; the test logs it so a run can be repeated.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("TRUST_ROTATION_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TRUST_ROTATION_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

const (
	leaseDuration = 4 * time.Second
	leaseName     = "trust-rotation-operator"
)

// replicas is two leader-elected operators, op-a and op-b, as a 2-replica Deployment: a killed
// replica is started again (as the Deployment would) once its successor took over.
type replicas struct {
	sups map[string]*Supervisor
	mu   sync.Mutex
}

func newReplicas(t *testing.T, e *e2e.Env) *replicas {
	r := &replicas{sups: map[string]*Supervisor{}}
	for _, id := range []string{"op-a", "op-b"} {
		s := NewSupervisor(t, e, "--leader-elect=true", "--leader-election-identity="+id,
			"--leader-election-name="+leaseName,
			"--leader-election-lease-duration="+leaseDuration.String(), "--leader-election-renew-deadline=3s",
			"--leader-election-retry-period=500ms")
		s.Start("")
		r.sups[id] = s
	}
	return r
}

func (r *replicas) Ensure() bool {
	restarted := false
	for _, s := range r.sups {
		restarted = s.Ensure() || restarted
	}
	return restarted
}

func (r *replicas) Stop() {
	for _, s := range r.sups {
		s.Stop()
	}
}

func leader(ctx context.Context, e *e2e.Env) (string, error) {
	l, err := e.Cluster.Kube().CoordinationV1().Leases(e.Release.Namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// TestLeaderFailover runs two leader-elected replicas with a 4s lease and kills the leader with
// SIGKILL at three steps chosen at random (seeded; the seed is logged). Expected: the other
// replica takes the lease once it expires (the time it took is logged) and continues from
// the checkpoint — the step never goes back, and no act repeats; the rotation completes with 0
// violations.
func TestLeaderFailover(t *testing.T) {
	e := SharedEnv(t)
	sd := seed(t)
	t.Logf("seed %d (TRUST_ROTATION_SEED=%d reproduces this run)", sd, sd)
	rng := rand.New(rand.NewPCG(sd, 0))
	names := []string{}
	for _, st := range steps.Rotation(nil) {
		if !st.Idle() {
			names = append(names, st.Name)
		}
	}
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	RepeatOnReissue(t, func() string {
		at := map[string]bool{}
		for _, n := range names[:3] {
			at[n] = true
		}
		t.Logf("killing the leader at steps %v", keys(at))
		start := time.Now()
		r := newReplicas(t, e)
		defer r.Stop()
		l := NewLedger(t, e)
		defer l.Close()
		order, idle := map[string]int{}, map[string]bool{}
		for i, st := range steps.Rotation(nil) {
			order[st.Name], idle[st.Name] = i, st.Idle()
		}
		kills, wentBack := 0, []string(nil)
		Drive(t, e, r, DriveOpts{onPoll: func(tar *v1alpha1.TrustAnchorRotation) {
			// A step the status shows only briefly may be missed between two polls: kill at the
			// first observation at or after the chosen step.
			step, due := stepOf(tar), ""
			for s := range at {
				if order[step] >= order[s] && !idle[step] {
					due = s
				}
			}
			if due == "" {
				return
			}
			delete(at, due)
			old, err := leader(e.Ctx, e)
			if err != nil || r.sups[old] == nil {
				t.Fatalf("no leader to kill at %s: %q %v", step, old, err)
			}
			r.sups[old].Kill()
			killedAt := time.Now()
			kills++
			// The other replica must take over; how fast is logged, not asserted: it sees the old
			// leader's last renewal only at its own jittered retry, so even an idle machine allows
			// about leaseDuration + 2 retry periods, and a loaded one more (seen: 6.3s in CI).
			// The wait's timeout is the liveness bound.
			var next string
			err = poll.Until(e.Ctx, leaseDuration+5*time.Second, "a new leader", func(ctx context.Context) (bool, error) {
				next, err = leader(ctx, e)
				if err != nil || next == old || next == "" {
					return false, poll.Pending("leader %q %v", next, err)
				}
				return true, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(killedAt)
			after, err := e.TARs.Get(e.Ctx, rotationName)
			if err != nil {
				t.Fatal(err)
			}
			if s := stepOf(after); order[s] < order[step] && !idle[s] {
				// Judged once the run is known to have had one anchor issuance: a second one
				// legitimately restarts the rotation.
				wentBack = append(wentBack, fmt.Sprintf("after the failover the checkpoint went back from %s to %s", step, s))
			}
			t.Logf("killed leader %s at step %s; %s took over in %s", old, step, next, took.Round(time.Millisecond))
		}})
		if kills == 0 {
			t.Fatal("no leader was killed")
		}
		CheckOracle(t, e, start)
		if why := l.Reissued(t, e, 1); why != "" {
			return why
		}
		for _, w := range wentBack {
			t.Error(w)
		}
		l.CheckNoRepeats(t, false)
		fmt.Fprintf(os.Stderr, "leader failover: %d kills, %s\n", kills, l.Summary())
		return ""
	})
}
