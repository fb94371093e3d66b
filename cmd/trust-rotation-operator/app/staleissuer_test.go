package app

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// TestStaleIssuerEventOncePerIssuer: the IdentityIssuerStale Event is emitted when the condition
// turns True and when it names another stale issuer, not when only its counts change; read from
// the conditions, so a new leader does not repeat it.
func TestStaleIssuerEventOncePerIssuer(t *testing.T) {
	cond := func(status metav1.ConditionStatus, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionIdentityIssuerStale, Status: status, Message: msg}}
	}
	a1 := "linkerd-identity still signs workload certificates with issuer aaaaaaaaaaaa (expires x), not with issuer cccccccccccc ...: 1 pod(s)"
	a2 := "linkerd-identity still signs workload certificates with issuer aaaaaaaaaaaa (expires x), not with issuer cccccccccccc ...: 5 pod(s)"
	b := "linkerd-identity still signs workload certificates with issuer bbbbbbbbbbbb (expires x), not with issuer cccccccccccc ...: 1 pod(s)"
	cases := []struct {
		name          string
		before, after []metav1.Condition
		want          string
	}{
		{"turned True", cond(metav1.ConditionFalse, v1alpha1.MessageIdentityIssuerCurrent), cond(metav1.ConditionTrue, a1), a1},
		{"first status", nil, cond(metav1.ConditionTrue, a1), a1},
		{"more pods, same issuer", cond(metav1.ConditionTrue, a1), cond(metav1.ConditionTrue, a2), ""},
		{"another stale issuer", cond(metav1.ConditionTrue, a1), cond(metav1.ConditionTrue, b), b},
		{"cleared", cond(metav1.ConditionTrue, a1), cond(metav1.ConditionFalse, v1alpha1.MessageIdentityIssuerCurrent), ""},
		{"still False", cond(metav1.ConditionFalse, v1alpha1.MessageIdentityIssuerCurrent), cond(metav1.ConditionFalse, v1alpha1.MessageIdentityIssuerCurrent), ""},
	}
	for _, tc := range cases {
		if got := staleIssuerTurned(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: Event %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestStaleIssuerRestartEvent: the act of a restart off a stale issuer is recorded under its own
// reason, not as any step's act.
func TestStaleIssuerRestartEvent(t *testing.T) {
	if got := actReason(v1alpha1.ReasonIdentityIssuerStale); got != ReasonIdentityRestartedForStaleIssuer {
		t.Errorf("Event reason of the restart: %s, want %s", got, ReasonIdentityRestartedForStaleIssuer)
	}
}
