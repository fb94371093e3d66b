package charts

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The deadline alerts warn at 30 days and page at 7 by default, with thresholds and severities
// from the values, and go with their rule group; the spec-invalid alert is among the defaults; the dashboard shows the deadline and the past
// rotations.
func TestDeadlineAlertsAndPanels(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	h := helms(t)[0]
	for _, tc := range []struct {
		name  string
		set   []string
		wants []string
		lacks []string
	}{{
		name: "defaults",
		wants: []string{"TrustRotationDeadlineApproaching", "TrustRotationDeadlineImminent",
			`max(trust_rotation_next_rotation_deadline_timestamp_seconds{namespace=\"linkerd\"}) - time() \u003c 720 * 3600`,
			`max(trust_rotation_next_rotation_deadline_timestamp_seconds{namespace=\"linkerd\"}) - time() \u003c 168 * 3600`,
			`"severity":"warning"`, `"severity":"critical"`,
			"TrustRotationRestartDeadlinePassed", `max(trust_rotation_restart_deadline_timestamp_seconds{namespace=\"linkerd\"}) - time() \u003c 0`,
			"TrustRotationSpecInvalid", `max by (name) (trust_rotation_spec_invalid{namespace=\"linkerd\"}) == 1`},
	}, {
		name:  "configured",
		set:   []string{"metrics.prometheusRule.deadline.warningWithinHours=1000", "metrics.prometheusRule.deadline.criticalWithinHours=48", "metrics.prometheusRule.deadline.criticalSeverity=page"},
		wants: []string{`deadline_timestamp_seconds{namespace=\"linkerd\"}) - time() \u003c 1000 * 3600`, `deadline_timestamp_seconds{namespace=\"linkerd\"}) - time() \u003c 48 * 3600`, `"severity":"page"`},
		lacks: []string{`deadline_timestamp_seconds{namespace=\"linkerd\"}) - time() \u003c 720 * 3600`},
	}, {
		name:  "disabled",
		set:   []string{"metrics.prometheusRule.deadline.enabled=false"},
		lacks: []string{"trust-rotation-deadline", "TrustRotationDeadline", "TrustRotationRestartDeadlinePassed"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.Template(ctx, OperatorChart, OperatorChart, "linkerd", append(append([]string{}, allFeatures...), tc.set...)...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			rule := Find(objs, "PrometheusRule", "trust-rotation-operator")
			if rule == nil {
				t.Fatal("no PrometheusRule")
			}
			text, _ := json.Marshal(rule.Object)
			for _, want := range tc.wants {
				if !strings.Contains(string(text), want) {
					t.Errorf("PrometheusRule lacks %s", want)
				}
			}
			for _, lack := range tc.lacks {
				if strings.Contains(string(text), lack) {
					t.Errorf("PrometheusRule has %s", lack)
				}
			}
			if tc.name != "defaults" {
				return
			}
			cm := toTyped[corev1.ConfigMap](t, Find(objs, "ConfigMap", "trust-rotation-operator-dashboard"))
			dash := cm.Data["linkerd-trust-rotation.json"]
			for _, want := range []string{"trust_rotation_next_rotation_deadline_timestamp_seconds", "trust_rotation_last_rotation_duration_seconds"} {
				if !strings.Contains(dash, want) {
					t.Errorf("dashboard has no panel on %s", want)
				}
			}
		})
	}
}
