package workflow

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

// Suspended, the workflow passes the steps that are done and stops at the first that would act,
// saving nothing and running nothing, with that step's decision: what it would do next.
func TestAdvanceSuspendedHoldsTheAct(t *testing.T) {
	w, _ := New(toySteps("a", "b", "c")...)
	state := &world{need: map[string]int{"b": 1}, acted: map[string]int{}}
	saves := 0
	save := func(context.Context, Checkpoint) error { saves++; return nil }
	res, err := w.Advance(context.Background(), Checkpoint{}, state, save, func() string { return "t1" }, Suspended(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Held || res.Acted || saves != 0 || state.acted["b"] != 0 {
		t.Fatalf("held %v acted %v saves %d acts %v; want the act held, nothing saved or run", res.Held, res.Acted, saves, state.acted)
	}
	if res.Checkpoint.Step != "b" || res.Checkpoint.Token != "" || res.Phase != "phase-b" || !reflect.DeepEqual(res.Passed, []string{"a"}) {
		t.Errorf("stopped at %+v phase %q passed %v; want at b, a passed", res.Checkpoint, res.Phase, res.Passed)
	}
	if res.Decision.Outcome != Act || res.Decision.Message != "b must act" {
		t.Errorf("decision %+v; want b's act: what would happen next", res.Decision)
	}

	// A step that waits is not held: the workflow reports its wait, as when not suspended.
	state.wait = map[string]bool{"b": true}
	res, err = w.Advance(context.Background(), Checkpoint{Step: "b"}, state, save, func() string { return "t1" }, Suspended(true))
	if err != nil || res.Held || res.Decision.Outcome != Wait {
		t.Errorf("a waiting step: held %v decision %+v err %v; want the wait", res.Held, res.Decision, err)
	}

	// Resumed (Suspended(false), or no option), the same checkpoint acts.
	state.wait = nil
	res, err = w.Advance(context.Background(), Checkpoint{Step: "b"}, state, save, func() string { return "t1" }, Suspended(false))
	if err != nil || res.Held || !res.Acted || saves != 1 || state.acted["b"] != 1 {
		t.Errorf("resumed: held %v acted %v saves %d err %v; want the act", res.Held, res.Acted, saves, err)
	}
}

// Suspended, a jump is held too: the checkpoint stays where it is and nothing is saved.
func TestAdvanceSuspendedHoldsTheJump(t *testing.T) {
	w := jumpy(t)
	state := &world{need: map[string]int{}, acted: map[string]int{}, wait: map[string]bool{"moved": true}}
	saves := 0
	save := func(context.Context, Checkpoint) error { saves++; return nil }
	cp := Checkpoint{Step: "c", Token: "t0", Acts: 1}
	res, err := w.Advance(context.Background(), cp, state, save, func() string { return "t1" }, Suspended(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Held || res.Jumped != nil || saves != 0 || res.Checkpoint != cp || res.Decision.Outcome != Jump || res.Decision.To != "a" {
		t.Errorf("held %v jumped %v saves %d at %+v decision %+v; want the jump to a held at c", res.Held, res.Jumped, saves, res.Checkpoint, res.Decision)
	}
}

// A failed act returns its error in the Result (ActErr) as well as wrapped, after the
// checkpoint was saved; Acted stays false.
func TestAdvanceReportsTheActError(t *testing.T) {
	steps := toySteps("a")
	refused := errors.New("patching Deployment ns/web: forbidden")
	steps[0].Act = func(context.Context, *world, string) error { return refused }
	w, _ := New(steps...)
	state := &world{need: map[string]int{"a": 1}, acted: map[string]int{}}
	saves := 0
	res, err := w.Advance(context.Background(), Checkpoint{}, state, func(context.Context, Checkpoint) error { saves++; return nil }, func() string { return "t1" })
	if !errors.Is(err, refused) || res.ActErr != refused || res.Acted || saves != 1 || res.Checkpoint.Acts != 1 {
		t.Errorf("err %v ActErr %v acted %v saves %d acts %d; want the act's error after one save", err, res.ActErr, res.Acted, saves, res.Checkpoint.Acts)
	}
	if err.Error() != "step a: "+refused.Error() {
		t.Errorf("error %q does not name the step", err)
	}
}
