package steps

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The automation's writes, made by convergingWriter (writer_test.go).

type workloadOpt func(*Workload)

func restartedAt(token string, rolledOut bool) workloadOpt {
	return func(w *Workload) { w.RestartedAt, w.RolledOut = token, rolledOut }
}
func behindPods(names ...string) workloadOpt { return func(w *Workload) { w.BundleBehind = names } }
func notSelected() workloadOpt               { return func(w *Workload) { w.Selected = false } }
func outOfScope() workloadOpt                { return func(w *Workload) { w.Found, w.OutOfScope = false, true } }
func failed(why string) workloadOpt          { return func(w *Workload) { w.Failed = why } }
func pdb(name string, allowed int32) workloadOpt {
	return func(w *Workload) { w.PDB, w.DisruptionsAllowed = name, allowed }
}
func evictedFor(token string) workloadOpt { return func(w *Workload) { w.EvictedFor = token } }
func override(marker string) workloadOpt  { return func(w *Workload) { w.RefreshOverride = marker } }
func settling(why string) workloadOpt     { return func(w *Workload) { w.Settling = why } }

// replaced sets the pods of a workload that wants 2: running ones and terminating ones.
func replaced(running, terminating int) workloadOpt {
	return func(w *Workload) { w.Replicas, w.Running, w.Terminating = 2, running, terminating }
}

// workload adds a restartable, selected, rolled-out workload with pods behind on the bundle.
func workload(key string, opts ...workloadOpt) stateOpt {
	return func(s *State) {
		ref, _ := ParseWorkload(key)
		w := &Workload{WorkloadRef: ref, Found: true, Selected: true, RolledOut: true, BundleBehind: []string{ref.Name + "-0"}}
		for _, o := range opts {
			o(w)
		}
		if s.Workloads == nil {
			s.Workloads = map[string]*Workload{}
		}
		s.Workloads[key] = w
	}
}

func automatic(mutate ...func(*v1alpha1.DataPlaneRestart)) stateOpt {
	return func(s *State) {
		s.Spec.DataPlaneRestart = v1alpha1.DataPlaneRestart{Policy: v1alpha1.Automatic, Method: v1alpha1.RolloutRestart, MaxConcurrent: 2, MaxConcurrentPerNamespace: 1}
		for _, m := range mutate {
			m(&s.Spec.DataPlaneRestart)
		}
		if s.Workloads == nil {
			s.Workloads = map[string]*Workload{}
		}
	}
}

func at(t time.Time) stateOpt { return func(s *State) { s.Now = t } }

func startedAt(t time.Time) stateOpt { return func(s *State) { s.RotationStart = t } }

// A rotation that started at t0 (status.checkpoint.startTime, whole seconds), two of its steps'
// tokens, and a restart mark from before it.
var (
	t0     = time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	t1     = t0.Add(1500 * time.Millisecond).Format(time.RFC3339Nano)
	t2     = t0.Add(90 * time.Second).Format(time.RFC3339Nano)
	before = t0.Add(-time.Hour).Format(time.RFC3339)
)

func TestPropagateTrustRootsAutomatic(t *testing.T) {
	p := newPKI(t)
	monday10 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC) // a Monday
	cases := map[string]struct {
		opts    []stateOpt
		token   string
		outcome workflow.Outcome
		reason  string
		// contains are substrings of the message.
		contains []string
	}{
		"manual policy only names the workloads to restart": {
			opts:    []stateOpt{bundlePods(0, 1, WorkloadCount{"a/Deployment/x", 1})},
			outcome: workflow.Wait, reason: "TrustBundleConverging", contains: []string{"restart: a/Deployment/x"},
		},
		"a converged data plane is done": {
			opts:    []stateOpt{automatic(), bundlePods(2, 2)},
			outcome: workflow.Done, reason: "TrustBundleConverged",
		},
		"workloads behind are restarted within the per-namespace budget": {
			opts:    []stateOpt{automatic(), bundlePods(0, 3), workload("a/Deployment/x"), workload("a/Deployment/y"), workload("b/StatefulSet/z")},
			outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"a/Deployment/x, b/StatefulSet/z"},
		},
		"the cluster-wide budget counts restarts in progress": {
			opts: []stateOpt{automatic(), bundlePods(0, 3), workload("a/Deployment/x", restartedAt("T", false)),
				workload("b/Deployment/y", restartedAt("T", false)), workload("c/Deployment/z")},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x", "1 workload(s) wait"},
		},
		"a rollout whose pods already converged still counts against the budget": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.MaxConcurrentPerNamespace = 2 }), bundlePods(0, 3),
				workload("a/Deployment/x", restartedAt("T", false), behindPods()), workload("a/Deployment/y", restartedAt("T", false), behindPods()),
				workload("a/Deployment/z")},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x", "1 workload(s) wait"},
		},
		"a workload restarted under this token is never restarted again": {
			opts:  []stateOpt{automatic(), bundlePods(0, 1), workload("a/Deployment/x", restartedAt("T", true))},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarted but still behind: a/Deployment/x"},
		},
		"a restart under an older token does not count": {
			opts:  []stateOpt{automatic(), bundlePods(0, 1), workload("a/Deployment/x", restartedAt("OLD", true))},
			token: "T", outcome: workflow.Act, reason: "RestartingWorkloads",
		},
		"a failed rollout parks the rotation, naming the workload": {
			opts: []stateOpt{automatic(), bundlePods(0, 2), workload("a/Deployment/x", restartedAt("T", false), failed("progress deadline exceeded")),
				workload("b/Deployment/y")},
			token: "T", outcome: workflow.Wait, reason: "RolloutFailed", contains: []string{"the rollout of a/Deployment/x failed: progress deadline exceeded"},
		},
		"a pod without a restartable owner is reported, never restarted": {
			opts:    []stateOpt{automatic(), bundlePods(0, 1, WorkloadCount{"a/Pod/bare", 1})},
			outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"without a restartable owner", "a/Pod/bare"},
		},
		"a workload the selectors leave out is left to the user": {
			opts:    []stateOpt{automatic(), bundlePods(0, 1), workload("a/Deployment/x", notSelected())},
			outcome: workflow.Wait, contains: []string{"not selected by spec.dataPlaneRestart", "a/Deployment/x"},
		},
		"a workload outside the operator's restart namespaces is left to the user": {
			opts:    []stateOpt{automatic(), bundlePods(0, 1), workload("b/Deployment/y", outOfScope())},
			outcome: workflow.Wait, contains: []string{"outside the namespaces the operator may restart in (--restart-namespaces; restart them yourself): b/Deployment/y"},
		},
		"the control plane is left to the rotation's own steps": {
			opts:    []stateOpt{automatic(), bundlePods(0, 1), workload("linkerd/Deployment/linkerd-destination")},
			outcome: workflow.Wait,
		},
		"no restart starts outside the maintenance windows": {
			opts: []stateOpt{at(monday10), automatic(func(d *v1alpha1.DataPlaneRestart) {
				d.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Mon"}, Start: "11:00", End: "12:00"}}
			}), bundlePods(0, 1), workload("a/Deployment/x")},
			outcome: workflow.Wait, reason: "OutsideMaintenanceWindow", contains: []string{"opens at 2026-06-01T11:00:00Z"},
		},
		"restarts start inside a maintenance window": {
			opts: []stateOpt{at(monday10), automatic(func(d *v1alpha1.DataPlaneRestart) {
				d.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "22:00", End: "02:00"}, {Days: []v1alpha1.Weekday{"Mon"}, Start: "11:30", End: "09:00", TimeZone: "Europe/Paris"}}
			}), bundlePods(0, 1), workload("a/Deployment/x")},
			outcome: workflow.Act, reason: "RestartingWorkloads",
		},
		"a window in an unknown time zone holds restarts and says why": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) {
				d.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "00:00", End: "23:59", TimeZone: "Mars/Olympus"}}
			}), bundlePods(0, 1), workload("a/Deployment/x")},
			outcome: workflow.Wait, contains: []string{"maintenance window 0 is invalid"},
		},
		"eviction waits for a PodDisruptionBudget that allows no disruption": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods("x-1"), pdb("x-pdb", 0))},
			token: "T", outcome: workflow.Wait, reason: "EvictionBlocked", contains: []string{"PodDisruptionBudget a/x-pdb allows no disruption of a/Deployment/x"},
		},
		"eviction goes on once the PodDisruptionBudget allows it": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods("x-1"), pdb("x-pdb", 1))},
			token: "T", outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"evict the remaining pods of a/Deployment/x (1 pod(s))"},
		},
		"the remaining pods wait until the status shows the previous eviction": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods("x-1"), pdb("x-pdb", 1), settling("waiting for its status to show the eviction"))},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x"},
		},
		"the remaining pods wait until the previous eviction rolled out": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods("x-1"), pdb("x-pdb", 1), restartedAt("", false))},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x"},
		},
		// a/Deployment/x was evicted under T, its replacement pods run and its cached status is
		// rolled out: while that status has not changed since the eviction (Settling), it is
		// the status from before the eviction and x still counts against the per-namespace
		// budget of 1, so a/Deployment/y waits.
		"an evicted workload whose status predates the eviction holds the budget": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods(), replaced(2, 0), settling("waiting for its status to show the eviction")),
				workload("a/Deployment/y")},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting",
			contains: []string{"restarting a/Deployment/x (waiting for its status to show the eviction)", "1 workload(s) wait to be restarted"},
		},
		"an evicted workload whose pods are not all replaced holds the budget": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods(), replaced(1, 1)), workload("a/Deployment/y")},
			token: "T", outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x"},
		},
		"once the evicted workload's status moved and shows it rolled out, the next starts": {
			opts: []stateOpt{automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor("T"), behindPods(), replaced(2, 0)), workload("a/Deployment/y")},
			token: "T", outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"evict the pods of a/Deployment/y"},
		},
		// The previous step of this rotation evicted a/Deployment/x under T1 and ended when its
		// pods converged; its eviction still settles, so under this step's T2 it holds the
		// per-namespace budget and a/Deployment/y waits.
		"an earlier step's eviction still settling holds the budget of the next step": {
			opts: []stateOpt{startedAt(t0), automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor(t1), behindPods(), replaced(2, 0), settling("waiting for its status to show the eviction")),
				workload("a/Deployment/y")},
			token: t2, outcome: workflow.Wait, reason: "WorkloadsRestarting",
			contains: []string{"restarting a/Deployment/x (waiting for its status to show the eviction)", "1 workload(s) wait to be restarted"},
		},
		"an earlier step's eviction that settled does not hold the budget": {
			opts: []stateOpt{startedAt(t0), automatic(func(d *v1alpha1.DataPlaneRestart) { d.Method = v1alpha1.Evict }), bundlePods(0, 2),
				workload("a/Deployment/x", evictedFor(t1), behindPods(), replaced(2, 0)), workload("a/Deployment/y")},
			token: t2, outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"evict the pods of a/Deployment/y"},
		},
		"an earlier step's rollout still rolling holds the budget of the next step": {
			opts: []stateOpt{startedAt(t0), automatic(), bundlePods(0, 2),
				workload("a/Deployment/x", restartedAt(t1, false), behindPods()), workload("a/Deployment/y")},
			token: t2, outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x", "1 workload(s) wait"},
		},
		"a behind workload still rolling from an earlier step waits instead of restarting again": {
			opts: []stateOpt{startedAt(t0), automatic(), bundlePods(0, 1),
				workload("a/Deployment/x", restartedAt(t1, false))},
			token: t2, outcome: workflow.Wait, reason: "WorkloadsRestarting", contains: []string{"restarting a/Deployment/x"},
		},
		"a workload restarted before the rotation and unhealthy since does not hold its namespace": {
			opts: []stateOpt{startedAt(t0), automatic(), bundlePods(0, 2),
				workload("a/Deployment/x", restartedAt(before, false), behindPods()), workload("a/Deployment/y")},
			token: t2, outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"a/Deployment/y"},
		},
		"in key order while identity has not restarted early": {
			opts: []stateOpt{automatic(), issuer(p.newIssuer), bundlePods(0, 6), workload("a/Deployment/x"), workload("b/Deployment/y"),
				workload("c/Deployment/z", behindPods("z-0", "z-1", "z-2", "z-3"))},
			outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"a/Deployment/x, b/Deployment/y"},
		},
		"identity restarted early: the workloads with the most pods behind first": {
			opts: []stateOpt{automatic(), issuer(p.newIssuer), bundlePods(0, 6), workload("a/Deployment/x"), workload("b/Deployment/y"),
				workload("c/Deployment/z", behindPods("z-0", "z-1", "z-2", "z-3")), identityPod("linkerd-identity-new", -time.Minute, "")},
			outcome: workflow.Act, reason: "RestartingWorkloads", contains: []string{"c/Deployment/z, a/Deployment/x"},
		},
		"without a view of the workloads, automatic restarts wait": {
			opts:    []stateOpt{automatic(), bundlePods(0, 1), func(s *State) { s.Workloads, s.WorkloadsProblem = nil, "cannot list deployments: forbidden" }},
			outcome: workflow.Wait, reason: "WorkloadsUnavailable", contains: []string{"forbidden"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := rotatingState(p, tc.opts...)
			d := observeBundleRestarts(propagate, "expanded")(s, tc.token)
			if d.Outcome != tc.outcome || tc.reason != "" && d.Reason != tc.reason {
				t.Fatalf("got %v %s (%s), want %v %s", d.Outcome, d.Reason, d.Message, tc.outcome, tc.reason)
			}
			for _, c := range tc.contains {
				if !strings.Contains(d.Message, c) {
					t.Errorf("message %q lacks %q", d.Message, c)
				}
			}
		})
	}
}

// A StatefulSet with updateStrategy OnDelete, or a partition, never replaces its pods on a
// template change: under RolloutRestart it is restarted by eviction (within the budget and its
// PDB), the Deployment beside it by a rollout, and it counts as restarted once its evicted pods
// are replaced, with no template change.
func TestWorkloadsThatDoNotRollAreEvicted(t *testing.T) {
	p := newPKI(t)
	noRollout := func(why string) workloadOpt { return func(w *Workload) { w.NoRollout = why } }
	s := rotatingState(p, automatic(func(d *v1alpha1.DataPlaneRestart) { d.MaxConcurrent = 3 }), bundlePods(0, 3),
		workload("a/StatefulSet/db", noRollout("updateStrategy OnDelete"), behindPods("db-0", "db-1")),
		workload("b/StatefulSet/kv", noRollout("rolling update partition 2"), behindPods("kv-0")),
		workload("c/Deployment/web"))
	d := observeBundleRestarts(propagate, "expanded")(s, "")
	want := "rollout restart c/Deployment/web; evict the pods of a/StatefulSet/db (updateStrategy OnDelete), b/StatefulSet/kv (rolling update partition 2)"
	if d.Outcome != workflow.Act || !strings.Contains(d.Message, want) {
		t.Fatalf("got %v %q, want an act saying %q", d.Outcome, d.Message, want)
	}
	w := newConvergingWriter(s)
	if err := actRestarts(w, propagate)(context.Background(), s, "T"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(w.evicted, ","); got != "db-0,db-1,kv-0" {
		t.Errorf("evicted %s, want db-0,db-1,kv-0", got)
	}
	if w.restarts["a/StatefulSet/db"] != 0 || w.restarts["b/StatefulSet/kv"] != 0 || w.restarts["c/Deployment/web"] != 1 {
		t.Errorf("template restarts %v: only the Deployment rolls", w.restarts)
	}
	for _, k := range []string{"a/StatefulSet/db", "b/StatefulSet/kv"} {
		if wl := s.Workloads[k]; wl.EvictedFor != "T" || wl.RefreshOverride != "" {
			t.Errorf("%s: evicted-for %q, override %q: want evicted under T, template untouched", k, wl.EvictedFor, wl.RefreshOverride)
		}
	}
	// Replaced and ready (their status shows it), the evicted ones are restarted; the
	// Deployment still rolls.
	for _, k := range []string{"a/StatefulSet/db", "b/StatefulSet/kv"} {
		wl := s.Workloads[k]
		wl.BundleBehind, wl.Replicas, wl.Running, wl.RolledOut, wl.Progress = nil, 2, 2, true, ""
	}
	d = observeBundleRestarts(propagate, "expanded")(s, "T")
	if d.Outcome != workflow.Wait || !strings.Contains(d.Message, "restarting c/Deployment/web") || strings.Contains(d.Message, "StatefulSet") {
		t.Fatalf("got %v %q, want only c/Deployment/web still restarting", d.Outcome, d.Message)
	}
}

func TestRemoveOldTrustRootsRemovesTheOverride(t *testing.T) {
	p := newPKI(t)
	_, marker, _ := AddRefreshOverride("", 5*time.Minute)
	s := rotatingState(p, automatic(), bundlePods(3, 3), workload("a/Deployment/x", behindPods(), override(marker)))
	d := observeBundleRestarts(reduce, "reduced")(s, "")
	if d.Outcome != workflow.Act {
		t.Fatalf("a workload with the override must be restarted to remove it: %v %s", d.Outcome, d.Message)
	}
	w := newConvergingWriter(s)
	if err := actRestarts(w, reduce)(context.Background(), s, "T"); err != nil {
		t.Fatal(err)
	}
	if got := s.Workloads["a/Deployment/x"]; got.RefreshOverride != "" || got.AdditionalEnv != "" {
		t.Fatalf("override left behind: %+v", got)
	}
	s.Workloads["a/Deployment/x"].RolledOut = true
	if d := observeBundleRestarts(reduce, "reduced")(s, "T"); d.Outcome != workflow.Done {
		t.Fatalf("got %v %s, want done", d.Outcome, d.Message)
	}
}
