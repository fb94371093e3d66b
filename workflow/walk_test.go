package workflow

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The plan and the operator walk alike: over generated workflows and states, Plan carried by
// a simulation makes the same acts, under the same tokens, and the same assumptions, in the
// same order, as the operator's loop of Advance over the same world, which acts itself and is
// given the same assumptions where it waits; and both stop at the same step when the simulation
// cannot stand in for a wait.

// walkWorld is a toy world whose steps act a number of times, may wait once after their acts,
// and may jump to another step once.
type walkWorld struct {
	need   map[string]int    // acts each step needs before it is done
	acted  map[string]int    // acts made so far
	wait   map[string]bool   // the step waits (once its acts are made) until this is lifted
	jump   map[string]string // the step jumps there, until the jump has landed
	keep   map[string]bool   // the step's jump keeps its token (Decision.WithToken)
	extend map[string]bool   // the step's Token remembers its need in the token
}

func (w *walkWorld) clone() *walkWorld {
	return &walkWorld{need: maps.Clone(w.need), acted: maps.Clone(w.acted), wait: maps.Clone(w.wait),
		jump: maps.Clone(w.jump), keep: maps.Clone(w.keep), extend: maps.Clone(w.extend)}
}

func walkSteps(names []string) []Step[*walkWorld] {
	var out []Step[*walkWorld]
	for _, n := range names {
		out = append(out, Step[*walkWorld]{
			Name: n, Phase: "phase-" + n,
			Observe: func(w *walkWorld, token string) Decision {
				switch {
				case w.jump[n] != "" && w.keep[n]:
					return JumpTo(w.jump[n], "StartOver", n+" starts over at "+w.jump[n]).WithToken(token)
				case w.jump[n] != "":
					return JumpTo(w.jump[n], "Superseded", n+" jumps to "+w.jump[n]).Superseding()
				case w.acted[n] < w.need[n]:
					return ActNeeded("Behind", n+" must act")
				case w.wait[n]:
					return Waiting("Blocked", n+" waits")
				}
				return Completed("Done", n+" done")
			},
			Act: func(_ context.Context, w *walkWorld, token string) error {
				if token == "" {
					return fmt.Errorf("%s acted without a token", n)
				}
				w.acted[n]++
				return nil
			},
			Token: func(w *walkWorld, token string) string {
				if w.extend[n] && !strings.Contains(token, "#") {
					return fmt.Sprintf("%s#%d", token, w.need[n])
				}
				return token
			},
		})
	}
	return out
}

// stamp is the token a checkpoint starts with when its step acted before the walk; stamps
// numbers the fresh tokens of the walk's first acts, in the plan and the loop alike.
const stamp = "<stamp>"

type stamps int

func (n *stamps) next() string {
	*n++
	return fmt.Sprintf("<stamp %d>", *n)
}

// walkSimulation carries a plan over a copy of the planned world.
type walkSimulation struct {
	planned, sim *walkWorld
	cannot       map[string]bool
	stamps       stamps
}

func (s *walkSimulation) State() *walkWorld        { return s.sim }
func (s *walkSimulation) Stamp(PlannedStep) string { return s.stamps.next() }
func (s *walkSimulation) Act(ctx context.Context, st Step[*walkWorld], token string) (any, error) {
	return nil, st.Act(ctx, s.sim, token)
}
func (s *walkSimulation) Assume(st Step[*walkWorld], _ Decision) (any, bool, string) {
	if s.cannot[st.Name] {
		return nil, false, "nothing stands in for it"
	}
	s.sim.wait[st.Name] = false
	return nil, true, ""
}
func (s *walkSimulation) ObserveAhead(st Step[*walkWorld], w *walkWorld) Decision {
	return st.Observe(w, "")
}
func (s *walkSimulation) Land(cp Checkpoint) (*walkWorld, error) {
	delete(s.planned.jump, cp.Jump.From) // what the jump's saved checkpoint leaves
	s.sim = s.planned.clone()
	return s.planned, nil
}

// walkEvents is what a walk made happen: "act STEP TOKEN", "assume STEP", "jump FROM->TO",
// "stop STEP".
func planEvents(t *testing.T, w *Workflow[*walkWorld], cp Checkpoint, world *walkWorld, cannot map[string]bool) []string {
	t.Helper()
	sim := &walkSimulation{planned: world, sim: world.clone(), cannot: cannot}
	plan, err := w.Plan(context.Background(), cp, world, sim)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	var out []string
	for _, p := range plan {
		if p.Next && p.Decision.Outcome == Jump {
			out = append(out, fmt.Sprintf("jump %s->%s", p.Name, p.Decision.To))
			continue
		}
		for _, ps := range p.Passes {
			if ps.Outcome == Act {
				out = append(out, fmt.Sprintf("act %s %s", p.Name, ps.Token))
			} else {
				out = append(out, "assume "+p.Name)
			}
		}
		if p.Stopped != "" {
			out = append(out, "stop "+p.Name)
			break
		}
	}
	return out
}

// loopEvents runs the operator's loop: Advance from cp over world, acting itself, given the
// plan's assumptions where it waits, until the workflow passed its last step.
func loopEvents(t *testing.T, w *Workflow[*walkWorld], cp Checkpoint, world *walkWorld, cannot map[string]bool) []string {
	t.Helper()
	var out []string
	save := func(context.Context, Checkpoint) error { return nil }
	var fresh stamps
	for range 200 {
		res, err := w.Advance(context.Background(), cp, world, save, fresh.next)
		if err != nil {
			t.Fatalf("Advance: %v", err)
		}
		if res.Completed {
			return out // past the last step: a plan ends there
		}
		cp = res.Checkpoint
		switch {
		case res.Acted:
			out = append(out, fmt.Sprintf("act %s %s", cp.Step, cp.Token))
		case res.Jumped != nil:
			out = append(out, fmt.Sprintf("jump %s->%s", res.Jumped.From, res.Jumped.To))
			delete(world.jump, res.Jumped.From)
		case res.Decision.Outcome == Wait:
			if cannot[cp.Step] {
				return append(out, "stop "+cp.Step)
			}
			world.wait[cp.Step] = false
			out = append(out, "assume "+cp.Step)
		default:
			t.Fatalf("Advance stopped at %s with %v and nothing to do", cp.Step, res.Decision)
		}
	}
	t.Fatalf("the loop did not end: %v", out)
	return nil
}

func TestPlanAndOperatorWalkAlike(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f"}
	w, err := New(walkSteps(names)...)
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 7))
	jumps, stops := 0, 0
	for i := range 2000 {
		world := &walkWorld{need: map[string]int{}, acted: map[string]int{}, wait: map[string]bool{}, jump: map[string]string{}, keep: map[string]bool{}, extend: map[string]bool{}}
		cannot := map[string]bool{}
		start := rng.IntN(len(names))
		for j, n := range names {
			world.need[n] = rng.IntN(4)
			world.acted[n] = rng.IntN(2) * rng.IntN(world.need[n]+1)
			world.wait[n] = rng.IntN(3) == 0
			world.extend[n] = rng.IntN(2) == 0
			cannot[n] = rng.IntN(8) == 0
			if j < start { // the steps before the checkpoint are done
				world.acted[n], world.wait[n] = world.need[n], false
			}
		}
		// A jump is taken at the step the workflow stops at (a superseded rotation's, which only
		// the checkpoint's step observes): the first step from the checkpoint not done.
		if rng.IntN(4) == 0 {
			for _, n := range names[start:] {
				if world.acted[n] < world.need[n] || world.wait[n] {
					world.jump[n], world.keep[n] = names[rng.IntN(len(names))], rng.IntN(2) == 0
					break
				}
			}
		}
		cp := Checkpoint{Step: names[start]}
		if world.acted[names[start]] > 0 {
			cp.Token, cp.Acts = stamp, int32(world.acted[names[start]])
		}
		desc := fmt.Sprintf("case %d (seed %d): from %+v over need %v acted %v wait %v jump %v keep %v extend %v cannot %v",
			i, seed, cp, world.need, world.acted, world.wait, world.jump, world.keep, world.extend, cannot)
		plan := planEvents(t, w, cp, world.clone(), cannot)
		loop := loopEvents(t, w, cp, world.clone(), cannot)
		if !slices.Equal(plan, loop) {
			t.Fatalf("%s:\nplan %q\nloop %q", desc, plan, loop)
		}
		for _, e := range plan {
			switch {
			case strings.HasPrefix(e, "jump"):
				jumps++
			case strings.HasPrefix(e, "stop"):
				stops++
			}
		}
	}
	if jumps == 0 || stops == 0 {
		t.Errorf("the generated cases made %d jumps and %d stops: the property was not tried on both", jumps, stops)
	}
}
