package cli

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// RotationTakeover sets a TrustAnchorRotation's spec.takeover; *client.Client is one.
type RotationTakeover interface {
	SetTakeover(ctx context.Context, name string, takeover bool, fieldManager string) (*v1alpha1.TrustAnchorRotation, error)
}

func takeoverCommand(env *Env) *command {
	fs := newFlagSet("takeover")
	kf := addKubeFlags(fs)
	pf := addProbeFlags(fs)
	var yes, dryRun, cancel bool
	fs.BoolVarP(&yes, "yes", "y", false, "request the takeover without asking, even on a terminal (the plan is not printed)")
	fs.BoolVar(&dryRun, "dry-run", false, "print what was found and the plan of the takeover, then stop: nothing is changed")
	fs.BoolVar(&cancel, "cancel", false, "clear spec.takeover: a takeover that has not written the previous anchor yet does not start")
	c := &command{
		name:  "takeover",
		short: "Move a mesh on Linkerd's hand-made certificates onto cert-manager's anchor",
		long: `Move a mesh whose anchor and issuer were made by hand and handed to Linkerd's chart onto
cert-manager's trust anchor: a rotation from the hand-made anchor, your helm upgrades its waits.
Refuses when there is nothing to take over or the hand-made certificates expire too soon; prints
the plan on a terminal (--dry-run: prints it and stops), then sets spec.takeover, nothing else.`,
		example: `  # What a takeover would do, changing nothing
  linkerd trust takeover --dry-run

  # Request it, then follow it
  linkerd trust takeover
  linkerd trust inspect --watch`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("takeover takes no arguments, got %q", args)
		}
		if err := kf.validate(); err != nil {
			return err
		}
		if err := pf.validate(); err != nil {
			return err
		}
		if cancel && (yes || dryRun) || yes && dryRun {
			return usagef("--cancel, --yes and --dry-run are exclusive")
		}
		cl, err := env.clients(kf)
		if err != nil {
			return err
		}
		if cancel {
			return setTakeover(ctx, env, cl, kf.RotationName, false)
		}
		return takeover(ctx, env, cl, kf, pf, dryRun || !yes && env.inIsTerminal(), !dryRun)
	}
	return c
}

// takeover checks that there is a mesh to take over, prints the plan when preview, and sets
// spec.takeover when request (after asking, on a terminal).
func takeover(ctx context.Context, env *Env, cl *Clients, kf *KubeFlags, pf *probeFlags, preview, request bool) error {
	tar, err := cl.Rotations.Get(ctx, kf.RotationName)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("TrustAnchorRotation %s not found: install the operator first (its chart creates it); nothing was changed", kf.RotationName)
	case err != nil:
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", kf.RotationName, err)
	}
	reading, err := observe.Read(ctx, cl.pkiReader(kf.Config), &tar.Status, env.now())
	if err != nil {
		return err
	}
	s := reading.State
	s.Spec = tar.Spec
	s.Spec.Takeover = true
	hand := s.TakeoverAnchors()
	if len(hand) == 0 {
		return fmt.Errorf("nothing to take over: %s; nothing was changed", noTakeoverReason(s))
	}
	if d := steps.TakeoverGate(s); d != nil && d.Reason == steps.ReasonTakeoverTooLate {
		return fmt.Errorf("%s; nothing was changed", d.Message)
	}
	fmt.Fprintf(env.Out, "The mesh trusts %s, made by hand, and not cert-manager's trust anchor %s.\n",
		describeCertsFound(hand, env), steps.ShortFingerprint(s.Anchor.Fingerprint()))
	if preview {
		p, err := buildPlan(ctx, env, cl, kf, pf, planOptions{takeover: true})
		if err != nil {
			return err
		}
		if err := renderPlan(env.Out, p, "table"); err != nil {
			return err
		}
	}
	if !request {
		return nil
	}
	if tar.Spec.Takeover {
		fmt.Fprintf(env.Out, "TrustAnchorRotation %s already has spec.takeover set.\n", kf.RotationName)
		return takeoverNext(env, s)
	}
	if preview && !confirmed(env, fmt.Sprintf("Set spec.takeover on TrustAnchorRotation %s and let the operator take the mesh over? [y/N] ", kf.RotationName)) {
		fmt.Fprintln(env.Out, "Not taking over: not confirmed. Nothing was changed.")
		return nil
	}
	if err := setTakeover(ctx, env, cl, kf.RotationName, true); err != nil {
		return err
	}
	return takeoverNext(env, s)
}

// takeoverNext says what the user does next: the moves that let the takeover start, if any.
func takeoverNext(env *Env, s *steps.State) error {
	if d := steps.TakeoverGate(s); d != nil {
		fmt.Fprintf(env.Out, "Next, the takeover waits for you: %s\n", d.Message)
	}
	fmt.Fprintf(env.Out, "Follow it with: %s inspect --watch\n", binary)
	return nil
}

// noTakeoverReason says why a mesh has nothing to take over.
func noTakeoverReason(s *steps.State) string {
	cfg := s.Config
	switch {
	case !s.Anchor.Usable():
		return s.Anchor.Problem("trust anchor Secret")
	case s.Previous.Found:
		return fmt.Sprintf("the operator already records a previous anchor (Secret %s): a rotation, not a takeover, moves this mesh", s.Previous.Ref())
	case !s.Bundle.Found:
		return fmt.Sprintf("ConfigMap %s/%s does not exist", cfg.LinkerdNamespace, cfg.TrustRootsConfigMap)
	}
	return fmt.Sprintf("ConfigMap %s/%s trusts cert-manager's trust anchor %s alone, or was not rendered by Linkerd's chart (identity runs with %s%s)",
		cfg.LinkerdNamespace, cfg.TrustRootsConfigMap, steps.ShortFingerprint(s.Anchor.Fingerprint()), steps.IdentitySchemeArg, orDefault(s.IdentityScheme(), "unknown"))
}

func describeCertsFound(certs []*x509.Certificate, env *Env) string {
	parts := make([]string, len(certs))
	for i, c := range certs {
		parts[i] = describeAnchor(c, env.now())
	}
	if len(parts) == 1 {
		return "anchor " + parts[0]
	}
	return "anchors " + strings.Join(parts, "; ")
}

// setTakeover patches spec.takeover alone.
func setTakeover(ctx context.Context, env *Env, cl *Clients, name string, takeover bool) error {
	t, ok := cl.Rotations.(RotationTakeover)
	if !ok {
		return fmt.Errorf("cannot change TrustAnchorRotation %s: this client only reads", name)
	}
	if _, err := t.SetTakeover(ctx, name, takeover, suspendFieldManager); err != nil {
		return fmt.Errorf("setting spec.takeover=%t on TrustAnchorRotation %s: %w", takeover, name, err)
	}
	if takeover {
		fmt.Fprintf(env.Out, "Set spec.takeover on TrustAnchorRotation %s: the operator moves the mesh onto cert-manager's trust anchor, waiting for you where the plan says.\n", name)
	} else {
		fmt.Fprintf(env.Out, "Cleared spec.takeover on TrustAnchorRotation %s: a takeover that has not started does not start.\n", name)
	}
	return nil
}
