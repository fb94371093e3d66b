package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The next rotation's deadline and the rotation history, as check, inspect and plan show them.

// nextRotationLine is the deadline for people: when, how far from now, and from what.
func nextRotationLine(n *v1alpha1.NextRotation, now time.Time) string {
	if n == nil {
		return "not reported yet"
	}
	expires := "anchor expires " + n.AnchorNotAfter.UTC().Format(time.RFC3339)
	if b := n.BridgeNotAfter; b != nil {
		expires = fmt.Sprintf("a bridge certificate of the anchor's chain expires %s, before the anchor (%s): the next rotation must be Standard",
			b.UTC().Format(time.RFC3339), n.AnchorNotAfter.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("start by %s (%s): %s, less margin %s and rotation %s",
		n.Deadline.UTC().Format(time.RFC3339), steps.DeadlineWithin(n, now), expires,
		steps.CompactDuration(n.Margin.Duration), steps.CompactDuration(n.RotationDuration.Duration))
}

// deadlineInputs is what the deadline reads of the pods this command listed: the oldest meshed
// pod outside the control plane. The workload certificates' lifetime is left to Linkerd's
// default: the probes here keep chains, not leaves.
func deadlineInputs(pods []*podindex.Pod) steps.DeadlineInputs {
	var in steps.DeadlineInputs
	for _, p := range pods {
		if p.Meshed && p.Alive && !p.ControlPlane && !p.Created.IsZero() && (in.OldestMeshedPod.IsZero() || p.Created.Before(in.OldestMeshedPod)) {
			in.OldestMeshedPod = p.Created
		}
	}
	return in
}

// rotationDeadline is check's line on status.nextRotation: a warning once the deadline is within
// --expiry-warning (or passed), a failure once it is within --fail-within.
func (c *checks) rotationDeadline(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	n := tar.Status.NextRotation
	if n == nil {
		return warnf("TrustAnchorRotation %s reports no next-rotation deadline (status.nextRotation): the operator has not computed it yet, or the trust anchor is unusable", tar.Name)
	}
	left := n.Deadline.Sub(c.now)
	msg := fmt.Sprintf("the next rotation must start by %s (%s); basis: %s", n.Deadline.UTC().Format(time.RFC3339), steps.DeadlineWithin(n, c.now), n.Basis)
	switch fail := time.Duration(c.o.failWithin); {
	case fail > 0 && left <= fail:
		return fmt.Errorf("%s: within --fail-within %s", msg, &c.o.failWithin)
	case left <= time.Duration(c.o.expiryWarning):
		return warnf("%s: within --expiry-warning %s", msg, &c.o.expiryWarning)
	}
	return nil
}

// convergenceLine is a status count, naming its population. Pods not probed yet are said so:
// when they are all that is missing, the group is not converging, it is unread.
func convergenceLine(c *v1alpha1.ConvergenceStatus, population string) string {
	if c == nil {
		return "not reported yet"
	}
	line := fmt.Sprintf("%d/%d %s converged", c.ConvergedPods, c.TargetPods, population)
	if c.Status != v1alpha1.Converged && c.ConvergedPods+c.NotProbedPods >= c.TargetPods {
		return line + notProbedSuffix(int(c.NotProbedPods))
	}
	return fmt.Sprintf("%s (%s)%s", line, c.Status, notProbedSuffix(int(c.NotProbedPods)))
}

func notProbedSuffix(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d not probed yet", n)
}

// writeStructured writes v as JSON or YAML.
func writeStructured(w io.Writer, v any, format string) error {
	var b []byte
	var err error
	if format == "yaml" {
		b, err = yaml.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// historyView is inspect --history's structured output.
type historyView struct {
	Rotation     string                    `json:"rotation"`
	NextRotation *v1alpha1.NextRotation    `json:"nextRotation,omitempty"`
	History      []v1alpha1.RotationRecord `json:"history"`
	// Emergency is the post-incident summary of the last emergency rotation (rotate
	// --emergency), when the TrustAnchorRotation records one.
	Emergency *emergencySummary `json:"emergency,omitempty"`
}

// showHistory prints status.history: a table, or JSON or YAML.
func showHistory(ctx context.Context, env *Env, cl *Clients, name, format string) error {
	tar, err := cl.Rotations.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", name, err)
	}
	v := historyView{Rotation: name, NextRotation: tar.Status.NextRotation, History: tar.Status.History}
	if v.Emergency, err = readEmergency(tar); err != nil {
		return err
	}
	if v.History == nil {
		v.History = []v1alpha1.RotationRecord{}
	}
	if format != "table" {
		return writeStructured(env.Out, v, format)
	}
	return renderHistory(env.Out, v, env.now())
}

func renderHistory(w io.Writer, v historyView, now time.Time) error {
	fmt.Fprintf(w, "TrustAnchorRotation %s\n  Next rotation: %s\n", v.Rotation, nextRotationLine(v.NextRotation, now))
	if n := v.NextRotation; n != nil && n.Basis != "" {
		fmt.Fprintf(w, "  Rotation duration: %s\n", n.Basis)
	}
	if len(v.History) == 0 {
		_, err := fmt.Fprintf(w, "\nNo rotation recorded yet.\n")
		return err
	}
	if v.Emergency != nil {
		renderEmergencySummary(w, v.Emergency, now)
	}
	fmt.Fprintf(w, "\nRotations (latest first):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED\tDURATION\tOUTCOME\tFROM\tTO\tPHASES\tRESTARTS\tFAULTS")
	for _, r := range v.History {
		d := steps.RecordDuration(r)
		if r.FinishTime == nil {
			d = now.Sub(r.StartTime.Time)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.StartTime.UTC().Format(time.RFC3339), steps.CompactDuration(d.Round(time.Second)),
			r.Outcome, orNone(steps.ShortFingerprint(r.From)), steps.ShortFingerprint(r.Rotation), phasesCell(r.Phases), restartsCell(r.Restarts), orNone(strings.Join(r.Faults, ",")))
	}
	return tw.Flush()
}

func phasesCell(ps []v1alpha1.PhaseDuration) string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %s", p.Phase, steps.CompactDuration(p.Duration.Duration)))
	}
	return orNone(strings.Join(out, ", "))
}

func restartsCell(rs []v1alpha1.RestartRecord) string {
	var out []string
	for _, r := range rs {
		s := fmt.Sprintf("%s by %s", r.Step, r.By)
		if r.Acts > 0 {
			s += fmt.Sprintf(" (%d)", r.Acts)
		}
		out = append(out, s)
	}
	return orNone(strings.Join(out, ", "))
}

// errHistoryWatch: --history shows what is recorded; --watch follows the cluster.
var errHistoryWatch = errors.New("--history shows the recorded rotations: it cannot be combined with --watch")
