package workflow

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// world is a toy state: a counter per step, which the acts bump.
type world struct {
	need  map[string]int // how many acts each step needs before it is done
	acted map[string]int // acts seen so far
	wait  map[string]bool
}

func toySteps(names ...string) []Step[*world] {
	var steps []Step[*world]
	for _, n := range names {
		steps = append(steps, Step[*world]{
			Name:  n,
			Phase: "phase-" + n,
			Observe: func(w *world, _ string) Decision {
				switch {
				case w.wait[n]:
					return Waiting("Blocked", n+" waits")
				case w.acted[n] < w.need[n]:
					return ActNeeded("Behind", n+" must act")
				}
				return Completed("Done", n+" done")
			},
			Act: func(_ context.Context, w *world, token string) error {
				if token == "" {
					return errors.New("no token")
				}
				w.acted[n]++
				return nil
			},
		})
	}
	return steps
}

func TestNewRejectsBadSteps(t *testing.T) {
	cases := map[string][]Step[*world]{
		"no steps at all":        nil,
		"a name not kebab-case":  toySteps("Expand_Bundle"),
		"the same name twice":    toySteps("a", "a"),
		"a step with no observe": {{Name: "a"}},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := New(steps...); err == nil {
				t.Fatal("New accepted the steps")
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	cases := map[string]struct {
		from       Checkpoint
		need       map[string]int
		acted      map[string]int
		wait       map[string]bool
		wantStep   string
		wantPhase  string
		wantActed  bool
		wantPassed []string
		wantDone   bool
		wantSaves  int
	}{
		"an empty checkpoint starts at the first step and passes done steps until one waits": {
			wait: map[string]bool{"c": true}, wantStep: "c", wantPhase: "phase-c", wantPassed: []string{"a", "b"},
		},
		"a step that must act saves its checkpoint, then acts once and returns": {
			need: map[string]int{"b": 1}, wantStep: "b", wantActed: true, wantPhase: "phase-b",
			wantPassed: []string{"a"}, wantSaves: 1,
		},
		"it resumes at the checkpoint without revisiting earlier steps": {
			from: Checkpoint{Step: "c"}, need: map[string]int{"a": 1}, wait: map[string]bool{"a": true},
			wantStep: "a", wantPhase: "phase-a", wantPassed: []string{"c"}, wantDone: true,
		},
		"when every step is done it goes round once and stops where it started": {
			from: Checkpoint{Step: "b"}, wantStep: "b", wantPhase: "phase-b",
			wantPassed: []string{"b", "c", "a"}, wantDone: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := New(toySteps("a", "b", "c")...)
			if err != nil {
				t.Fatal(err)
			}
			state := &world{need: tc.need, acted: map[string]int{}, wait: tc.wait}
			saves := 0
			save := func(_ context.Context, cp Checkpoint) error {
				saves++
				if cp.Token == "" {
					t.Error("checkpoint saved without a token")
				}
				return nil
			}
			res, err := w.Advance(context.Background(), tc.from, state, save, func() string { return "t1" })
			if err != nil {
				t.Fatal(err)
			}
			if res.Checkpoint.Step != tc.wantStep || res.Phase != tc.wantPhase || res.Acted != tc.wantActed ||
				res.Completed != tc.wantDone || saves != tc.wantSaves || !reflect.DeepEqual(res.Passed, tc.wantPassed) {
				t.Errorf("got step %q phase %q acted %v completed %v saves %d passed %v",
					res.Checkpoint.Step, res.Phase, res.Acted, res.Completed, saves, res.Passed)
			}
		})
	}
}

func TestAdvanceReusesTheTokenAfterARestart(t *testing.T) {
	w, _ := New(toySteps("a", "b")...)
	state := &world{need: map[string]int{"a": 2}, acted: map[string]int{}}
	var tokens []string
	save := func(_ context.Context, cp Checkpoint) error { tokens = append(tokens, cp.Token); return nil }
	n := 0
	newToken := func() string { n++; return fmt.Sprint("t", n) }

	res, err := w.Advance(context.Background(), Checkpoint{}, state, save, newToken)
	if err != nil || !res.Acted {
		t.Fatalf("first advance: %v acted=%v", err, res.Acted)
	}
	// A restarted operator reads the saved checkpoint back: same step, same token.
	res, err = w.Advance(context.Background(), res.Checkpoint, state, save, newToken)
	if err != nil || !res.Acted {
		t.Fatalf("second advance: %v acted=%v", err, res.Acted)
	}
	if want := []string{"t1", "t1"}; !reflect.DeepEqual(tokens, want) {
		t.Errorf("tokens saved = %v, want %v", tokens, want)
	}
	if res.Checkpoint.Acts != 2 {
		t.Errorf("acts = %d, want 2", res.Checkpoint.Acts)
	}
}

func TestAdvanceDoesNotActWhenTheCheckpointCannotBeSaved(t *testing.T) {
	w, _ := New(toySteps("a")...)
	state := &world{need: map[string]int{"a": 1}, acted: map[string]int{}}
	_, err := w.Advance(context.Background(), Checkpoint{}, state,
		func(context.Context, Checkpoint) error { return errors.New("conflict") }, func() string { return "t" })
	if err == nil || state.acted["a"] != 0 {
		t.Fatalf("err = %v, acts = %d: the act must not run without a saved checkpoint", err, state.acted["a"])
	}
}

func TestAdvanceRejectsAnUnknownCheckpoint(t *testing.T) {
	w, _ := New(toySteps("a")...)
	_, err := w.Advance(context.Background(), Checkpoint{Step: "from-the-future"}, &world{}, nil, nil)
	if !errors.Is(err, ErrUnknownStep) {
		t.Fatalf("err = %v, want ErrUnknownStep", err)
	}
}

func TestPlanWritesNothing(t *testing.T) {
	w, _ := New(toySteps("a", "b", "c")...)
	state := &world{need: map[string]int{"b": 1, "c": 1}, acted: map[string]int{}}
	plan, err := w.Plan(context.Background(), Checkpoint{Step: "b"}, state, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].Name != "b" || !plan[0].Current || plan[1].Decision.Outcome != Act {
		t.Fatalf("plan = %+v", plan)
	}
	if len(state.acted) != 0 {
		t.Fatalf("plan acted: %v", state.acted)
	}
}

// TestAdvanceLetsTheStepExtendItsToken: Token runs before every act, the first with a fresh
// stamp and the later ones with the token so far, and what it returns is saved before the act.
func TestAdvanceLetsTheStepExtendItsToken(t *testing.T) {
	steps := toySteps("a", "b")
	steps[0].Token = func(_ *world, token string) string {
		if token == "t1" {
			return token + " first"
		}
		return token + " again"
	}
	var acted []string
	act := steps[0].Act
	steps[0].Act = func(ctx context.Context, s *world, token string) error {
		acted = append(acted, token)
		return act(ctx, s, token)
	}
	w, _ := New(steps...)
	state := &world{need: map[string]int{"a": 2}, acted: map[string]int{}}
	var saved []string
	save := func(_ context.Context, cp Checkpoint) error { saved = append(saved, cp.Token); return nil }
	cp := Checkpoint{}
	for range 2 {
		res, err := w.Advance(context.Background(), cp, state, save, func() string { return "t1" })
		if err != nil || !res.Acted {
			t.Fatalf("advance: %v acted=%v", err, res.Acted)
		}
		cp = res.Checkpoint
	}
	want := []string{"t1 first", "t1 first again"}
	if !reflect.DeepEqual(saved, want) || !reflect.DeepEqual(acted, want) || cp.Acts != 2 {
		t.Errorf("saved %v, acted under %v, acts %d; want %v twice and 2 acts", saved, acted, cp.Acts, want)
	}
}

// jumpy is a workflow a, b, c whose step c jumps to the step named in the world's jump map
// while its goal changed (w.wait["moved"]), and acts otherwise like the toy steps.
func jumpy(t *testing.T) *Workflow[*world] {
	t.Helper()
	steps := toySteps("a", "b", "c")
	observe := steps[2].Observe
	steps[2].Observe = func(w *world, token string) Decision {
		if w.wait["moved"] {
			return JumpTo("a", "GoalMoved", "the goal moved: start again at a")
		}
		return observe(w, token)
	}
	w, err := New(steps...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A jump saves the checkpoint at its target, with no token and the jump on it, runs no act and
// ends the call; a restarted engine resumes at the target from what was saved.
func TestAdvanceJumpIsSavedAndResumable(t *testing.T) {
	w := jumpy(t)
	state := &world{need: map[string]int{"a": 1, "c": 1}, acted: map[string]int{"a": 1}, wait: map[string]bool{"moved": true}}
	var saved []Checkpoint
	save := func(_ context.Context, cp Checkpoint) error { saved = append(saved, cp); return nil }
	res, err := w.Advance(context.Background(), Checkpoint{Step: "c", Token: "t0", Acts: 2}, state, save, func() string { return "t1" })
	if err != nil {
		t.Fatal(err)
	}
	want := JumpRecord{From: "c", To: "a", Reason: "GoalMoved", Message: "the goal moved: start again at a"}
	if res.Jumped == nil || *res.Jumped != want || res.Acted || len(res.Passed) != 0 {
		t.Fatalf("jumped %v acted %v passed %v; want the jump %v alone", res.Jumped, res.Acted, res.Passed, want)
	}
	if res.Checkpoint.Step != "a" || res.Checkpoint.Token != "" || res.Checkpoint.Acts != 0 || res.Phase != "phase-a" || res.Decision.Outcome != Jump {
		t.Errorf("result at %+v phase %q decision %v; want a fresh checkpoint at a, phase-a", res.Checkpoint, res.Phase, res.Decision)
	}
	if len(saved) != 1 || saved[0].Step != "a" || saved[0].Token != "" || saved[0].Jump == nil || *saved[0].Jump != want {
		t.Fatalf("saved %+v; want one checkpoint at a carrying the jump", saved)
	}
	if state.acted["a"] != 1 || state.acted["c"] != 0 {
		t.Errorf("acts %v: a jump runs no act", state.acted)
	}

	// The operator restarts from what was saved (the store keeps the position, not the jump):
	// it resumes at a, which is done, and goes on to c, which now acts.
	state.wait["moved"] = false
	resumed := Checkpoint{Step: saved[0].Step, Token: saved[0].Token, Acts: saved[0].Acts}
	res, err = w.Advance(context.Background(), resumed, state, save, func() string { return "t1" })
	if err != nil {
		t.Fatal(err)
	}
	if res.Jumped != nil || !res.Acted || res.Checkpoint.Step != "c" || !reflect.DeepEqual(res.Passed, []string{"a", "b"}) {
		t.Errorf("after the jump: jumped %v acted %v at %s passed %v; want a and b passed and c acting", res.Jumped, res.Acted, res.Checkpoint.Step, res.Passed)
	}
	if last := saved[len(saved)-1]; last.Jump != nil || last.Token != "t1" {
		t.Errorf("the act's checkpoint %+v carries a jump or lost its token", last)
	}
}

// A step may start over at itself, keeping what its token records: the jump lands with that
// token and no act counted, and the step acts again under it.
func TestAdvanceJumpToTheSameStepWithAToken(t *testing.T) {
	steps := toySteps("a", "b")
	observe := steps[1].Observe
	steps[1].Observe = func(w *world, token string) Decision {
		if w.wait["moved"] && token != "kept" {
			return JumpTo("b", "StartOver", "start b over").WithToken("kept")
		}
		return observe(w, token)
	}
	w, err := New(steps...)
	if err != nil {
		t.Fatal(err)
	}
	state := &world{need: map[string]int{"b": 2}, acted: map[string]int{"b": 1}, wait: map[string]bool{"moved": true}}
	var saved []Checkpoint
	save := func(_ context.Context, cp Checkpoint) error { saved = append(saved, cp); return nil }
	res, err := w.Advance(context.Background(), Checkpoint{Step: "b", Token: "t0", Acts: 1}, state, save, func() string { return "t1" })
	if err != nil {
		t.Fatal(err)
	}
	if res.Jumped == nil || res.Checkpoint.Step != "b" || res.Checkpoint.Token != "kept" || res.Checkpoint.Acts != 0 {
		t.Fatalf("jumped %v to %+v; want b again under token kept, no act counted", res.Jumped, res.Checkpoint)
	}
	if len(saved) != 1 || saved[0].Token != "kept" || saved[0].Jump == nil {
		t.Fatalf("saved %+v; want the jump's checkpoint with token kept", saved)
	}
	res, err = w.Advance(context.Background(), res.Checkpoint, state, save, func() string { return "t1" })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acted || res.Checkpoint.Token != "kept" || res.Checkpoint.Acts != 1 {
		t.Errorf("after the jump: acted %v at %+v; want b acting under kept, first act", res.Acted, res.Checkpoint)
	}
}

// A jump is reached like a wait: after the steps that are done, in the same call.
func TestAdvanceJumpsAfterPassingDoneSteps(t *testing.T) {
	w := jumpy(t)
	state := &world{acted: map[string]int{}, wait: map[string]bool{"moved": true}}
	res, err := w.Advance(context.Background(), Checkpoint{Step: "b"}, state, func(context.Context, Checkpoint) error { return nil }, func() string { return "t" })
	if err != nil || res.Jumped == nil || res.Jumped.From != "c" || res.Checkpoint.Step != "a" || !reflect.DeepEqual(res.Passed, []string{"b"}) {
		t.Fatalf("err %v jumped %v at %s passed %v; want b passed and c jumping to a", err, res.Jumped, res.Checkpoint.Step, res.Passed)
	}
}

// A jump whose checkpoint cannot be saved does not move the workflow; a jump to a step the
// workflow does not have is an error, and saves nothing.
func TestAdvanceJumpFailures(t *testing.T) {
	w := jumpy(t)
	state := &world{acted: map[string]int{}, wait: map[string]bool{"moved": true}}
	res, err := w.Advance(context.Background(), Checkpoint{Step: "c", Token: "t0"}, state,
		func(context.Context, Checkpoint) error { return errors.New("conflict") }, func() string { return "t" })
	if err == nil || res.Jumped != nil || res.Checkpoint.Step != "c" || res.Checkpoint.Token != "t0" {
		t.Errorf("err %v, jumped %v, at %+v; want an error and the checkpoint where it was", err, res.Jumped, res.Checkpoint)
	}

	steps := toySteps("a", "b")
	steps[1].Observe = func(*world, string) Decision { return JumpTo("nowhere", "Lost", "") }
	lost, _ := New(steps...)
	saves := 0
	_, err = lost.Advance(context.Background(), Checkpoint{Step: "b"}, state, func(context.Context, Checkpoint) error { saves++; return nil }, func() string { return "t" })
	if !errors.Is(err, ErrUnknownStep) || saves != 0 {
		t.Errorf("err %v after %d saves; want ErrUnknownStep and nothing saved", err, saves)
	}
	if _, err := lost.Plan(context.Background(), Checkpoint{Step: "b"}, state, nil); !errors.Is(err, ErrUnknownStep) {
		t.Errorf("plan: err %v, want ErrUnknownStep", err)
	}
}

// A plan shows the jump where Advance would take it, and ends there; the steps after it are
// planned from the jump's target.
func TestPlanShowsTheJump(t *testing.T) {
	w := jumpy(t)
	state := &world{need: map[string]int{"c": 1}, acted: map[string]int{}, wait: map[string]bool{"moved": true}}
	plan, err := w.Plan(context.Background(), Checkpoint{Step: "b"}, state, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].Decision.Outcome != Done || plan[1].Name != "c" || plan[1].Decision.Outcome != Jump ||
		plan[1].Decision.To != "a" || plan[1].Decision.Reason != "GoalMoved" || len(plan[1].Changes) != 0 {
		t.Fatalf("plan %+v; want b done, then c jumping to a, and nothing after", plan)
	}
	rest, err := w.Plan(context.Background(), Checkpoint{Step: plan[1].Decision.To}, state, nil)
	if err != nil || len(rest) != 3 || rest[0].Name != "a" || !rest[0].Current {
		t.Fatalf("plan from the target: %+v, %v", rest, err)
	}

	// A step observed after the first one that is not done is planned, not followed: only the
	// step the workflow reaches can jump.
	state.wait["b"] = true
	plan, err = w.Plan(context.Background(), Checkpoint{Step: "b"}, state, nil)
	if err != nil || len(plan) != 2 || plan[0].Decision.Outcome != Wait || plan[1].Decision.Outcome != Jump {
		t.Fatalf("plan %+v, %v; want b waiting and c's jump shown as observed", plan, err)
	}
	if len(state.acted) != 0 {
		t.Fatalf("plan acted: %v", state.acted)
	}
}

// TestAdvanceNamesTheEarliestRecheck: the result of a call names the earliest moment any decision
// it observed depends on — a step passed included, for its verdict may change then too — and
// none when no decision depends on the time.
func TestAdvanceNamesTheEarliestRecheck(t *testing.T) {
	base := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	timed := func(name string, d Decision) Step[*world] {
		return Step[*world]{Name: name, Observe: func(*world, string) Decision { return d }}
	}
	wf, err := New(
		timed("a", Completed("Valid", "until later").RecheckBy(base.Add(time.Hour))),
		timed("b", Completed("Valid", "until sooner").RecheckBy(base.Add(time.Minute), time.Time{})),
		timed("c", Waiting("Closed", "a window opens").RecheckBy(base.Add(30*time.Minute))),
	)
	if err != nil {
		t.Fatal(err)
	}
	res, err := wf.Advance(context.Background(), Checkpoint{}, &world{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := base.Add(time.Minute); !res.RecheckAt.Equal(want) {
		t.Errorf("RecheckAt %v, want the earliest of the three, %v", res.RecheckAt, want)
	}
	if !res.Decision.RecheckAt.Equal(base.Add(30 * time.Minute)) {
		t.Errorf("the waiting step's decision names %v, want its own moment", res.Decision.RecheckAt)
	}

	wf, err = New(timed("a", Completed("Done", "")), timed("b", Waiting("Blocked", "")))
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := wf.Advance(context.Background(), Checkpoint{}, &world{}, nil, nil); !res.RecheckAt.IsZero() {
		t.Errorf("RecheckAt %v, want none: no decision depends on the time", res.RecheckAt)
	}
}
