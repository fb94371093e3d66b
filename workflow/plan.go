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
// observation of the state and what it would change. It writes nothing and runs no act.
//
// A plan ends at a jump, as Advance stops at one: the steps passed up to the first step that is
// not done, and that step deciding to Jump (its Decision.To names where the workflow starts
// again). What the jump saves may change what the later steps observe, so the caller plans the
// rest from Checkpoint{Step: Decision.To}, over the state as the jump leaves it (or lets
// PlanAhead's Simulation land the jump).
func (w *Workflow[S]) Plan(cp Checkpoint, state S) ([]PlannedStep, error) {
	return w.PlanAhead(context.Background(), cp, state, nil)
}

// PlanAhead is Plan carried past the step where the workflow stops by sim, when it is not nil:
// from that step on, each step's acts run in the simulation and its waits are assumed satisfied
// until it is done, and the steps after it are observed on the simulated state (Simulated). A
// step the simulation cannot carry past (Stopped) ends the simulation: the steps after it are
// observed on the state by sim.ObserveAhead. A jump at the next step is landed (sim.Land) and
// the plan goes on from the step it lands on, with the jump's token, as the engine would once
// it saved the jump's checkpoint. The errors of sim are returned as they are.
func (w *Workflow[S]) PlanAhead(ctx context.Context, cp Checkpoint, state S, sim Simulation[S]) ([]PlannedStep, error) {
	i, err := w.position(cp)
	if err != nil {
		return nil, err
	}
	var plan []PlannedStep
	next := false            // the next step was found: the steps before it were done
	simulating := sim != nil // the simulation carried the plan past every step so far
	// The step the plan starts at holds the checkpoint's token; after a jump, the step it lands
	// on holds the jump's.
	startAt, startToken := i, cp.Token
	for j := i; j < len(w.steps); j++ {
		st := w.steps[j]
		token := ""
		if j == startAt {
			token = startToken
		}
		p := PlannedStep{Name: st.Name, Phase: st.Phase, Doc: st.Doc, Index: j, Current: j == i}
		observed := state
		switch {
		case !next:
			p.Decision = st.Observe(state, token)
			p.Next = p.Decision.Outcome != Done
			next = p.Next
		case simulating:
			observed, p.Simulated = sim.State(), true
			p.Decision = st.Observe(observed, token)
		case sim != nil:
			p.Decision = sim.ObserveAhead(st, state)
		default:
			p.Decision = st.Observe(state, token)
		}
		if p.Next && p.Decision.Outcome == Jump {
			to, ok := w.index[p.Decision.To]
			if !ok {
				return append(plan, p), fmt.Errorf("step %s: asked to jump (%s) to step %q: %w", st.Name, p.Decision.Reason, p.Decision.To, ErrUnknownStep)
			}
			plan = append(plan, p)
			if sim == nil {
				return plan, nil
			}
			d := p.Decision
			jump := &JumpRecord{From: st.Name, To: d.To, Reason: d.Reason, Message: d.Message, Supersedes: d.Supersedes}
			if state, err = sim.Land(Checkpoint{Step: d.To, Token: d.Token, Jump: jump}); err != nil {
				return plan, err
			}
			startAt, startToken = to, d.Token
			j = to - 1
			continue
		}
		if p.Decision.Outcome == Act && st.Describe != nil {
			p.Changes = st.Describe(observed)
		}
		if simulating && (p.Next || p.Simulated) {
			if err := pass(ctx, sim, st, &p, token); err != nil {
				return append(plan, p), err
			}
			simulating = p.Stopped == ""
		}
		plan = append(plan, p)
	}
	return plan, nil
}

// pass carries the simulation past the step observed as p.Decision under token: it runs its
// acts (the first under sim.Stamp unless the step holds a token) and assumes its waits satisfied, recording
// each in p.Passes, until the step is done; p.Stopped says why it could not.
func pass[S any](ctx context.Context, sim Simulation[S], st Step[S], p *PlannedStep, token string) error {
	d := p.Decision
	for range maxPasses {
		switch d.Outcome {
		case Done:
			return nil
		case Act:
			if st.Act == nil {
				p.Stopped = fmt.Sprintf("%s needs an act it does not have", st.Name)
				return nil
			}
			if token == "" {
				token = sim.Stamp(*p)
			}
			if st.Token != nil {
				token = st.Token(sim.State(), token) // what the engine saves before the act
			}
			rec, err := sim.Act(ctx, st, token)
			if err != nil {
				return err
			}
			p.Passes = append(p.Passes, Pass{Outcome: Act, Token: token, Record: rec})
		case Wait:
			rec, ok, why := sim.Assume(st, d)
			if !ok {
				p.Stopped = fmt.Sprintf("%s waits (%s) and %s", st.Name, d.Reason, why)
				return nil
			}
			p.Passes = append(p.Passes, Pass{Outcome: Wait, Record: rec})
		}
		d = st.Observe(sim.State(), token)
	}
	p.Stopped = fmt.Sprintf("%s still does not pass (%s: %s)", st.Name, d.Reason, d.Message)
	return nil
}
