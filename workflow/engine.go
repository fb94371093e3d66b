package workflow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Checkpoint is the engine's resumable position: the step it is at and the idempotency token
// of that step's act. The operator persists it in the TrustAnchorRotation status.
type Checkpoint struct {
	Step  string
	Token string
	// Acts counts the acts run at Step under Token.
	Acts int32
	// Jump is the jump that moved the workflow to Step, on the checkpoint the engine saves for
	// it; nil on every other checkpoint. It is not part of the position: a SaveFunc reads it
	// to record what the jump means besides (the checkpoint's own store may keep more than the
	// position), and need not persist it.
	Jump *JumpRecord
}

// JumpRecord is a move of the workflow that is not to the next step: a step observed that the
// checkpoint no longer holds (what it was working towards changed) and decided that the
// workflow starts again at To — an earlier step, a later one, or the same step with a fresh
// token. The engine records it like any other move of the checkpoint: saved before anything
// else runs, and reported in the Result and in plans.
type JumpRecord struct {
	// From is the step that decided the jump, To the step the workflow starts again at.
	From, To string
	// Reason and Message are the deciding step's: why the workflow jumps.
	Reason, Message string
	// Supersedes is the deciding step's Decision.Supersedes.
	Supersedes bool
}

func (j JumpRecord) String() string {
	return fmt.Sprintf("%s -> %s (%s): %s", j.From, j.To, j.Reason, j.Message)
}

// SaveFunc persists a checkpoint. The engine calls it before every act, and with the
// checkpoint a jump moves to; an error aborts the act or the jump.
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
	// Jumped is the jump this call made, nil when none: Checkpoint is then at its To, saved,
	// and Decision is the jumping step's. Read a fresh state and advance again.
	Jumped *JumpRecord
	// Held is true when the workflow is Suspended and the step at Checkpoint decided to act or
	// to jump (Decision): nothing was saved and nothing ran.
	Held bool
	// ActErr is the error of the act that ran and failed, nil when none did: Checkpoint is the
	// one saved before it. Advance returns it too, wrapped with the step's name.
	ActErr error
	// RecheckAt is the earliest RecheckAt of the decisions this call observed, zero when none
	// depends on the time: what the steps passed decided may change then as well.
	RecheckAt time.Time
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

// Position is the named step's position in the workflow, from 0; ok is false for a name it does
// not have. The workflow's index is the one index of the steps: the steps package looks its own
// list up through it.
func (w *Workflow[S]) Position(name string) (i int, ok bool) {
	i, ok = w.index[name]
	return i, ok
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

// jumpOf is the record of the jump st decided (d), and the position of the step it lands on.
func (w *Workflow[S]) jumpOf(st Step[S], d Decision) (*JumpRecord, int, error) {
	to, ok := w.index[d.To]
	if !ok {
		return nil, 0, fmt.Errorf("step %s: asked to jump (%s) to step %q: %w", st.Name, d.Reason, d.To, ErrUnknownStep)
	}
	return &JumpRecord{From: st.Name, To: d.To, Reason: d.Reason, Message: d.Message, Supersedes: d.Supersedes}, to, nil
}

// Advance walks the workflow from cp over the state: it passes every step that is done, and
// stops at the first step that waits, or after that step's act. It visits each step at most
// once per call, so a workflow whose every step is done stops where it started.
//
// Before an act, the checkpoint (with a token from newToken when the step has none yet, passed
// through the step's Token) is saved with save; the act runs only once that succeeded. A step
// that decides to Jump moves the checkpoint to the step it names, with the jump's token (none
// unless it says, see Decision.WithToken) and no act counted, and that checkpoint is saved with
// save, its Jump set; the call then stops, as after
// an act: what the jump saved may change the state the steps observe (the caller reads a fresh
// one), and the step jumped to must observe it before anything acts. Errors carry the step name.
//
// Suspended (an Option) holds the act or the jump: the call stops at that step, saving nothing.
func (w *Workflow[S]) Advance(ctx context.Context, cp Checkpoint, state S, save SaveFunc, newToken func() string, opts ...Option) (Result, error) {
	o := advanceOptions(opts)
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
		if o.observed != nil {
			o.observed(i, d)
		}
		res.Checkpoint, res.Phase, res.Decision = cp, st.Phase, d
		res.RecheckAt = Earliest(res.RecheckAt, d.RecheckAt)
		if o.suspended && (d.Outcome == Act || d.Outcome == Jump) {
			res.Held = true
			return res, nil
		}
		switch d.Outcome {
		case Done:
			res.Passed = append(res.Passed, st.Name)
			i = (i + 1) % len(w.steps)
			if i == 0 {
				res.Completed = true
			}
			cp = Checkpoint{Step: w.steps[i].Name}
			res.Checkpoint, res.Phase = cp, w.steps[i].Phase
			if res.Completed && o.once {
				return res, nil
			}
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
			act := st.Act
			if o.act != nil {
				act = func(ctx context.Context, _ S, token string) error { return o.act(ctx, i, token) }
			}
			if err := act(ctx, state, cp.Token); err != nil {
				res.ActErr = err
				return res, fmt.Errorf("step %s: %w", st.Name, err)
			}
			res.Acted = true
			return res, nil
		case Jump:
			j, to, err := w.jumpOf(st, d)
			if err != nil {
				return res, err
			}
			next := Checkpoint{Step: d.To, Token: d.Token, Jump: j}
			if err := save(ctx, next); err != nil {
				return res, fmt.Errorf("step %s: saving checkpoint of the jump to %s: %w", st.Name, d.To, err)
			}
			res.Checkpoint, res.Phase, res.Jumped = next, w.steps[to].Phase, j
			return res, nil
		default:
			return res, fmt.Errorf("step %s: unknown outcome %v", st.Name, d.Outcome)
		}
	}
	// Every step was done: the workflow went round once and stops where it started.
	return res, nil
}
