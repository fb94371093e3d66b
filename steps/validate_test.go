package steps

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// ValidateSpec names each field the schema cannot judge, and refuses what an older CRD let in
// past the bounds the CRD now has.
func TestValidateSpecNamesTheField(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	cases := map[string]struct {
		spec  v1alpha1.TrustAnchorRotationSpec
		field string
	}{
		"unknown time zone": {v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{MaintenanceWindows: []v1alpha1.MaintenanceWindow{
			{Start: "01:00", End: "02:00", TimeZone: "Europe/Paris"}, {Start: "01:00", End: "02:00", TimeZone: "Mars/Olympus"}}}},
			"spec.dataPlaneRestart.maintenanceWindows[1].timeZone"},
		"the operator's own zone": {v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{MaintenanceWindows: []v1alpha1.MaintenanceWindow{
			{Start: "01:00", End: "02:00", TimeZone: "Local"}}}}, "spec.dataPlaneRestart.maintenanceWindows[0].timeZone"},
		"bad clock": {v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{MaintenanceWindows: []v1alpha1.MaintenanceWindow{
			{Start: "25:00", End: "02:00"}}}}, "spec.dataPlaneRestart.maintenanceWindows[0].start"},
		"bad day": {v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{MaintenanceWindows: []v1alpha1.MaintenanceWindow{
			{Start: "01:00", End: "02:00", Days: []v1alpha1.Weekday{"Mon", "Funday"}}}}}, "spec.dataPlaneRestart.maintenanceWindows[0].days[1]"},
		"selector that does not parse": {v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}}}, "spec.dataPlaneRestart.namespaceSelector"},
		"churn over a year":   {v1alpha1.TrustAnchorRotationSpec{NaturalChurnPeriod: d("8761h")}, "spec.naturalChurnPeriod"},
		"margin over ten":     {v1alpha1.TrustAnchorRotationSpec{RotationDeadlineMargin: d("87601h")}, "spec.rotationDeadlineMargin"},
		"expected over year":  {v1alpha1.TrustAnchorRotationSpec{ExpectedRotationDuration: d("8761h")}, "spec.expectedRotationDuration"},
		"refresh under 10s":   {v1alpha1.TrustAnchorRotationSpec{WorkloadCertificateRefreshInterval: d("9s")}, "spec.workloadCertificateRefreshInterval"},
		"refresh over a day":  {v1alpha1.TrustAnchorRotationSpec{WorkloadCertificateRefreshInterval: d("25h")}, "spec.workloadCertificateRefreshInterval"},
		"stalled under 1s":    {v1alpha1.TrustAnchorRotationSpec{StalledAfter: v1alpha1.StalledAfter{Default: d("0s")}}, "spec.stalledAfter.default"},
		"stalled over a year": {v1alpha1.TrustAnchorRotationSpec{StalledAfter: v1alpha1.StalledAfter{IdentityIssuerRenewal: d("8761h")}}, "spec.stalledAfter.identityIssuerRenewal"},
		"restarts over bound": {v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{MaxConcurrent: 10001}}, "spec.dataPlaneRestart.maxConcurrent"},
	}
	for name, c := range cases {
		errs := ValidateSpec(c.spec)
		if len(errs) != 1 || errs[0].Field != c.field {
			t.Errorf("%s: errors %v, want one on %s", name, errs, c.field)
		}
	}
	good := v1alpha1.TrustAnchorRotationSpec{
		WorkloadCertificateRefreshInterval: d("5m"), NaturalChurnPeriod: d("8760h"), ExpectedRotationDuration: d("72h"),
		RotationDeadlineMargin: d("87600h"), StalledAfter: v1alpha1.StalledAfter{Default: d("1h"), IdentityIssuerRenewal: d("24h")},
		DataPlaneRestart: v1alpha1.DataPlaneRestart{MaxConcurrent: 5, MaxConcurrentPerNamespace: 1,
			NamespaceSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Sat"}, Start: "22:00", End: "02:00", TimeZone: "America/New_York"}, {Start: "01:00", End: "02:00"}}},
	}
	if errs := ValidateSpec(good); len(errs) != 0 {
		t.Errorf("a valid spec: %v", errs)
	}
}

// A spec the operator cannot use holds every act and says so while Synced: SpecInvalid=True
// naming the field, the blocking message, Ready False and Stalled True with reason SpecInvalid.
// Fixed, SpecInvalid turns False and Ready comes back.
func TestProjectSpecInvalid(t *testing.T) {
	p := newPKI(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const gen = 7
	spec := v1alpha1.TrustAnchorRotationSpec{DataPlaneRestart: v1alpha1.DataPlaneRestart{MaintenanceWindows: []v1alpha1.MaintenanceWindow{
		{Start: "01:00", End: "02:00", TimeZone: "Mars/Olympus"}}}}
	s := rotatingState(p)
	s.Spec, s.SpecErrors = spec, ValidateSpec(spec)
	synced := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepDetectAnchorRotation}, Phase: string(v1alpha1.PhaseSynced),
		Decision: workflow.Decision{Outcome: workflow.Wait, Reason: "NoRotation"}}
	st := Project(rotationSteps, v1alpha1.TrustAnchorRotationStatus{}, spec, gen, s, synced, now)
	field := `spec.dataPlaneRestart.maintenanceWindows[0].timeZone: Invalid value: "Mars/Olympus"`
	checkCondition(t, st, v1alpha1.ConditionSpecInvalid, gen, want{metav1.ConditionTrue, v1alpha1.ReasonSpecInvalid, field})
	checkCondition(t, st, v1alpha1.ConditionReady, gen, want{metav1.ConditionFalse, v1alpha1.ReasonSpecInvalid, field})
	checkCondition(t, st, v1alpha1.ConditionStalled, gen, want{metav1.ConditionTrue, v1alpha1.ReasonSpecInvalid, field})
	if !strings.HasPrefix(st.BlockingMessage, "spec is invalid: "+field) || !strings.Contains(st.BlockingMessage, "acts on nothing") {
		t.Errorf("blocking message %q", st.BlockingMessage)
	}
	if st.ObservedGeneration != gen {
		t.Errorf("observedGeneration %d, want %d: the operator observed the spec it refuses", st.ObservedGeneration, gen)
	}

	// Held mid-rotation, the message says what the operator would do.
	held := workflow.Result{Checkpoint: workflow.Checkpoint{Step: StepPropagateTrustRoots}, Phase: string(v1alpha1.PhasePropagatingTrustRoots), Held: true,
		Decision: workflow.ActNeeded(ReasonRestartingWorkloads, "restarting 1 workload(s): app/Deployment/web")}
	mid := Project(rotationSteps, st, spec, gen, s, held, now)
	if !strings.Contains(mid.BlockingMessage, "next: step propagate-trust-roots would act") {
		t.Errorf("held blocking message %q", mid.BlockingMessage)
	}

	spec.DataPlaneRestart.MaintenanceWindows[0].TimeZone = "Europe/Paris"
	s.Spec, s.SpecErrors = spec, ValidateSpec(spec)
	fixed := Project(rotationSteps, st, spec, gen+1, s, synced, now)
	checkCondition(t, fixed, v1alpha1.ConditionSpecInvalid, gen+1, want{metav1.ConditionFalse, v1alpha1.ReasonSpecValid, ""})
	if strings.Contains(fixed.BlockingMessage, "spec is invalid") {
		t.Errorf("fixed, the blocking message still says %q", fixed.BlockingMessage)
	}
}
