package workflow

import (
	"context"
	"fmt"
	"time"
)

// Outcome is what a step's Observe decided.
type Outcome int

const (
	// Done: the step's postcondition holds; the workflow moves on to the next step.
	Done Outcome = iota
	// Wait: the step waits for something outside the operator (a rollout, a renewal, a pod).
	Wait
	// Act: the step must act to make progress.
	Act
	// Jump: the workflow must start again at another step (Decision.To), or at this step with
	// a fresh token: what the checkpoint says no longer holds (the goal changed under it). The
	// engine saves the checkpoint at that step, as it does before an act, and stops there.
	Jump
)

func (o Outcome) String() string {
	switch o {
	case Done:
		return "Done"
	case Wait:
		return "Wait"
	case Act:
		return "Act"
	case Jump:
		return "Jump"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Decision is the result of observing a step: an outcome, a CamelCase reason a program can
// match on, and a message for people (the blockingMessage of a waiting rotation).
type Decision struct {
	Outcome Outcome
	Reason  string
	Message string
	// To is the step a Jump starts again at; empty for the other outcomes. Token is the
	// checkpoint's token there: "" for a fresh start (the step acts under a new token), or
	// what the step must keep of its earlier pass (see WithToken).
	To, Token string
	// Supersedes: the jump abandons what the workflow was working towards, for a newer goal
	// that superseded it (see Superseding); false for a jump that only starts work over.
	Supersedes bool
	// RecheckAt is the moment the decision may change with nothing else changing — a
	// certificate expires, a maintenance window opens, a report turns stale —, zero when only
	// a change to what it observed can change it. The caller observes again then.
	RecheckAt time.Time
}

// RecheckBy is d depending on the time as well at each non-zero moment of ts: its RecheckAt is
// the earliest of them and its own.
func (d Decision) RecheckBy(ts ...time.Time) Decision {
	d.RecheckAt = Earliest(append(ts, d.RecheckAt)...)
	return d
}

// Earliest is the earliest non-zero moment of ts, zero when there is none.
func Earliest(ts ...time.Time) time.Time {
	var first time.Time
	for _, t := range ts {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

// Decision constructors, so steps read as sentences: return workflow.Waiting("...", "...").
func Completed(reason, message string) Decision {
	return Decision{Outcome: Done, Reason: reason, Message: message}
}
func Waiting(reason, message string) Decision {
	return Decision{Outcome: Wait, Reason: reason, Message: message}
}
func ActNeeded(reason, message string) Decision {
	return Decision{Outcome: Act, Reason: reason, Message: message}
}

// JumpTo decides that the workflow starts again at the named step (see Jump).
func JumpTo(step, reason, message string) Decision {
	return Decision{Outcome: Jump, Reason: reason, Message: message, To: step}
}

// WithToken is the jump d landing with token as the checkpoint's token: a step that starts over
// and must not lose what its token records (its acts count from zero again).
func (d Decision) WithToken(token string) Decision {
	d.Token = token
	return d
}

// Superseding is the jump d abandoning what the workflow was working towards, for a newer goal
// that superseded it: the callers record the work it leaves as superseded, not as failed or done.
func (d Decision) Superseding() Decision {
	d.Supersedes = true
	return d
}

// Step is one idempotent, resumable unit of a workflow over states of type S.
type Step[S any] struct {
	// Name is the step's stable kebab-case name: its checkpoint key and its name in plans,
	// events and logs. Never rename a step: checkpoints in clusters refer to it.
	Name string
	// Phase is the phase the workflow reports while at this step.
	Phase string
	// Doc is one sentence for plans and help: what the step makes true.
	Doc string
	// Observe decides from the state alone — no I/O, no side effects — whether the step is
	// done, must wait or must act, or whether the workflow must jump to another step. It is
	// called by the operator and by dry runs alike. token is the idempotency token of the step's act in this pass ("" when it has not acted yet), so a
	// step can tell its own effect (stamped with the token) from an older one.
	Observe func(s S, token string) Decision
	// Act makes progress. It must be idempotent for a given token: the engine saves the token
	// in the checkpoint before calling Act, and calls Act again with the same token when an
	// operator restarted before the act's effect was observed. Nil for steps that only wait.
	Act func(ctx context.Context, s S, token string) error
	// Describe says, for a plan, what Act would change given the state. Optional.
	Describe func(s S) []string
	// Token returns the token the step's next act runs under, before each act and before the
	// checkpoint is saved: given a fresh unique stamp at the step's first act, or the token of
	// its earlier acts. It may extend the token with what the act must remember — for example
	// which objects it set out to replace, so that a repeated act never touches their
	// replacements, or a count to restore after a scale-down — and must return a token it was
	// given unchanged when the act has nothing new to remember. Optional: the stamp itself is
	// the token by default.
	Token func(s S, stamp string) string
}
