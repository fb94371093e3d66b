package cli

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// suspendFieldManager is the field manager of the CLI's spec.suspend patches.
const suspendFieldManager = "linkerd-trust"

// RotationSuspender sets a TrustAnchorRotation's spec.suspend; *client.Client is one.
type RotationSuspender interface {
	SetSuspend(ctx context.Context, name string, suspend bool, fieldManager string) (*v1alpha1.TrustAnchorRotation, error)
}

// setSuspend is `rotate --suspend` and `rotate --resume`: it patches spec.suspend alone, runs
// no check and renews nothing.
func setSuspend(ctx context.Context, env *Env, cl *Clients, name string, suspend bool) error {
	s, ok := cl.Rotations.(RotationSuspender)
	if !ok {
		return fmt.Errorf("cannot change TrustAnchorRotation %s: this client only reads", name)
	}
	tar, err := s.SetSuspend(ctx, name, suspend, suspendFieldManager)
	if err != nil {
		return fmt.Errorf("setting spec.suspend=%t on TrustAnchorRotation %s: %w", suspend, name, err)
	}
	step := "none yet"
	if tar.Status.Checkpoint != nil {
		step = tar.Status.Checkpoint.Step
	}
	phase := orDefault(string(tar.Status.Phase), string(v1alpha1.PhaseSynced))
	if suspend {
		fmt.Fprintf(env.Out, "Suspended TrustAnchorRotation %s (phase %s, step %s): the operator keeps observing and reporting, and acts on nothing until resumed.\nSee what it would do next with: %s plan\nResume with: %s rotate --resume\n", name, phase, step, binary, binary)
		return nil
	}
	fmt.Fprintf(env.Out, "Resumed TrustAnchorRotation %s (phase %s, step %s): the operator acts again.\nFollow it with: %s inspect --watch\n", name, phase, step, binary)
	return nil
}

// suspendedNote is plan's note for a suspended TrustAnchorRotation: that the operator runs none
// of the acts below, and what it reports it would do next.
func suspendedNote(tar *v1alpha1.TrustAnchorRotation) (string, bool) {
	if !tar.Spec.Suspend {
		return "", false
	}
	note := fmt.Sprintf("SUSPENDED: TrustAnchorRotation %s has spec.suspend set: the operator acts on nothing below until resumed (%s rotate --resume); the step marked > is what it would do next", tar.Name, binary)
	if c := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionSuspended); c != nil && c.Status == metav1.ConditionTrue {
		note += "; the operator reports: " + c.Message
	}
	return note, true
}
