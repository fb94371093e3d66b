package cli

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// waitInterval is how often wait reads the Lease and the TrustAnchorRotation again.
const waitInterval = 2 * time.Second

func waitCommand(env *Env) *command {
	fs := newFlagSet("wait")
	k := addKubeFlags(fs)
	var operatorNamespace, lease string
	fs.StringVar(&operatorNamespace, "operator-namespace", "", "namespace of the trust-rotation operator's leader Lease (default: the Linkerd namespace)")
	fs.StringVar(&lease, "operator-lease", DefaultOperatorLease, "leader-election Lease of the trust-rotation operator (empty: an operator run without leader election; wait for the TrustAnchorRotation alone)")
	timeout := new(time.Duration)
	durationVar(fs, timeout, "timeout", 5*time.Minute, "how long to wait before giving up (exit 1)")
	c := &command{
		name:  "wait",
		short: "Wait until the operator leads and the TrustAnchorRotation is Ready",
		long: `Wait, at most --timeout, until an operator replica holds the leader Lease and the
TrustAnchorRotation is Ready for its generation; a rotation in progress that is not Stalled, or a
suspended one, counts as done. The operator chart runs it as its post-install and post-upgrade
Helm hook (value hooks.waitReady.enabled).`,
		example: `  # After installing the operator chart
  linkerd trust wait --timeout 2m`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("wait takes no arguments, got %q", args)
		}
		if err := k.validate(); err != nil {
			return err
		}
		if *timeout <= 0 {
			return usagef("--timeout must be positive")
		}
		if operatorNamespace == "" {
			operatorNamespace = k.Config.LinkerdNamespace
		}
		cl, err := env.clients(k)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		w := &waiter{env: env, cl: cl, leaseNamespace: operatorNamespace, lease: lease, rotation: k.RotationName}
		return w.run(ctx, *timeout)
	}
	return c
}

type waiter struct {
	env                   *Env
	cl                    *Clients
	leaseNamespace, lease string
	rotation              string
	// leader is the Lease holder once seen.
	leader string
	// denied is the last read's 401 or 403: no wait ends it.
	denied error
}

// deniedBy records err when the apiserver refused the read (401, 403).
func (w *waiter) deniedBy(err error) {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		w.denied = err
	}
}

// run polls until done; it prints each new reason to wait, and the outcome.
func (w *waiter) run(ctx context.Context, timeout time.Duration) error {
	tick := time.NewTicker(waitInterval)
	defer tick.Stop()
	last := ""
	for {
		w.denied = nil
		done, reason, err := w.once(ctx)
		if err != nil {
			return err
		}
		if w.denied != nil {
			// Waiting does not grant a permission: say which one is missing, at once.
			return fmt.Errorf("%s: %s needs get on Leases in namespace %s and on TrustAnchorRotations",
				reason, binary+" wait", w.leaseNamespace)
		}
		if !done && ctx.Err() != nil && last != "" {
			// A read cut short by the deadline says nothing new: report what it waited for.
			reason = last
		}
		if done {
			fmt.Fprintf(w.env.Out, "%s %s\n", w.stamp(), reason)
			return nil
		}
		if reason != last {
			fmt.Fprintf(w.env.Out, "%s waiting: %s\n", w.stamp(), reason)
			last = reason
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %s", timeout, reason)
		case <-tick.C:
		}
	}
}

func (w *waiter) stamp() string { return w.env.now().UTC().Format(time.RFC3339) }

// once reads the Lease, then the TrustAnchorRotation: done, or why not yet.
func (w *waiter) once(ctx context.Context) (bool, string, error) {
	holder := "(no leader election)"
	if w.lease != "" {
		var reason string
		if holder, reason = w.leaseHolder(ctx); reason != "" {
			return false, reason, nil
		}
	}
	return w.rotationReady(ctx, holder)
}

// leaseHolder returns the Lease's live holder, or why there is none.
func (w *waiter) leaseHolder(ctx context.Context) (string, string) {
	ref := w.leaseNamespace + "/" + w.lease
	l, err := w.cl.Kube.CoordinationV1().Leases(w.leaseNamespace).Get(ctx, w.lease, metav1.GetOptions{})
	if err != nil {
		w.deniedBy(err)
		return "", fmt.Sprintf("reading Lease %s: %v", ref, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", fmt.Sprintf("Lease %s has no holder: no operator replica leads yet", ref)
	}
	holder := *l.Spec.HolderIdentity
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil ||
		w.env.now().Sub(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
		return "", fmt.Sprintf("Lease %s is held by %s, which has not renewed it within its lease duration", ref, holder)
	}
	if w.leader != holder {
		w.leader = holder
		acquired := ""
		if l.Spec.AcquireTime != nil {
			acquired = " since " + l.Spec.AcquireTime.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w.env.Out, "%s Lease %s is held by %s%s\n", w.stamp(), ref, holder, acquired)
	}
	return holder, ""
}

// rotationReady reads the TrustAnchorRotation: done, or why not yet.
func (w *waiter) rotationReady(ctx context.Context, holder string) (bool, string, error) {
	tar, err := w.cl.Rotations.Get(ctx, w.rotation)
	if err != nil {
		w.deniedBy(err)
		return false, fmt.Sprintf("reading TrustAnchorRotation %s: %v", w.rotation, err), nil
	}
	if tar.Status.ObservedGeneration != tar.Generation {
		return false, fmt.Sprintf("TrustAnchorRotation %s: the operator has not observed generation %d yet", tar.Name, tar.Generation), nil
	}
	conds := tar.Status.Conditions
	phase := orDefault(string(tar.Status.Phase), string(v1alpha1.PhaseSynced))
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return true, fmt.Sprintf("TrustAnchorRotation %s is Ready (%s), operator %s leads", tar.Name, c.Message, holder), nil
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		return false, fmt.Sprintf("TrustAnchorRotation %s is Stalled in phase %s: %s", tar.Name, phase, c.Message), nil
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionSuspended); c != nil && c.Status == metav1.ConditionTrue {
		return true, fmt.Sprintf("TrustAnchorRotation %s is suspended (phase %s), operator %s leads", tar.Name, phase, holder), nil
	}
	if phase != string(v1alpha1.PhaseSynced) {
		return true, fmt.Sprintf("TrustAnchorRotation %s is rotating (phase %s), operator %s leads: %s", tar.Name, phase, holder, tar.Status.BlockingMessage), nil
	}
	msg := tar.Status.BlockingMessage
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady); c != nil && msg == "" {
		msg = c.Reason + ": " + c.Message
	}
	if msg == "" {
		msg = "no Ready condition yet"
	}
	return false, fmt.Sprintf("TrustAnchorRotation %s is not Ready: %s", tar.Name, msg), nil
}
