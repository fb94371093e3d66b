package steps

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// The bounds of the spec's durations. The CRD's CEL rules (workflow/api/v1alpha1/spec.go) refuse
// what is outside them at admission; ValidateSpec refuses the same values in an object stored
// before those rules, so that both say alike what the operator can use.
const (
	MinRefreshInterval   = 10 * time.Second
	MaxRefreshInterval   = 24 * time.Hour
	MaxNaturalChurn      = 8760 * time.Hour
	MaxExpectedRotation  = 8760 * time.Hour
	MaxRotationMargin    = 87600 * time.Hour
	MinStalledAfter      = time.Second
	MaxStalledAfter      = 8760 * time.Hour
	MaxConcurrentRestart = 10000
)

// SpecErrors returns what the operator cannot use in tar's spec: the fields the client could not
// decode (client.DecodeErrors: a value stored under an older CRD) and the values the schema
// cannot check (ValidateSpec). The operator acts on nothing while there is one, and reports them
// (condition SpecInvalid); `linkerd trust check` fails on them.
func SpecErrors(tar *v1alpha1.TrustAnchorRotation) field.ErrorList {
	return append(client.DecodeErrors(tar), ValidateSpec(tar.Spec)...)
}

// ValidateSpec checks what the operator parses in the spec beyond what the apiserver checked:
// time zones (CEL cannot load one), label selectors, and the durations' bounds for an object
// admitted before the CRD bounded them. Each error names its field.
func ValidateSpec(spec v1alpha1.TrustAnchorRotationSpec) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec")
	durations := []struct {
		name     string
		d        *metav1.Duration
		min, max time.Duration
	}{
		{"workloadCertificateRefreshInterval", spec.WorkloadCertificateRefreshInterval, MinRefreshInterval, MaxRefreshInterval},
		{"naturalChurnPeriod", spec.NaturalChurnPeriod, 0, MaxNaturalChurn},
		{"expectedRotationDuration", spec.ExpectedRotationDuration, 0, MaxExpectedRotation},
		{"rotationDeadlineMargin", spec.RotationDeadlineMargin, 0, MaxRotationMargin},
		{"stalledAfter.default", spec.StalledAfter.Default, MinStalledAfter, MaxStalledAfter},
		{"stalledAfter.identityIssuerRenewal", spec.StalledAfter.IdentityIssuerRenewal, MinStalledAfter, MaxStalledAfter},
	}
	for _, f := range durations {
		if f.d == nil {
			continue
		}
		if d := f.d.Duration; d < f.min || d > f.max {
			name := strings.Split(f.name, ".")
			errs = append(errs, field.Invalid(path.Child(name[0], name[1:]...), f.d.Duration.String(),
				fmt.Sprintf("must be between %s and %s", CompactDuration(f.min), CompactDuration(f.max))))
		}
	}
	dp := path.Child("dataPlaneRestart")
	for i, mw := range spec.DataPlaneRestart.MaintenanceWindows {
		errs = append(errs, validateWindow(mw, dp.Child("maintenanceWindows").Index(i))...)
	}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"namespaceSelector", spec.DataPlaneRestart.NamespaceSelector}, {"workloadSelector", spec.DataPlaneRestart.WorkloadSelector}} {
		if sel.s == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel.s); err != nil {
			errs = append(errs, field.Invalid(dp.Child(sel.name), sel.s.String(), err.Error()))
		}
	}
	for _, n := range []struct {
		name string
		v    int32
	}{{"maxConcurrent", spec.DataPlaneRestart.MaxConcurrent}, {"maxConcurrentPerNamespace", spec.DataPlaneRestart.MaxConcurrentPerNamespace}} {
		if n.v < 0 || n.v > MaxConcurrentRestart {
			errs = append(errs, field.Invalid(dp.Child(n.name), n.v, fmt.Sprintf("must be between 1 and %d", MaxConcurrentRestart)))
		}
	}
	return errs
}

// validateWindow checks a maintenance window as windowOpen reads it.
func validateWindow(mw v1alpha1.MaintenanceWindow, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := windowZone(mw.TimeZone); err != nil {
		errs = append(errs, field.Invalid(path.Child("timeZone"), mw.TimeZone, err.Error()))
	}
	for _, f := range [][2]string{{"start", mw.Start}, {"end", mw.End}} {
		if _, err := clockMinutes(f[1]); err != nil {
			errs = append(errs, field.Invalid(path.Child(f[0]), f[1], "must be HH:MM, 24-hour clock"))
		}
	}
	for j, d := range mw.Days {
		if _, ok := weekdays[d]; !ok {
			errs = append(errs, field.NotSupported(path.Child("days").Index(j), d, []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}))
		}
	}
	return errs
}

// windowZone loads a maintenance window's time zone: UTC when empty, otherwise an IANA name
// from the zone database the binary embeds (time/tzdata). "Local" is refused: it would be the
// operator's own zone, which the user cannot see.
func windowZone(name string) (*time.Location, error) {
	switch name {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%q is not an IANA time zone name: name one, such as Europe/Paris", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: it must be an IANA time zone name, such as Europe/Paris", name)
	}
	return loc, nil
}

// SpecErrorsMessage is the one-line account of errs that the blocking message, the condition,
// the Event and `linkerd trust check` give.
func SpecErrorsMessage(errs field.ErrorList) string {
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		parts = append(parts, e.Error())
	}
	return "spec is invalid: " + strings.Join(parts, "; ")
}
