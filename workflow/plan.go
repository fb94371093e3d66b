package workflow

import (
	"context"
	"fmt"
)

// PlannedStep is one line of a dry-run plan.
type PlannedStep struct {
	Name  string
	Phase string
	Doc   string
	// Index is the step's position in the workflow, from 0.
	Index int
	// Current: the step is the checkpoint's.
	Current bool
	// Next: the workflow stops at the step now: the first step from the checkpoint that is not
	// done on the state.
	Next bool
	// Decision is the step's observation. Up to the next step it is of the state; after it, of
	// the simulation's state when the plan simulates (Simulated), else of the present state,
	// not the future one the step will see.
	Decision Decision
	// Changes are what the step's act would change, from its Describe, when it decided to act.
	Changes []string
	// Simulated: the step was observed on the simulation's state, as the steps before it leave
	// it, and the simulation carried on past it (Passes).
	Simulated bool
	// Passes are what the simulation made happen to carry the plan past the step, in order.
	Passes []Pass
	// Stopped says why the simulation could not carry the plan past the step; the steps after
	// it are observed on the state (Simulation.ObserveAhead). "" when it could.
	Stopped string
}

// Pass is one thing a simulation made happen to carry a plan past a step: the step's act, or
// what it waited on assumed to have happened.
type Pass struct {
	// Outcome is Act (the act ran in the simulation, under Token) or Wait (the wait was assumed
	// satisfied).
	Outcome Outcome
	Token   string
	// Record is what the simulation returned of it (see Simulation), for the plan's reader.
	Record any
}

// Simulation lets a plan look past the step where the workflow stops: it runs the steps' acts
// in a simulated copy of the state, and makes happen what they wait on, so that each later step
// is observed on the state the steps before it leave, not on today's.
type Simulation[S any] interface {
	// State is the simulated state: the planned state as the acts and assumptions so far left it.
	State() S
	// Stamp is the token a step's first act runs under in the plan (the operator chooses a
	// fresh one when it acts).
	Stamp(p PlannedStep) string
	// Act runs the step's act in the simulated state under token, and returns what it recorded.
	Act(ctx context.Context, st Step[S], token string) (record any, err error)
	// Assume makes happen in the simulated state what the step waits on (d), and returns what
	// it assumed; ok is false when it cannot, and why says why.
	Assume(st Step[S], d Decision) (record any, ok bool, why string)
	// ObserveAhead observes a step the simulation did not reach, on the planned state.
	ObserveAhead(st Step[S], state S) Decision
	// Land makes the planned state what the jump's checkpoint cp leaves once the engine saved
	// it, and starts the simulation over from it; it returns the state the steps observe then.
	Land(cp Checkpoint) (S, error)
}

// maxPasses bounds the acts and assumptions a plan goes through at one step (a step that scales
// a Deployment down and up again goes through two acts and two waits).
const maxPasses = 8

// Plan returns the steps from the checkpoint to the end of the workflow, each with its
// observation of the state and what it would change. It writes nothing and runs no act but in
// sim, a Simulation, when it is not nil.
//
// Without a simulation a plan ends where the workflow stops now, and the steps after it are
// observed on the state as it is. It ends at a jump, as Advance stops at one: the steps passed
// up to the first step that is not done, and that step deciding to Jump (its Decision.To names
// where the workflow starts again). What the jump saves may change what the later steps
// observe, so the caller plans the rest from Checkpoint{Step: Decision.To}, over the state as
// the jump leaves it, or lets a Simulation land the jump.
//
// With a simulation the plan is carried past the step where the workflow stops: from that step
// on, each step's acts run in the simulation and its waits are assumed satisfied until it is
// done, and the steps after it are observed on the simulated state (Simulated). A step the
// simulation cannot carry past (Stopped) ends the simulation: the steps after it are observed on
// the state by sim.ObserveAhead. A jump at the next step is landed (sim.Land) and the plan goes
// on from the step it lands on, with the jump's token, as the engine would once it saved the
// jump's checkpoint. The errors of sim are returned as they are.
//
// The walk is Advance's: up to the next step Advance holds every act and jump (Suspended) over
// the state; from it on, Advance runs over the simulation's state, its acts through sim.Act and
// its saves recording nothing, once to the last step; each observation Advance makes is a step
// of the plan, and each act it ran or wait the simulation lifted is a pass of that step.
func (w *Workflow[S]) Plan(ctx context.Context, cp Checkpoint, state S, sim Simulation[S]) ([]PlannedStep, error) {
	i, err := w.position(cp)
	if err != nil {
		return nil, err
	}
	pl := &planner[S]{w: w, current: i, sim: sim}
	// Up to the next step, over the state: the steps done, then the next, holding its act or
	// jump.
	res, err := w.Advance(ctx, cp, state, nil, nil, Suspended(true), once(), pl.observer(state, false))
	if err != nil {
		return pl.plan, err
	}
	if res.Decision.Outcome == Done { // every step from the checkpoint is done
		return pl.plan, nil
	}
	next := &pl.plan[len(pl.plan)-1]
	next.Next = true
	switch {
	case res.Decision.Outcome == Jump:
		// The jump lands (sim.Land), and the simulation goes on from where it lands, with the
		// jump's token.
		jump, to, err := w.jumpOf(w.steps[next.Index], res.Decision)
		if err != nil || sim == nil {
			return pl.plan, err
		}
		if state, err = sim.Land(Checkpoint{Step: jump.To, Token: res.Decision.Token, Jump: jump}); err != nil {
			return pl.plan, err
		}
		cp, pl.landed = Checkpoint{Step: w.steps[to].Name, Token: res.Decision.Token}, true
	case sim == nil:
		return pl.observeRest(next.Index, state, func(st Step[S]) Decision { return st.Observe(state, "") }), nil
	default:
		// From the next step on, in the simulation: the next step holds the checkpoint's token
		// when it is the checkpoint's step.
		cp = Checkpoint{Step: next.Name, Token: cp.Token}
		if next.Index != i {
			cp.Token = ""
		}
	}
	for {
		p := &pl.plan[len(pl.plan)-1]
		if len(p.Passes) == maxPasses {
			if d := w.steps[p.Index].Observe(sim.State(), cp.Token); d.Outcome != Done {
				p.Stopped = fmt.Sprintf("%s still does not pass (%s: %s)", p.Name, d.Reason, d.Message)
				break
			}
		}
		res, err := w.Advance(ctx, cp, sim.State(), func(context.Context, Checkpoint) error { return nil },
			func() string { return sim.Stamp(pl.plan[len(pl.plan)-1]) }, once(), pl.observer(sim.State(), true), pl.actor(ctx))
		if res.ActErr != nil {
			return pl.plan, res.ActErr
		}
		if err != nil {
			return pl.plan, err
		}
		p = &pl.plan[len(pl.plan)-1]
		cp = res.Checkpoint
		switch {
		case res.Completed:
			return pl.plan, nil
		case res.Acted:
			p.Passes = append(p.Passes, Pass{Outcome: Act, Token: cp.Token, Record: pl.record})
			continue
		case res.Jumped != nil:
			// The simulation does not land a jump past the next step: only the checkpoint's
			// step takes one.
			p.Stopped = fmt.Sprintf("%s still does not pass (%s: %s)", p.Name, res.Decision.Reason, res.Decision.Message)
		case res.Decision.Outcome == Wait:
			rec, ok, why := sim.Assume(w.steps[pl.index(cp)], res.Decision)
			if !ok {
				p.Stopped = fmt.Sprintf("%s waits (%s) and %s", p.Name, res.Decision.Reason, why)
				break
			}
			p.Passes = append(p.Passes, Pass{Outcome: Wait, Record: rec})
			continue
		}
		break
	}
	// The simulation stopped: the steps after are observed on the state.
	stopped := pl.plan[len(pl.plan)-1].Index
	return pl.observeRest(stopped, state, func(st Step[S]) Decision { return sim.ObserveAhead(st, state) }), nil
}

// planner builds a plan from what Advance observes and acts on (Plan).
type planner[S any] struct {
	w       *Workflow[S]
	current int // the checkpoint's position
	sim     Simulation[S]
	plan    []PlannedStep
	// record is what the latest act recorded.
	record any
	// landed: a jump landed, so the step it landed on is a step of its own in the plan, even
	// when it is the step that jumped.
	landed bool
}

func (pl *planner[S]) index(cp Checkpoint) int { return pl.w.index[cp.Step] }

// observer makes each step Advance observes over s a step of the plan, but for the step the
// plan is at, observed again after a pass (Advance resumes at it).
func (pl *planner[S]) observer(s S, simulated bool) Option {
	return func(o *options) {
		o.observed = func(i int, d Decision) {
			if n := len(pl.plan); simulated && !pl.landed && n > 0 && pl.plan[n-1].Index == i && (pl.plan[n-1].Next || len(pl.plan[n-1].Passes) > 0) {
				return
			}
			pl.landed = false
			st := pl.w.steps[i]
			p := PlannedStep{Name: st.Name, Phase: st.Phase, Doc: st.Doc, Index: i, Current: i == pl.current, Simulated: simulated, Decision: d}
			if d.Outcome == Act && st.Describe != nil {
				p.Changes = st.Describe(s)
			}
			pl.plan = append(pl.plan, p)
		}
	}
}

// actor runs the acts in the simulation, keeping what each recorded.
func (pl *planner[S]) actor(ctx context.Context) Option {
	return func(o *options) {
		o.act = func(ctx context.Context, i int, token string) (err error) {
			pl.record, err = pl.sim.Act(ctx, pl.w.steps[i], token)
			return err
		}
	}
}

// observeRest observes the steps after position from, to the last, with observe; what the
// acts would change is described on s.
func (pl *planner[S]) observeRest(from int, s S, observe func(Step[S]) Decision) []PlannedStep {
	for j := from + 1; j < len(pl.w.steps); j++ {
		st := pl.w.steps[j]
		d := observe(st)
		p := PlannedStep{Name: st.Name, Phase: st.Phase, Doc: st.Doc, Index: j, Current: j == pl.current, Decision: d}
		if d.Outcome == Act && st.Describe != nil {
			p.Changes = st.Describe(s)
		}
		pl.plan = append(pl.plan, p)
	}
	return pl.plan
}

// once makes Advance stop after the last step rather than start over at the first.
func once() Option { return func(o *options) { o.once = true } }
