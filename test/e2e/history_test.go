package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestRotationHistory rotates the anchor as a user following README's Rotate section does and reads what the
// operator recorded: status.history holds the rotation, from the old anchor to the new one,
// with phase visits whose durations add up to its wall time, the user's restarts and the
// operator's; a RotationRecorded Event says so; and status.nextRotation, with its metric, moved
// with the renewed anchor's expiry, now computed from the measured rotation.
func TestRotationHistory(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The shape of the tests before it on the shared cluster: NewEnv leaves the workloads of a
	// larger shape in place, and this rotation restarts only its own.
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1},
		func(rel *charts.Release) *Operator { return StartChartOperator(t, rel) })

	oldAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	before, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "a next-rotation deadline",
		func(tar *v1alpha1.TrustAnchorRotation) bool { return tar.Status.NextRotation != nil })
	if err != nil {
		t.Fatal(err)
	}
	e.checkDeadline(before.Status.NextRotation, oldAnchor)
	recorded := len(before.Status.History)
	started := time.Now()

	rotateInOrder(e, issuerWhenAsked)
	if t.Failed() {
		return
	}
	newAnchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
	tar, err := e.TARs.Get(ctx, rotationName)
	if err != nil {
		t.Fatal(err)
	}
	st := tar.Status
	// The tests before it on the shared cluster may have filled the history to its limit: the
	// oldest entry then makes room.
	if want := min(recorded+1, steps.HistoryLimit(tar.Spec)); len(st.History) != want {
		t.Fatalf("history holds %d entries, want %d (%d before, limit %d): %+v", len(st.History), want, recorded, steps.HistoryLimit(tar.Spec), st.History)
	}
	r := st.History[0]
	if r.Outcome != v1alpha1.RotationCompleted || r.FinishTime == nil {
		t.Fatalf("latest entry %+v, want a completed rotation", r)
	}
	if r.Rotation != steps.Fingerprint(newAnchor) || r.From != steps.Fingerprint(oldAnchor) {
		t.Errorf("entry rotates %s -> %s, want %s -> %s", r.From, r.Rotation, steps.Fingerprint(oldAnchor), steps.Fingerprint(newAnchor))
	}
	if r.StartTime.Time.Before(started.Truncate(time.Second)) || r.FinishTime.Time.After(time.Now()) {
		t.Errorf("entry from %s to %s, not within the test's rotation (from %s)", r.StartTime, r.FinishTime, started)
	}
	// The phase visits add up to the wall time: both are whole seconds (metav1.Time).
	var sum time.Duration
	var phases []string
	for _, p := range r.Phases {
		sum += p.Duration.Duration
		phases = append(phases, fmt.Sprintf("%s %s", p.Phase, p.Duration.Duration))
	}
	if wall := r.FinishTime.Sub(r.StartTime.Time); sum != wall || wall <= 0 {
		t.Errorf("phase durations add up to %s, wall time %s: %v", sum, wall, phases)
	}
	for _, want := range []v1alpha1.Phase{v1alpha1.PhasePropagatingTrustRoots, v1alpha1.PhaseWaitingForIdentityRotation,
		v1alpha1.PhaseRenewingWorkloadCerts, v1alpha1.PhaseRemovingOldTrustRoots} {
		if !strings.Contains(strings.Join(phases, ","), string(want)) {
			t.Errorf("phases %v lack %s", phases, want)
		}
	}
	// The user restarted the workloads (manual restarts); the operator restarted the control plane.
	by := map[v1alpha1.RestartActor][]string{}
	for _, rr := range r.Restarts {
		by[rr.By] = append(by[rr.By], rr.Step)
	}
	if !contains(by[v1alpha1.RestartedByUser], steps.StepPropagateTrustRoots) || !contains(by[v1alpha1.RestartedByOperator], steps.StepRestartIdentity) {
		t.Errorf("restarts %+v: want propagate-trust-roots by the user and restart-identity by the operator", r.Restarts)
	}
	e.checkEvent(started, ReasonRotationRecorded, "rotation to trust anchor "+steps.ShortFingerprint(r.Rotation)+" completed")

	// The deadline moved with the renewed anchor, and now reads the measured rotation.
	after := st.NextRotation
	if after == nil {
		t.Fatal("no next-rotation deadline after the rotation")
	}
	if !after.Deadline.After(before.Status.NextRotation.Deadline.Time) {
		t.Errorf("deadline %s did not move past %s with the renewed anchor", after.Deadline, before.Status.NextRotation.Deadline)
	}
	e.checkDeadline(after, newAnchor)
	if !strings.Contains(after.Basis, "longest completed rotation") {
		t.Errorf("basis %q does not read the measured rotation", after.Basis)
	}
	e.checkFailWithin(after)
	e.checkInspectAgrees()
}

// checkInspectAgrees runs the real `linkerd-trust inspect -o json` after the rotation: the
// status's counts it shows are the counts it observes, and it shows the next deadline.
func (e *Env) checkInspectAgrees() {
	t := e.T
	t.Helper()
	out, err := exec.CommandContext(e.Ctx, Binary(t, "linkerd-trust"), "inspect", "-o", "json", "--kubeconfig", e.Cluster.Kubeconfig()).Output()
	if err != nil {
		t.Fatalf("inspect: %v: %s", err, out)
	}
	type count struct {
		Converged int32 `json:"convergedPods"`
		Target    int32 `json:"targetPods"`
		NotProbed int32 `json:"notProbedPods"`
	}
	var in struct {
		Phase                string                 `json:"phase"`
		TrustBundle          *count                 `json:"trustBundle"`
		WorkloadCertificates *count                 `json:"workloadCertificates"`
		NextRotation         *v1alpha1.NextRotation `json:"nextRotation"`
		Live                 struct {
			TrustBundle          count `json:"trustBundle"`
			WorkloadCertificates count `json:"workloadCertificates"`
		} `json:"live"`
	}
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatalf("inspect: %v in %s", err, out)
	}
	if in.Phase != string(v1alpha1.PhaseSynced) || in.NextRotation == nil {
		t.Errorf("inspect: phase %s, next rotation %+v; want Synced with a deadline", in.Phase, in.NextRotation)
	}
	if in.TrustBundle == nil || *in.TrustBundle != in.Live.TrustBundle ||
		in.WorkloadCertificates == nil || *in.WorkloadCertificates != in.Live.WorkloadCertificates ||
		in.Live.WorkloadCertificates.Converged != int32(e.MeshedPods()) {
		t.Errorf("inspect: status counts trust bundle %+v, certificates %+v; observed %+v, %+v (%d meshed pods)",
			in.TrustBundle, in.WorkloadCertificates, in.Live.TrustBundle, in.Live.WorkloadCertificates, e.MeshedPods())
	}
}

// deadlineCheck is the description of linkerd trust check's line on status.nextRotation.
const deadlineCheck = "the next rotation can still start in time"

// checkFailWithin runs the real `linkerd-trust check` with a --fail-within an hour longer than
// the time left to the deadline n, then an hour shorter: the first fails, on the deadline's
// line (the anchor itself expires a margin and a rotation later, outside the window); the
// second passes, that line included.
func (e *Env) checkFailWithin(n *v1alpha1.NextRotation) {
	t := e.T
	t.Helper()
	left := time.Until(n.Deadline.Time)
	for _, c := range []struct {
		within time.Duration
		fails  bool
	}{{left + time.Hour, true}, {left - time.Hour, false}} {
		within := fmt.Sprintf("%dm", int64(c.within/time.Minute))
		cmd := exec.CommandContext(e.Ctx, Binary(t, "linkerd-trust"), "check", "-o", "json", "--fail-within", within, "--kubeconfig", e.Cluster.Kubeconfig())
		out, err := cmd.Output()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("check --fail-within %s: %v", within, err)
		}
		var res struct {
			Success    bool `json:"success"`
			Categories []struct {
				Checks []struct{ Description, Result, Error string } `json:"checks"`
			} `json:"categories"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("check --fail-within %s: %v in %s", within, err, out)
		}
		var line string
		var others []string
		for _, cat := range res.Categories {
			for _, ch := range cat.Checks {
				switch {
				case ch.Description == deadlineCheck:
					line = ch.Result + ": " + ch.Error
				case ch.Result == "error":
					others = append(others, ch.Description+": "+ch.Error)
				}
			}
		}
		t.Logf("check --fail-within %s (deadline in %s): exit %v, %q", within, left.Round(time.Minute), err, line)
		switch {
		case line == "":
			t.Errorf("check --fail-within %s has no line %q: %s", within, deadlineCheck, out)
		case len(others) > 0:
			t.Errorf("check --fail-within %s failed other lines than the deadline's: %q", within, others)
		case c.fails && (err == nil || res.Success || !strings.HasPrefix(line, "error: ") || !strings.Contains(line, "within --fail-within")):
			t.Errorf("check --fail-within %s, deadline in %s: exit %v, success %v, %q; want a failure on the deadline", within, left, err, res.Success, line)
		case !c.fails && (err != nil || !res.Success || strings.HasPrefix(line, "error: ")):
			t.Errorf("check --fail-within %s, deadline in %s: exit %v, success %v, %q; want it to pass", within, left, err, res.Success, line)
		}
	}
}

// ReasonRotationRecorded is the operator's Event reason for a rotation the history closed.
const ReasonRotationRecorded = "RotationRecorded"

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkDeadline checks a status.nextRotation against the anchor it must be computed from and
// the spec's defaults, and the operator's metric against it.
func (e *Env) checkDeadline(n *v1alpha1.NextRotation, anchor *x509.Certificate) {
	e.T.Helper()
	if n.Margin.Duration != steps.DefaultRotationDeadlineMargin || n.RotationDuration.Duration < steps.DefaultWorkloadCertificateLifetime {
		e.T.Errorf("margin %s, rotation duration %s: want the default margin and at least a workload certificate lifetime", n.Margin.Duration, n.RotationDuration.Duration)
	}
	e.checkDeadlineSum(n, anchor)
}

// checkDeadlineSum checks that a status.nextRotation adds up, from the anchor it must be
// computed from, and the operator's metric against it.
func (e *Env) checkDeadlineSum(n *v1alpha1.NextRotation, anchor *x509.Certificate) {
	e.T.Helper()
	if !n.AnchorNotAfter.Time.Equal(anchor.NotAfter.Truncate(time.Second)) {
		e.T.Errorf("nextRotation.anchorNotAfter %s, want the anchor's NotAfter %s", n.AnchorNotAfter, anchor.NotAfter)
	}
	expiry := n.AnchorNotAfter
	if n.BridgeNotAfter != nil {
		expiry = *n.BridgeNotAfter
	}
	if want := expiry.Add(-n.Margin.Duration - n.RotationDuration.Duration); !n.Deadline.Time.Equal(want) {
		e.T.Errorf("nextRotation.deadline %s, want min(anchorNotAfter, bridgeNotAfter) - margin - rotationDuration = %s", n.Deadline, want)
	}
	const metric = "trust_rotation_next_rotation_deadline_timestamp_seconds"
	var got float64
	// The operator sets its gauges right after its status write: poll until they agree.
	err := wait.PollUntilContextTimeout(e.Ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		v, ok := e.metricValue(metric)
		got = v
		return ok && int64(v) == n.Deadline.Unix(), nil
	})
	if err != nil {
		e.T.Errorf("%s = %v, want %d", metric, got, n.Deadline.Unix())
	}
}

// checkEvent fails unless the operator recorded an Event of the reason, whose message holds
// text, since the time.
func (e *Env) checkEvent(since time.Time, reason, text string) {
	e.T.Helper()
	evs, err := e.Cluster.Kube().CoreV1().Events("default").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var seen []string
	for _, ev := range evs.Items {
		if ev.Reason == reason && ev.InvolvedObject.Kind == "TrustAnchorRotation" && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
			if strings.Contains(ev.Message, text) {
				return
			}
			seen = append(seen, ev.Message)
		}
	}
	e.T.Errorf("no %s Event with %q since %s (seen: %q)", reason, text, since, seen)
}

// metricValue reads a metric line's value from the operator's metrics.
func (e *Env) metricValue(name string) (float64, bool) {
	e.T.Helper()
	text, err := e.Operator.Metrics(e.Ctx)
	if err != nil {
		e.T.Fatalf("reading metrics: %v", err)
	}
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// checkBridgeDeadline checks, after cross-signed rotations onto anchor, that the next rotation's
// deadline counts from the first bridge certificate of the anchor's chain to expire — cert-manager
// keeps the older bridges there, and Linkerd identity caps workload certificates at them — and
// that the operator's metric follows it.
func (e *Env) checkBridgeDeadline(anchor *x509.Certificate) {
	e.T.Helper()
	var first *x509.Certificate
	for _, c := range e.SecretChain("cert-manager", "linkerd-trust-anchor")[1:] {
		if c.CheckSignatureFrom(c) != nil && c.NotAfter.Before(anchor.NotAfter) && (first == nil || c.NotAfter.Before(first.NotAfter)) {
			first = c
		}
	}
	if first == nil {
		e.T.Fatal("the anchor's Secret carries no older bridge certificate after two cross-signed rotations")
	}
	want := first.NotAfter.Truncate(time.Second)
	tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, time.Minute, "status.nextRotation counting from the oldest bridge",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			n := tar.Status.NextRotation
			return n != nil && n.BridgeNotAfter != nil && n.BridgeNotAfter.Time.Equal(want)
		})
	if err != nil {
		e.T.Fatalf("%v (want bridgeNotAfter %s, the NotAfter of bridge %s)", err, want, steps.Fingerprint(first)[:12])
	}
	n := tar.Status.NextRotation
	if !strings.Contains(n.Basis, "the bridge certificate "+steps.ShortFingerprint(steps.Fingerprint(first))) || !strings.Contains(n.Basis, "strategy Standard") {
		e.T.Errorf("nextRotation.basis does not name bridge %s and ask for a Standard rotation: %q", steps.Fingerprint(first)[:12], n.Basis)
	}
	e.checkDeadlineSum(n, anchor)
}
