package workflow

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"
)

// toySimulation simulates a world: a copy of the planned one, in which the acts run and the
// waits are lifted, except those in cannot.
type toySimulation struct {
	sim    *world
	cannot map[string]bool
	landed []Checkpoint
	// land is the world a jump leaves.
	land *world
}

func copyWorld(w *world) *world {
	return &world{need: maps.Clone(w.need), acted: maps.Clone(w.acted), wait: maps.Clone(w.wait)}
}

func (t *toySimulation) State() *world              { return t.sim }
func (t *toySimulation) Stamp(p PlannedStep) string { return fmt.Sprintf("<token %d>", p.Index) }
func (t *toySimulation) Act(ctx context.Context, st Step[*world], token string) (any, error) {
	return "acted " + st.Name + " under " + token, st.Act(ctx, t.sim, token)
}
func (t *toySimulation) Assume(st Step[*world], d Decision) (any, bool, string) {
	if t.cannot[st.Name] {
		return nil, false, "nothing stands in for it"
	}
	t.sim.wait[st.Name] = false
	return "assumed " + st.Name + " (" + d.Reason + ")", true, ""
}
func (t *toySimulation) ObserveAhead(st Step[*world], w *world) Decision {
	d := st.Observe(w, "")
	d.Message += " (ahead)"
	return d
}
func (t *toySimulation) Land(cp Checkpoint) (*world, error) {
	t.landed = append(t.landed, cp)
	t.sim = copyWorld(t.land)
	return t.land, nil
}

// Plan with a Simulation carries the plan past the step the workflow stops at: acts run in the
// simulation and waits are assumed, each recorded at its step; the planned state is left as it
// was, and the steps after one the simulation cannot pass are observed ahead on the planned
// state.
func TestPlanSimulatesPastTheNextStep(t *testing.T) {
	w, _ := New(toySteps("a", "b", "c", "d", "e")...)
	state := &world{need: map[string]int{"b": 2, "d": 1, "e": 1}, acted: map[string]int{}, wait: map[string]bool{"c": true, "d": true}}
	sim := &toySimulation{sim: copyWorld(state), cannot: map[string]bool{"d": true}}
	plan, err := w.Plan(context.Background(), Checkpoint{Step: "a"}, state, sim)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 5 {
		t.Fatalf("plan %+v; want the five steps", plan)
	}
	a, b, c, d, e := plan[0], plan[1], plan[2], plan[3], plan[4]
	if a.Next || a.Simulated || a.Decision.Outcome != Done || !a.Current {
		t.Errorf("a = %+v; want done on the state, the checkpoint's", a)
	}
	wantB := []Pass{{Outcome: Act, Token: "<token 1>", Record: "acted b under <token 1>"}, {Outcome: Act, Token: "<token 1>", Record: "acted b under <token 1>"}}
	if !b.Next || b.Simulated || b.Decision.Outcome != Act || !reflect.DeepEqual(b.Passes, wantB) || b.Stopped != "" {
		t.Errorf("b = %+v; want the next step, acting twice in the simulation under its stamp", b)
	}
	wantC := []Pass{{Outcome: Wait, Record: "assumed c (Blocked)"}}
	if !c.Simulated || c.Decision.Outcome != Wait || !reflect.DeepEqual(c.Passes, wantC) {
		t.Errorf("c = %+v; want simulated, its wait assumed", c)
	}
	if !d.Simulated || d.Stopped != "d waits (Blocked) and nothing stands in for it" {
		t.Errorf("d = %+v; want simulated, stopping the simulation", d)
	}
	if e.Simulated || e.Decision.Message != "e must act (ahead)" || len(e.Passes) != 0 {
		t.Errorf("e = %+v; want observed ahead on the planned state", e)
	}
	if state.acted["b"] != 0 || !state.wait["c"] {
		t.Errorf("the planned state changed: %+v", state)
	}
}

// A jump at the next step is landed, and the plan goes on from its target over the state the
// jump leaves, simulating from there.
func TestPlanLandsTheJump(t *testing.T) {
	w := jumpy(t)
	state := &world{need: map[string]int{}, acted: map[string]int{}, wait: map[string]bool{"moved": true}}
	landed := &world{need: map[string]int{"a": 1}, acted: map[string]int{}, wait: map[string]bool{}}
	sim := &toySimulation{sim: copyWorld(state), land: landed}
	plan, err := w.Plan(context.Background(), Checkpoint{Step: "b", Token: "t0"}, state, sim)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plan {
		got = append(got, fmt.Sprintf("%s %v next=%v simulated=%v", p.Name, p.Decision.Outcome, p.Next, p.Simulated))
	}
	want := []string{"b Done next=false simulated=false", "c Jump next=true simulated=false",
		"a Act next=false simulated=true", "b Done next=false simulated=true", "c Done next=false simulated=true"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan\n%v\nwant\n%v", got, want)
	}
	wantLanded := []Checkpoint{{Step: "a", Jump: &JumpRecord{From: "c", To: "a", Reason: "GoalMoved", Message: "the goal moved: start again at a"}}}
	if !reflect.DeepEqual(sim.landed, wantLanded) {
		t.Errorf("landed %+v; want %+v", sim.landed, wantLanded)
	}
	if p := plan[2]; len(p.Passes) != 1 || p.Passes[0].Token != "<token 0>" {
		t.Errorf("a after the jump: %+v; want its act simulated under a fresh stamp", p)
	}
}
