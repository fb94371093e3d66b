package workflow

import "context"

// Option changes how Advance runs.
type Option func(*options)

type options struct {
	suspended bool
	// The walk a plan makes (Plan) sets these, unexported: once stops after the last step
	// instead of starting over at the first; observed is told of every observation, in order;
	// act runs the act of the step at position i instead of the step's own Act.
	once     bool
	observed func(i int, d Decision)
	act      func(ctx context.Context, i int, token string) error
}

// Suspended holds every act and every jump when on, as a suspended CronJob holds its runs: the
// workflow still observes, passes the steps that are done and stops at the first that is not,
// but saves nothing and runs nothing there. The Result says so (Held) with the decision the step
// would have carried out, so that the caller can report what would happen next.
func Suspended(on bool) Option {
	return func(o *options) { o.suspended = on }
}

func advanceOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
