package workflow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
)

// Checkpoint is the engine's resumable position: the step it is at and the idempotency token
// of that step's act. The operator persists it in the TrustAnchorRotation status.
type Checkpoint struct {
	Step  string
	Token string
	// Acts counts the acts run at Step under Token.
	Acts int32
}

// SaveFunc persists a checkpoint. The engine calls it before every act; an error aborts the act.
type SaveFunc func(ctx context.Context, cp Checkpoint) error

// Result is where a call to Advance left the workflow.
type Result struct {
	// Checkpoint is the workflow's position now; persist it.
	Checkpoint Checkpoint
	// Phase is the phase of the step at the checkpoint.
	Phase string
	// Decision is the last decision of the step at the checkpoint.
	Decision Decision
	// Acted is true when an act ran: read a fresh state and advance again to observe it.
	Acted bool
	// Passed names the steps completed by this call, in order.
	Passed []string
	// Completed is true when the last step completed and the workflow started over at the first.
	Completed bool
}

// ErrUnknownStep is returned when a checkpoint names a step the workflow does not have, for
// example one written by a newer version of the operator.
var ErrUnknownStep = errors.New("unknown step")

var stepName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Workflow is an ordered, cyclic list of steps: after the last step completes, the workflow
// starts over at the first, which typically waits for the next reason to run.
type Workflow[S any] struct {
	steps []Step[S]
	index map[string]int
}

// New validates the steps (unique kebab-case names, an Observe each) and returns a workflow.
func New[S any](steps ...Step[S]) (*Workflow[S], error) {
	if len(steps) == 0 {
		return nil, errors.New("a workflow needs at least one step")
	}
	w := &Workflow[S]{steps: steps, index: make(map[string]int, len(steps))}
	for i, st := range steps {
		if !stepName.MatchString(st.Name) {
			return nil, fmt.Errorf("step %d: name %q is not kebab-case", i, st.Name)
		}
		if _, dup := w.index[st.Name]; dup {
			return nil, fmt.Errorf("step %q is listed twice", st.Name)
		}
		if st.Observe == nil {
			return nil, fmt.Errorf("step %s: no Observe", st.Name)
		}
		w.index[st.Name] = i
	}
	return w, nil
}

// Steps returns the steps in order.
func (w *Workflow[S]) Steps() []Step[S] { return w.steps }

// Step returns the named step.
func (w *Workflow[S]) Step(name string) (Step[S], bool) {
	i, ok := w.index[name]
	if !ok {
		return Step[S]{}, false
	}
	return w.steps[i], true
}

// position returns the index of the checkpoint's step; an empty checkpoint is the first step.
func (w *Workflow[S]) position(cp Checkpoint) (int, error) {
	if cp.Step == "" {
		return 0, nil
	}
	i, ok := w.index[cp.Step]
	if !ok {
		return 0, fmt.Errorf("checkpoint step %q: %w", cp.Step, ErrUnknownStep)
	}
	return i, nil
}

// Advance walks the workflow from cp over the state: it passes every step that is done, and
// stops at the first step that waits, or after that step's act. It visits each step at most
// once per call, so a workflow whose every step is done stops where it started.
//
// Before an act, the checkpoint (with a token from newToken when the step has none yet, passed
// through the step's Token) is saved with save; the act runs only once that succeeded. Errors
// carry the step name.
func (w *Workflow[S]) Advance(ctx context.Context, cp Checkpoint, state S, save SaveFunc, newToken func() string) (Result, error) {
	i, err := w.position(cp)
	if err != nil {
		return Result{Checkpoint: cp}, err
	}
	if cp.Step == "" {
		cp = Checkpoint{Step: w.steps[0].Name}
	}
	res := Result{}
	for range w.steps {
		st := w.steps[i]
		d := st.Observe(state, cp.Token)
		res.Checkpoint, res.Phase, res.Decision = cp, st.Phase, d
		switch d.Outcome {
		case Done:
			res.Passed = append(res.Passed, st.Name)
			i = (i + 1) % len(w.steps)
			if i == 0 {
				res.Completed = true
			}
			cp = Checkpoint{Step: w.steps[i].Name}
			res.Checkpoint, res.Phase = cp, w.steps[i].Phase
		case Wait:
			return res, nil
		case Act:
			if st.Act == nil {
				return res, fmt.Errorf("step %s: asked to act (%s) but has no act", st.Name, d.Reason)
			}
			token := cp.Token
			if token == "" {
				token = newToken()
			}
			if st.Token != nil {
				token = st.Token(state, token)
			}
			cp.Token = token
			cp.Acts++
			if err := save(ctx, cp); err != nil {
				return res, fmt.Errorf("step %s: saving checkpoint before acting: %w", st.Name, err)
			}
			res.Checkpoint = cp
			if err := st.Act(ctx, state, cp.Token); err != nil {
				return res, fmt.Errorf("step %s: %w", st.Name, err)
			}
			res.Acted = true
			return res, nil
		default:
			return res, fmt.Errorf("step %s: unknown outcome %v", st.Name, d.Outcome)
		}
	}
	// Every step was done: the workflow went round once and stops where it started.
	return res, nil
}

// PlannedStep is one line of a dry-run plan.
type PlannedStep struct {
	Name    string
	Phase   string
	Doc     string
	Current bool
	// Decision is the step's observation of the state. For steps after the first one that
	// is not done, it describes the present, not the future state the step will see.
	Decision Decision
	// Changes are what the step's act would change, from its Describe.
	Changes []string
}

// Plan returns the steps from the checkpoint to the end of the workflow, each with its
// observation of the state and what it would change. It writes nothing and runs no act.
func (w *Workflow[S]) Plan(cp Checkpoint, state S) ([]PlannedStep, error) {
	i, err := w.position(cp)
	if err != nil {
		return nil, err
	}
	var plan []PlannedStep
	for j := i; j < len(w.steps); j++ {
		st := w.steps[j]
		token := ""
		if j == i {
			token = cp.Token
		}
		p := PlannedStep{Name: st.Name, Phase: st.Phase, Doc: st.Doc, Current: j == i, Decision: st.Observe(state, token)}
		if st.Describe != nil {
			p.Changes = st.Describe(state)
		}
		plan = append(plan, p)
	}
	return plan, nil
}
