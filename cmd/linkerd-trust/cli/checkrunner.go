package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/steps"
)

// HintBase is where every check's hint points: an anchor of the project's troubleshooting page.
const HintBase = "https://github.com/linkerd/trust-rotation/blob/main/docs/troubleshooting.md#"

// A checker is one check, as data: what it verifies, where its hint lives, how bad a failure
// is, and the function that runs it. Running is separate from rendering (table, JSON).
type checker struct {
	description string
	// hint is the anchor in docs/troubleshooting.md.
	hint string
	// warning makes every failure a warning; a check can also return warn(err) to warn about
	// one failure and fail on others.
	warning bool
	// fatal stops all later checks when this one fails: they could only fail for the same reason.
	fatal bool
	check func(ctx context.Context) error
}

// category is an ordered group of checkers, named as `linkerd check` names categories.
type category struct {
	name     string
	checkers []checker
}

// warningError marks a check failure as a warning.
type warningError struct{ err error }

func (w warningError) Error() string { return w.err.Error() }
func (w warningError) Unwrap() error { return w.err }

func warn(err error) error { return warningError{err} }

func warnf(format string, a ...any) error { return warn(fmt.Errorf(format, a...)) }

// checkResult is the outcome of one checker.
type checkResult struct {
	Category    string
	Description string
	HintURL     string
	Err         error
	Warning     bool
}

// runChecks runs the categories in order and hands each result to observe as soon as it is
// known. It returns whether every non-warning check passed.
func runChecks(ctx context.Context, cats []category, observe func(checkResult)) bool {
	success := true
	for _, cat := range cats {
		for _, ch := range cat.checkers {
			err := ch.check(ctx)
			if err == nil && ctx.Err() != nil {
				err = fmt.Errorf("not run: %w", ctx.Err())
			}
			r := checkResult{Category: cat.name, Description: ch.description, Err: err}
			if err != nil {
				r.HintURL = HintBase + ch.hint
				r.Warning = ch.warning || errors.As(err, new(warningError))
				if !r.Warning {
					success = false
				}
			}
			observe(r)
			if err != nil && !r.Warning && ch.fatal {
				return false
			}
		}
	}
	return success
}

// Status marks, as `linkerd check` prints them.
const (
	okStatus   = "√"
	warnStatus = "‼"
	failStatus = "×"
)

// tableRenderer prints results the way `linkerd check` does: each category's name underlined,
// one line per check, a failure's error and hint indented below it, and a closing status line.
type tableRenderer struct {
	w    io.Writer
	last string
}

func (t *tableRenderer) result(r checkResult) {
	if r.Category != t.last {
		if t.last != "" {
			fmt.Fprintln(t.w)
		}
		fmt.Fprintln(t.w, r.Category)
		fmt.Fprintln(t.w, strings.Repeat("-", len(r.Category)))
		t.last = r.Category
	}
	status := okStatus
	if r.Err != nil {
		status = failStatus
		if r.Warning {
			status = warnStatus
		}
	}
	fmt.Fprintf(t.w, "%s %s\n", status, r.Description)
	if r.Err == nil {
		return
	}
	for _, line := range strings.Split(r.Err.Error(), "\n") {
		fmt.Fprintf(t.w, "    %s\n", line)
	}
	if r.HintURL != "" {
		fmt.Fprintf(t.w, "    see %s for hints\n", r.HintURL)
	}
}

func (t *tableRenderer) finish(success bool) {
	fmt.Fprintln(t.w)
	status := okStatus
	if !success {
		status = failStatus
	}
	fmt.Fprintf(t.w, "Status check results are %s\n", status)
}

// The JSON output, exactly the schema `linkerd check` parses from an extension
// (linkerd2 pkg/healthcheck: checkOutput, checkCategory, check).
type checkOutput struct {
	Success    bool             `json:"success"`
	Categories []*checkCategory `json:"categories"`
}

type checkCategory struct {
	Name   string       `json:"categoryName"`
	Checks []*checkJSON `json:"checks"`
}

type checkJSON struct {
	Description string `json:"description"`
	Hint        string `json:"hint,omitempty"`
	Error       string `json:"error,omitempty"`
	Result      string `json:"result"`
}

// Check results as JSON strings.
const (
	resultSuccess = "success"
	resultWarning = "warning"
	resultError   = "error"
)

type jsonRenderer struct {
	w   io.Writer
	out checkOutput
}

func (j *jsonRenderer) result(r checkResult) {
	cats := j.out.Categories
	if len(cats) == 0 || cats[len(cats)-1].Name != r.Category {
		j.out.Categories = append(cats, &checkCategory{Name: r.Category, Checks: []*checkJSON{}})
	}
	c := &checkJSON{Description: r.Description, Result: resultSuccess}
	if r.Err != nil {
		c.Result, c.Error, c.Hint = resultError, r.Err.Error(), r.HintURL
		if r.Warning {
			c.Result = resultWarning
		}
	}
	cur := j.out.Categories[len(j.out.Categories)-1]
	cur.Checks = append(cur.Checks, c)
}

func (j *jsonRenderer) finish(success bool) error {
	j.out.Success = success
	b, err := json.MarshalIndent(j.out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(j.w, "%s\n", b)
	return err
}

// age renders a duration for messages: "3d4h", "1h30m", "5m", "20s".
func age(d time.Duration) string { return steps.ReadableDuration(d) }
