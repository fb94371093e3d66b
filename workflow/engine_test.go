package workflow

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
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
	plan, err := w.Plan(Checkpoint{Step: "b"}, state)
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
