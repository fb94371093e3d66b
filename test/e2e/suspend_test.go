package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestSuspendSurvivesRestart suspends the rotation with `linkerd trust rotate --suspend`, renews
// the anchor, and checks that the operator observes and reports what it would do next but acts
// on nothing — not even once killed and restarted, since suspend is in the spec — that plan
// shows it and rotate refuses to start a rotation; `rotate --resume` lets it complete, the
// oracle watching.
func TestSuspendSurvivesRestart(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 1, Deployments: 2, Replicas: 1, ChartSet: automationValues}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	t.Cleanup(func() { e.restoreDefaults(c) })
	since := time.Now()
	cli := func(args ...string) (string, int) {
		t.Helper()
		return trustCLI(t, ctx, c, args...)
	}
	suspendedWith := func(part string) func(*v1alpha1.TrustAnchorRotation) bool {
		return func(tar *v1alpha1.TrustAnchorRotation) bool {
			c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionSuspended)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, part) && strings.Contains(tar.Status.BlockingMessage, part)
		}
	}

	if out, code := cli("rotate", "--suspend"); code != 0 || !strings.Contains(out, "Suspended TrustAnchorRotation "+rotationName) {
		t.Fatalf("rotate --suspend: exit %d\n%s", code, out)
	}
	if _, err := WaitRotation(ctx, e.TARs, rotationName, time.Minute, "suspended while Synced", suspendedWith("no act is due")); err != nil {
		t.Fatal(err)
	}
	if out, code := cli("rotate"); code == 0 || !strings.Contains(out, "is suspended (spec.suspend)") {
		t.Errorf("rotate while suspended: exit %d, want a refusal naming the suspension\n%s", code, out)
	}

	bundle := func() (string, string) {
		cm, err := c.Kube().CoreV1().ConfigMaps("linkerd").Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.ResourceVersion, cm.Data[steps.TrustRootsKey]
	}
	rv, roots := bundle()
	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	next := "next: step " + steps.StepExpandTrustBundle + " would act"
	tar, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the expansion held", suspendedWith(next))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("suspended: %s", tar.Status.BlockingMessage)
	if out, code := cli("plan"); code != 0 || !strings.Contains(out, "SUSPENDED") || !strings.Contains(out, next) {
		t.Errorf("plan while suspended: exit %d, want the suspension and the next act\n%s", code, out)
	}

	// Killed and restarted, the operator reads spec.suspend again and acts on nothing. A change
	// of the spec while it is down makes the new process's reconcile visible: it writes the
	// generation it observed.
	e.Operator.Kill()
	if err := e.patchSpec(ctx, `{"spec":{"stalledAfter":{"default":"2h"}}}`); err != nil {
		t.Fatal(err)
	}
	op := StartChartOperator(t, e.Release)
	tar, err = WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "the restarted operator's observation",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return tar.Status.ObservedGeneration == tar.Generation && suspendedWith(next)(tar)
		})
	if err != nil {
		t.Fatal(err)
	}
	if cp := tar.Status.Checkpoint; cp == nil || cp.Step != steps.StepExpandTrustBundle || cp.Acts != 0 {
		t.Errorf("checkpoint %+v after the restart: want %s with no act", tar.Status.Checkpoint, steps.StepExpandTrustBundle)
	}
	if gotRV, gotRoots := bundle(); gotRV != rv || gotRoots != roots {
		t.Errorf("the trust bundle changed while suspended (resourceVersion %s -> %s)", rv, gotRV)
	}
	if err := poll.Until(ctx, 30*time.Second, "the restarted operator's metrics", func(ctx context.Context) (bool, error) {
		m, err := op.Metrics(ctx)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		if strings.Contains(m, "trust_rotation_step_acts_total{") {
			t.Errorf("the restarted operator acted while suspended:\n%s", grepLines(m, "trust_rotation_step_acts_total"))
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	if out, code := cli("rotate", "--resume"); code != 0 || !strings.Contains(out, "Resumed TrustAnchorRotation "+rotationName) {
		t.Fatalf("rotate --resume: exit %d\n%s", code, out)
	}
	tar = e.waitSyncedOn(newAnchor, 6*time.Minute)
	if c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionSuspended); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonResumed {
		t.Errorf("Suspended = %+v after the resume, want False, Resumed", c)
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
		t.Fatalf("mTLS violations: %v", err)
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
