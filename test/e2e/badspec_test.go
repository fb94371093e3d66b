package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// TestBadSpec edits the TrustAnchorRotation as a user would by hand or through GitOps, with
// values the operator cannot use, on the real apiserver, the operator running under the chart's
// ServiceAccount:
//   - what the schema can judge is refused at admission, the field named;
//   - an unknown time zone, which the schema cannot judge, is reported within seconds while
//     Synced (SpecInvalid, Ready False, an Event, the metric, `linkerd trust check`), with
//     nothing written; `linkerd trust rotate` refuses, naming it; the operator is Ready again
//     once it is fixed;
//   - a value Go cannot hold, stored under an older CRD (the test loosens the CRD to store it),
//     on another TrustAnchorRotation, blinds the operator to nothing: `cluster`'s
//     observedGeneration follows its edits, and the bad object is reported; on `cluster` itself,
//     it is reported as the time zone is.
func TestBadSpec(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 1, Deployments: 1, Replicas: 1}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	t.Cleanup(func() { e.restoreDefaults(c) })
	if _, err := WaitRotation(ctx, e.TARs, rotationName, 2*time.Minute, "Ready", ready(true)); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	tars := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource))

	t.Run("RefusedAtAdmission", func(t *testing.T) {
		cases := []struct{ patch, field string }{
			{`{"naturalChurnPeriod":"9999999999999h"}`, "spec.naturalChurnPeriod"},
			{`{"expectedRotationDuration":"99999999999999m"}`, "spec.expectedRotationDuration"},
			{`{"rotationDeadlineMargin":"9999999999999h"}`, "spec.rotationDeadlineMargin"},
			{`{"rotationDeadlineMargin":"87601h"}`, "spec.rotationDeadlineMargin"},
			{`{"naturalChurnPeriod":"8761h"}`, "spec.naturalChurnPeriod"},
			{`{"workloadCertificateRefreshInterval":"25h"}`, "spec.workloadCertificateRefreshInterval"},
			{`{"stalledAfter":{"default":"9999999999999h"}}`, "spec.stalledAfter.default"},
			{`{"stalledAfter":{"identityIssuerRenewal":"8761h"}}`, "spec.stalledAfter.identityIssuerRenewal"},
			{`{"dataPlaneRestart":{"maxConcurrent":99999999999}}`, "spec.dataPlaneRestart.maxConcurrent"},
			{`{"dataPlaneRestart":{"maxConcurrentPerNamespace":10001}}`, "spec.dataPlaneRestart.maxConcurrentPerNamespace"},
		}
		for _, tc := range cases {
			_, err := tars.Patch(ctx, rotationName, types.MergePatchType, []byte(`{"spec":`+tc.patch+`}`), metav1.PatchOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("spec %s: error %v, want Invalid naming %s", tc.patch, err, tc.field)
				continue
			}
			t.Logf("refused: %v", err)
		}
	})

	// What must stay as it was while the spec is invalid: the operator writes nothing.
	bundleRV := func() string {
		cm, err := c.Kube().CoreV1().ConfigMaps("linkerd").Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.ResourceVersion
	}

	t.Run("TimeZoneReportedWhileSynced", func(t *testing.T) {
		rv := bundleRV()
		since := time.Now()
		if err := e.patchSpec(ctx, `{"spec":{"dataPlaneRestart":{"maintenanceWindows":[{"start":"01:00","end":"02:00","timeZone":"Mars/Olympus"}]}}}`); err != nil {
			t.Fatal(err)
		}
		const field = "spec.dataPlaneRestart.maintenanceWindows[0].timeZone"
		tar, err := WaitRotation(ctx, e.TARs, rotationName, 30*time.Second, "SpecInvalid on the time zone", specInvalid(field))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reported in %s: %s", time.Since(since).Round(time.Millisecond), tar.Status.BlockingMessage)
		checkInvalidReported(t, e, tar, field, since)
		out, code := trustCLI(t, ctx, c, "check")
		if code == 0 || !strings.Contains(out, "has a spec the operator can use") || !strings.Contains(out, field) {
			t.Errorf("linkerd trust check: exit %d, want a failure naming %s\n%s", code, field, out)
		}
		anchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
		if out, code := trustCLI(t, ctx, c, "rotate"); code == 0 || !strings.Contains(out, field) {
			t.Errorf("linkerd trust rotate: exit %d, want a refusal naming %s\n%s", code, field, out)
		}
		if got := e.SecretCert("cert-manager", "linkerd-trust-anchor"); !got.Equal(anchor) {
			t.Errorf("rotate renewed the trust anchor while the spec was invalid")
		}
		if got := bundleRV(); got != rv {
			t.Errorf("the trust bundle was written while the spec was invalid (resourceVersion %s -> %s)", rv, got)
		}

		if err := e.patchSpec(ctx, `{"spec":{"dataPlaneRestart":{"maintenanceWindows":[{"start":"01:00","end":"02:00","timeZone":"Europe/Paris"}]}}}`); err != nil {
			t.Fatal(err)
		}
		tar, err = WaitRotation(ctx, e.TARs, rotationName, 30*time.Second, "Ready once fixed", ready(true))
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionSpecInvalid); c == nil || c.Status != metav1.ConditionFalse {
			t.Errorf("SpecInvalid %+v once fixed, want False", c)
		}
		if err := e.patchSpec(ctx, `{"spec":{"dataPlaneRestart":{"maintenanceWindows":null}}}`); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("StoredUnderAnOlderCRD", func(t *testing.T) {
		restore := loosenCRD(t, ctx, dyn, "naturalChurnPeriod", "expectedRotationDuration")
		defer restore()
		other := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
			"metadata": map[string]any{"name": "other"},
			"spec":     map[string]any{"naturalChurnPeriod": "9999999999999h"},
		}}
		if _, err := tars.Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating TrustAnchorRotation other under the loosened CRD: %v", err)
		}
		defer func() {
			if err := tars.Delete(context.Background(), "other", metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting TrustAnchorRotation other: %v", err)
			}
		}()
		since := time.Now()
		// The other object is reported, and `cluster` is still followed: its observedGeneration
		// keeps up with an edit made while the other one is there.
		if _, err := WaitRotation(ctx, e.TARs, "other", 30*time.Second, "other reported", func(tar *v1alpha1.TrustAnchorRotation) bool {
			return meta.IsStatusConditionTrue(tar.Status.Conditions, v1alpha1.ConditionIgnored) && specInvalid("spec.naturalChurnPeriod")(tar)
		}); err != nil {
			t.Fatal(err)
		}
		if err := e.patchSpec(ctx, `{"spec":{"stalledAfter":{"default":"2h"}}}`); err != nil {
			t.Fatal(err)
		}
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 30*time.Second, "cluster observed beside the bad object", func(tar *v1alpha1.TrustAnchorRotation) bool {
			return tar.Status.ObservedGeneration == tar.Generation && ready(true)(tar)
		}); err != nil {
			t.Fatal(err)
		}
		if err := poll.Until(ctx, 30*time.Second, "trust_rotation_spec_invalid of other", func(ctx context.Context) (bool, error) {
			m, err := e.Operator.Metrics(ctx)
			if err != nil {
				return false, poll.Pending("%v", err)
			}
			if !strings.Contains(m, `trust_rotation_spec_invalid{name="other"} 1`) || !strings.Contains(m, `trust_rotation_spec_invalid{name="cluster"} 0`) {
				return false, poll.Pending("metrics:\n%s", grepLines(m, "trust_rotation_spec_invalid"))
			}
			// The bad object never failed a list or a watch of the TrustAnchorRotations.
			if line := `trust_rotation_watch_errors_total{watch="trust-anchor-rotations"} 0`; !strings.Contains(m, line) {
				t.Errorf("metrics lack %s:\n%s", line, grepLines(m, "trust_rotation_watch_errors_total"))
			}
			return true, nil
		}); err != nil {
			t.Error(err)
		}

		// The same kind of value on `cluster` itself: reported, observed, nothing written.
		rv := bundleRV()
		since = time.Now()
		if err := e.patchSpec(ctx, `{"spec":{"expectedRotationDuration":"99999999999999m"}}`); err != nil {
			t.Fatal(err)
		}
		const field = "spec.expectedRotationDuration"
		tar, err := WaitRotation(ctx, e.TARs, rotationName, 30*time.Second, "SpecInvalid on the duration", specInvalid(field))
		if err != nil {
			t.Fatal(err)
		}
		checkInvalidReported(t, e, tar, field, since)
		if errs := client.DecodeErrors(tar); len(errs) != 1 || errs[0].Field != field {
			t.Errorf("the client's decode errors %v, want one on %s", errs, field)
		}
		if got := bundleRV(); got != rv {
			t.Errorf("the trust bundle was written while the spec was invalid (resourceVersion %s -> %s)", rv, got)
		}
		if err := e.patchSpec(ctx, `{"spec":{"expectedRotationDuration":"24h"}}`); err != nil {
			t.Fatal(err)
		}
		if _, err := WaitRotation(ctx, e.TARs, rotationName, 30*time.Second, "Ready once fixed", ready(true)); err != nil {
			t.Fatal(err)
		}
	})
	if err := e.Mesh.Oracle().CheckNoViolationsSince(time.Time{}); err != nil {
		t.Fatalf("mTLS violations: %v", err)
	}
}

// ready is a TrustAnchorRotation whose Ready condition, observed at its generation, is want.
func ready(want bool) func(*v1alpha1.TrustAnchorRotation) bool {
	return func(tar *v1alpha1.TrustAnchorRotation) bool {
		c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && (c.Status == metav1.ConditionTrue) == want && c.ObservedGeneration == tar.Generation
	}
}

// specInvalid is a TrustAnchorRotation reported SpecInvalid on field, at its generation.
func specInvalid(field string) func(*v1alpha1.TrustAnchorRotation) bool {
	return func(tar *v1alpha1.TrustAnchorRotation) bool {
		c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionSpecInvalid)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, field) && c.ObservedGeneration == tar.Generation
	}
}

// checkInvalidReported checks what a driven TrustAnchorRotation with an invalid field reports
// besides the condition: its observedGeneration, Ready and Stalled, the blocking message, the
// Warning Event and the metric.
func checkInvalidReported(t *testing.T, e *Env, tar *v1alpha1.TrustAnchorRotation, field string, since time.Time) {
	t.Helper()
	if tar.Status.ObservedGeneration != tar.Generation {
		t.Errorf("observedGeneration %d, generation %d: the operator did not observe the spec it refuses", tar.Status.ObservedGeneration, tar.Generation)
	}
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionStalled} {
		want := metav1.ConditionFalse
		if typ == v1alpha1.ConditionStalled {
			want = metav1.ConditionTrue
		}
		if c := meta.FindStatusCondition(tar.Status.Conditions, typ); c == nil || c.Status != want || c.Reason != v1alpha1.ReasonSpecInvalid {
			t.Errorf("%s = %+v, want %s, reason %s", typ, c, want, v1alpha1.ReasonSpecInvalid)
		}
	}
	if !strings.Contains(tar.Status.BlockingMessage, field) {
		t.Errorf("blocking message %q does not name %s", tar.Status.BlockingMessage, field)
	}
	e.checkEvents(since, v1alpha1.ReasonSpecInvalid)
	m, err := e.Operator.Metrics(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if line := fmt.Sprintf(`trust_rotation_spec_invalid{name=%q} 1`, tar.Name); !strings.Contains(m, line) {
		t.Errorf("metrics lack %s:\n%s", line, grepLines(m, "trust_rotation_spec_invalid"))
	}
}

// trustCLI runs linkerd-trust against the cluster and returns its output and exit code.
func trustCLI(t *testing.T, ctx context.Context, c *cluster.Cluster, args ...string) (string, int) {
	t.Helper()
	out, err := exec.CommandContext(ctx, Binary(t, "linkerd-trust"), append(args, "--kubeconfig", c.Kubeconfig())...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// loosenCRD removes the CEL rules of the named spec fields from the TrustAnchorRotation CRD, as
// an older CRD had none, so that the apiserver stores a value the current CRD refuses; the
// function it returns puts them back.
func loosenCRD(t *testing.T, ctx context.Context, dyn dynamic.Interface, fields ...string) func() {
	t.Helper()
	name := v1alpha1.Resource + "." + v1alpha1.GroupName
	crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := func(f string) string {
		return "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/" + f + "/x-kubernetes-validations"
	}
	var remove, add []map[string]any
	for _, f := range fields {
		versions, found, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if err != nil || !found || len(versions) == 0 {
			t.Fatalf("CRD %s has no versions: %v", name, err)
		}
		version := versions[0].(map[string]any)
		saved, found, err := unstructured.NestedSlice(version, "schema", "openAPIV3Schema", "properties", "spec", "properties", f, "x-kubernetes-validations")
		if err != nil || !found {
			t.Fatalf("CRD %s has no CEL rule on spec.%s: %v", name, f, err)
		}
		remove = append(remove, map[string]any{"op": "remove", "path": path(f)})
		add = append(add, map[string]any{"op": "add", "path": path(f), "value": saved})
	}
	patch := func(ops []map[string]any) error {
		body, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		_, err = dyn.Resource(crdGVR).Patch(context.Background(), name, types.JSONPatchType, body, metav1.PatchOptions{})
		return err
	}
	if err := patch(remove); err != nil {
		t.Fatalf("loosening CRD %s: %v", name, err)
	}
	// The apiserver validates with the new schema once it has rebuilt its handler for the CRD:
	// wait until a create that the old rules refuse passes a server-side dry run.
	if err := poll.Until(ctx, 30*time.Second, "the loosened CRD in effect", func(ctx context.Context) (bool, error) {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
			"metadata": map[string]any{"name": "loosened-crd-probe"},
			"spec":     map[string]any{fields[0]: "9999999999999h"},
		}}
		_, err := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource)).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := patch(add); err != nil {
			t.Errorf("restoring CRD %s: %v", name, err)
		}
	}
}
