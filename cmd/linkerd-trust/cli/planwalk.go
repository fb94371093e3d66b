package cli

import (
	"context"
	"fmt"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// planSimulation carries the plan past the step the operator stops at (workflow.Simulation):
// each step's acts are recorded and made in a simulated copy of the state (apply.Ahead), and
// its waits are assumed satisfied (steps.Assumption), saying so.
type planSimulation struct {
	// ahead is the simulation the steps write to; Land starts it over (newAhead).
	ahead    *apply.Ahead
	newAhead func() *apply.Ahead
	recorder *apply.DryRun
	// steps are the rotation's steps, writing to ahead.
	steps *steps.Ordered

	// The planned state: today's, as a landed jump leaves it.
	status  *v1alpha1.TrustAnchorRotationStatus
	s       *steps.State
	reading *observe.Reading
	// before is a copy of the planned state from before a jump landed, nil when none did: the
	// steps up to the jump were planned on it.
	before *steps.State
}

var _ workflow.Simulation[*steps.State] = (*planSimulation)(nil)

func (r *planSimulation) State() *steps.State { return r.ahead.State() }

// Stamp stands for the idempotency token the operator will choose when the step acts.
func (r *planSimulation) Stamp(p workflow.PlannedStep) string {
	if p.Simulated {
		return fmt.Sprintf("<new token of step %d>", p.Index+1)
	}
	return placeholderToken
}

// Act records the writes of the step's act, made in the simulated state: the record is the
// []apply.Write it made.
func (r *planSimulation) Act(ctx context.Context, st workflow.Step[*steps.State], token string) (any, error) {
	before := len(r.recorder.Writes())
	if err := st.Act(ctx, r.ahead.State(), token); err != nil {
		return nil, fmt.Errorf("recording the writes of step %s: %w", st.Name, err)
	}
	return r.recorder.Writes()[before:], nil
}

// Assume makes what the step assumes when it waits (steps.Step.Assumes) happen in the simulated
// state: the record is what it says of it.
func (r *planSimulation) Assume(st workflow.Step[*steps.State], _ workflow.Decision) (any, bool, string) {
	at, _ := r.steps.Named(st.Name)
	said, ok, why := r.ahead.Assume(at.Assumes)
	return said, ok, why
}

func (r *planSimulation) ObserveAhead(st workflow.Step[*steps.State], s *steps.State) workflow.Decision {
	at, _ := r.steps.Named(st.Name)
	return at.ObserveAhead(s)
}

// Land makes the planned state the one the jump's checkpoint leaves, and starts the simulation
// over from it.
func (r *planSimulation) Land(cp workflow.Checkpoint) (*steps.State, error) {
	before := *r.s
	r.before = &before
	if err := landJump(r.steps, r.status, cp, r.s, r.reading); err != nil {
		return nil, err
	}
	*r.ahead = *r.newAhead()
	return r.s, nil
}

// landJump makes s the state the checkpoint the operator saves for a jump leaves
// (steps.SaveCheckpoint: a superseded rotation's in-flight anchor kept in the status, the
// rotation towards the current anchor), as the engine does before it goes on from there.
func landJump(rot *steps.Ordered, status *v1alpha1.TrustAnchorRotationStatus, next workflow.Checkpoint, s *steps.State, reading *observe.Reading) error {
	saved := status.DeepCopy()
	steps.SaveCheckpoint(rot, saved, next, s, s.Now)
	if err := s.FromStatus(rot, saved); err != nil {
		return err
	}
	reading.Recount()
	return nil
}
