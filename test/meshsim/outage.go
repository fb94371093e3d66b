package meshsim

import (
	"fmt"
	"slices"
	"time"
)

// Outage measures broken mTLS over a span of time: how long at least one ordered pair of meshed
// pods could not verify the other (the union of the violation episodes, each from the check that
// first saw it to the check that no longer did), and the most pairs one episode broke at once.
// Its resolution is the oracle's tick.
type Outage struct {
	From, To time.Time
	Down     time.Duration // time within [From, To) with at least one failing pair
	Episodes int           // violation episodes that overlapped [From, To)
	Started  int           // of those, the ones that began within (From, To): a pair that verified at From and broke after it
	MaxPairs int
}

func (o Outage) String() string {
	return fmt.Sprintf("%s of %s with a failing pair (%d episode(s), %d begun after the start, at most %d pairs at once)",
		o.Down.Round(time.Second), o.To.Sub(o.From).Round(time.Second), o.Episodes, o.Started, o.MaxPairs)
}

// Outage measures the violation episodes within [from, to); a zero to means now (after a check).
func (o *Oracle) Outage(from, to time.Time) Outage {
	if to.IsZero() {
		to = o.Check().Time
	}
	out := Outage{From: from, To: to}
	type span struct{ start, end time.Time }
	var spans []span
	for _, v := range o.Violations() {
		end := v.End
		if end.IsZero() {
			end = to
		}
		start := v.Start
		if !start.Before(to) || !end.After(from) {
			continue
		}
		out.Episodes++
		if start.After(from) {
			out.Started++
		}
		out.MaxPairs = max(out.MaxPairs, v.Pairs)
		spans = append(spans, span{later(start, from), earlier(end, to)})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	var cur span
	for i, s := range spans {
		switch {
		case i == 0:
			cur = s
		case !s.start.After(cur.end):
			cur.end = later(cur.end, s.end)
		default:
			out.Down += cur.end.Sub(cur.start)
			cur = s
		}
	}
	if len(spans) > 0 {
		out.Down += cur.end.Sub(cur.start)
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
