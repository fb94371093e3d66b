package cli

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// wait is done once a fresh Lease has a holder and the TrustAnchorRotation is Ready for its
// generation; otherwise it gives up at --timeout, exit 1, naming what it waited for.
func TestWait(t *testing.T) {
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced, Message: "nothing to do"}
	for name, tc := range map[string]struct {
		setup    func(f *fixture)
		wantCode int
		want     string
	}{
		"ready": {setup: func(f *fixture) {
			f.rotations["cluster"].Status.Conditions = append(f.rotations["cluster"].Status.Conditions, ready)
		}, want: "TrustAnchorRotation cluster is Ready (nothing to do), operator operator-0_1 leads"},
		"no holder": {setup: func(f *fixture) {
			f.replace(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: DefaultOperatorLease}})
		}, wantCode: 1, want: "Lease linkerd/trust-rotation-operator has no holder"},
		"stale lease": {setup: func(f *fixture) {
			f.replace(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: DefaultOperatorLease},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("operator-0_1"), LeaseDurationSeconds: ptr.To[int32](15),
					RenewTime: &metav1.MicroTime{Time: testNow.Add(-time.Minute)}}})
		}, wantCode: 1, want: "held by operator-0_1, which has not renewed it"},
		"not observed": {setup: func(f *fixture) {
			f.rotations["cluster"].Generation = 2
			f.rotations["cluster"].Status.Conditions = append(f.rotations["cluster"].Status.Conditions, ready)
		}, wantCode: 1, want: "has not observed generation 2"},
		"bootstrapping": {setup: func(f *fixture) {
			f.rotations["cluster"].Status.Conditions = append(f.rotations["cluster"].Status.Conditions,
				metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Bootstrapping", Message: "creating the trust roots"})
		}, wantCode: 1, want: "is not Ready: Bootstrapping: creating the trust roots"},
		"rotating": {setup: func(f *fixture) {
			f.rotations["cluster"].Status.Phase = v1alpha1.PhasePropagatingTrustRoots
			f.rotations["cluster"].Status.BlockingMessage = "Waiting for 1 pod(s)"
		}, want: "is rotating (phase PropagatingTrustRoots)"},
		"stalled": {setup: func(f *fixture) {
			f.rotations["cluster"].Status.Phase = v1alpha1.PhasePropagatingTrustRoots
			f.rotations["cluster"].Status.Conditions = append(f.rotations["cluster"].Status.Conditions,
				metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "WaitingForRestarts", Message: "Waiting for 1 pod(s)"})
		}, wantCode: 1, want: "is Stalled in phase PropagatingTrustRoots"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.replace(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: DefaultOperatorLease},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("operator-0_1"), LeaseDurationSeconds: ptr.To[int32](15),
					AcquireTime: &metav1.MicroTime{Time: testNow.Add(-time.Minute)}, RenewTime: &metav1.MicroTime{Time: testNow.Add(-5 * time.Second)}}})
			tc.setup(f)
			out, errOut, code := f.run("wait", "--timeout=10ms")
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			got := out
			if code != 0 {
				got = errOut
				if !strings.HasPrefix(errOut, "Error: gave up after 10ms: ") {
					t.Errorf("stderr %q does not say it gave up", errOut)
				}
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("output does not say %q:\nstdout:\n%s\nstderr:\n%s", tc.want, out, errOut)
			}
		})
	}
}
