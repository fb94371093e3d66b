package workflow

// Option changes how Advance runs.
type Option func(*options)

type options struct {
	suspended bool
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
