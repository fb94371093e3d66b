// Package poll waits for a condition of the test bed by observing it: it re-checks the condition
// with a capped exponential backoff until it holds, fails for good, or a deadline passes. It is
// the one way the test bed waits, so that no code stands in for a condition with a fixed sleep.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"

	retry "github.com/sethvargo/go-retry"
)

// Condition reports whether what is awaited holds. A non-nil error ends the wait at once (the
// condition can no longer become true, e.g. a process died); return (false, nil) to keep waiting.
type Condition func(ctx context.Context) (done bool, err error)

// Until re-checks cond, starting after 20ms and backing off to at most one check per second, until
// it returns true or an error, ctx ends, or timeout passes. what names the awaited state in the
// error, so a failed wait says what it was waiting for; the last "not yet" reason from Pending is
// appended.
func Until(parent context.Context, timeout time.Duration, what string, cond Condition) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	backoff := retry.WithCappedDuration(time.Second, retry.NewExponential(20*time.Millisecond))
	var last error
	err := retry.Do(ctx, backoff, func(ctx context.Context) error {
		done, err := cond(ctx)
		var p *pending
		switch {
		case errors.As(err, &p):
			last = p.reason
			return retry.RetryableError(p.reason)
		case err != nil:
			return err
		case !done:
			return retry.RetryableError(errNotYet)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	if parent.Err() != nil {
		if last != nil {
			return fmt.Errorf("waiting for %s: %w; last: %v", what, parent.Err(), last)
		}
		return fmt.Errorf("waiting for %s: %w", what, parent.Err())
	}
	if ctx.Err() != nil {
		if last != nil {
			return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, last)
		}
		return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
	}
	return fmt.Errorf("waiting for %s: %w", what, err)
}

var errNotYet = errors.New("not yet")

// pending carries why a condition does not hold yet; see Pending.
type pending struct{ reason error }

func (p *pending) Error() string { return p.reason.Error() }

// Pending returns an error that keeps Until waiting but remembers reason, so that a timeout
// reports the last observed state ("Ready=False: IssuerNotFound") instead of a bare "timed out".
func Pending(format string, args ...any) error {
	return &pending{reason: fmt.Errorf(format, args...)}
}
