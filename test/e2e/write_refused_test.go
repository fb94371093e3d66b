package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestRefusedRestartInStatus runs the operator under Automatic restarts without the right to
// patch workloads — the verb removed from the chart's ClusterRole, so the real apiserver's RBAC
// refuses the patch — and checks that the Forbidden error is in the TrustAnchorRotation's status
// (what `kubectl get tar` prints) and in `linkerd trust inspect` as soon as a reconcile met it;
// given the right back, the failure clears and the rotation completes, the oracle watching.
func TestRefusedRestartInStatus(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 1, Deployments: 2, Replicas: 1, ChartSet: automationValues}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	t.Cleanup(func() { e.restoreDefaults(c) })
	since := time.Now()

	role := "trust-rotation-operator-restart"
	setPatchVerb(t, e, role, false)
	restored := false
	defer func() {
		if !restored {
			setPatchVerb(t, e, role, true)
		}
	}()

	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	tar, err := WaitRotation(ctx, e.TARs, rotationName, 4*time.Minute, "the refused restart in the status",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			f := tar.Status.ActFailure
			return f != nil && f.Reason == "Forbidden"
		})
	if err != nil {
		t.Fatal(err)
	}
	st := tar.Status
	t.Logf("blocking message: %s", st.BlockingMessage)
	for _, part := range []string{"step " + st.ActFailure.Step, "(Forbidden)", "patching ", "/Deployment/", "cannot patch resource \"deployments\""} {
		if !strings.Contains(st.BlockingMessage, part) {
			t.Errorf("blocking message %q lacks %q", st.BlockingMessage, part)
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionActFailed); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Forbidden" {
		t.Errorf("ActFailed = %+v, want True, Forbidden", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonActFailed {
		t.Errorf("Ready = %+v, want False, ActFailed", c)
	}

	// `kubectl get tar` prints the CRD's printer columns, which the apiserver renders as a Table.
	blocking := tableColumn(t, e, "Blocking")
	if !strings.Contains(blocking, "Forbidden") || !strings.Contains(blocking, "cannot patch") {
		t.Errorf("kubectl get tar's Blocking column %q lacks the Forbidden error", blocking)
	}
	// linkerd trust inspect, as a user runs it.
	out, err := exec.CommandContext(ctx, Binary(t, "linkerd-trust"), "inspect", "--kubeconfig", c.Kubeconfig()).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Forbidden") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for _, part := range []string{"ActFailed=True Forbidden", "cannot patch resource \"deployments\""} {
		if !strings.Contains(string(out), part) {
			t.Errorf("inspect's output lacks %q:\n%s", part, out)
		}
	}

	// A failure that lasts longer than spec.stalledAfter is Stalled, with the apiserver's reason:
	// what kubectl wait --for=condition=Stalled and Argo CD's health check read.
	if err := e.patchSpec(ctx, `{"spec":{"stalledAfter":{"default":"5s"}}}`); err != nil {
		t.Fatal(err)
	}
	tar, err = WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "Stalled on the refused act",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionStalled)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "Forbidden"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stalled: %s", meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionStalled).Message)

	// The right given back: the next act succeeds, the failure clears, the rotation completes.
	setPatchVerb(t, e, role, true)
	restored = true
	if _, err := WaitRotation(ctx, e.TARs, rotationName, 3*time.Minute, "the act failure cleared",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionActFailed)
			return tar.Status.ActFailure == nil && c != nil && c.Status == metav1.ConditionFalse
		}); err != nil {
		t.Fatal(err)
	}
	e.waitSyncedOn(newAnchor, 6*time.Minute)
	if err := e.Mesh.Oracle().CheckNoViolationsSince(since); err != nil {
		t.Fatalf("mTLS violations: %v", err)
	}
}

// setPatchVerb gives the operator's restart ClusterRole the patch verb on workloads, or takes it
// away, and waits until the apiserver's authorizer says so for the operator's ServiceAccount.
func setPatchVerb(t *testing.T, e *Env, name string, allowed bool) {
	t.Helper()
	roles := e.Cluster.Kube().RbacV1().ClusterRoles()
	role, err := roles.Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range role.Rules {
		if !slices.Contains(r.Resources, "deployments") {
			continue
		}
		verbs := slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "patch" })
		if allowed {
			verbs = append(verbs, "patch")
		}
		role.Rules[i].Verbs = verbs
	}
	if _, err := roles.Update(e.Ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rel := e.Release
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + rel.Namespace, "system:authenticated"}
	ns := e.Apps[0].Namespace
	if err := poll.Until(e.Ctx, time.Minute, fmt.Sprintf("patch on deployments allowed=%t", allowed), func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: rel.User, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: "apps", Resource: "deployments", Verb: "patch"}}}
		res, err := e.Cluster.Kube().AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		if res.Status.Allowed != allowed {
			return false, poll.Pending("allowed %t", res.Status.Allowed)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// tableColumn returns the named column of the TrustAnchorRotation as `kubectl get tar` prints
// it: the apiserver's Table rendering of the CRD's printer columns, which kubectl requests.
func tableColumn(t *testing.T, e *Env, column string) string {
	t.Helper()
	raw, err := e.Cluster.Kube().CoreV1().RESTClient().Get().AbsPath("/apis/trust.linkerd.io/v1alpha1/trustanchorrotations", rotationName).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	for i, col := range table.ColumnDefinitions {
		if col.Name == column && len(table.Rows) == 1 && i < len(table.Rows[0].Cells) {
			return fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	t.Fatalf("no column %q in %s", column, raw)
	return ""
}
