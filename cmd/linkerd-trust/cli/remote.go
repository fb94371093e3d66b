package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// linkedCluster is a linked cluster as this command read it: how to reach it, and what its
// TrustAnchorRotation said (or why it could not be read).
type linkedCluster struct {
	Target observe.RemoteTarget
	// SecretProblem says why the credentials Secret gives no client; "" when it does.
	SecretProblem string
	Remote        steps.Remote
}

// linkedClusters finds the linked clusters — the Links of the multicluster namespace and the
// spec's remoteClusters, as the operator does — and reads each one's TrustAnchorRotation once
// with the credentials the operator uses. It never writes anywhere. The error is the Links'
// (the listed clusters are then spec's alone).
func linkedClusters(ctx context.Context, cl *Clients, kf *KubeFlags, spec []v1alpha1.RemoteCluster, now time.Time) ([]linkedCluster, error) {
	var links []observe.RemoteTarget
	var linkErr error
	if kf.MulticlusterNamespace != "" && cl.Dynamic != nil {
		links, linkErr = observe.ListLinkTargets(ctx, cl.Dynamic, cl.Kube.Discovery(), kf.MulticlusterNamespace)
	}
	var out []linkedCluster
	for _, t := range observe.RemoteTargets(links, spec) {
		lc := linkedCluster{Target: t}
		tars, err := cl.remoteRotations(ctx, kf.MulticlusterNamespace, t)
		if err != nil {
			lc.SecretProblem = err.Error()
		}
		lc.Remote = observe.ReadRemote(ctx, t, tars, err, now)
		out = append(out, lc)
	}
	return out, linkErr
}

// remoteRotations makes a client of a linked cluster's TrustAnchorRotations from its
// credentials Secret, through Clients.Remote when set.
func (cl *Clients) remoteRotations(ctx context.Context, namespace string, t observe.RemoteTarget) (observe.RotationGetter, error) {
	if cl.Remote != nil {
		return cl.Remote(ctx, namespace, t)
	}
	if namespace == "" {
		return nil, fmt.Errorf("no multicluster namespace (--multicluster-namespace) to read credentials Secret %s from", t.Secret)
	}
	c, err := observe.RemoteClient(ctx, clientset.Kube(cl.Kube), namespace, t, binary+" (remote read)")
	if err != nil {
		return nil, err
	}
	return c, nil
}

// categoryMulticluster checks each linked cluster; it is there only when there are some.
const categoryMulticluster = "linkerd-trust-multicluster"

// multiclusterCategory checks each linked cluster the way the operator reads it: its credentials
// Secret gives a client, its TrustAnchorRotation can be read with it, it is on the same trust
// anchors as this cluster, and its operator reports in its status.
func (c *checks) multiclusterCategory(linked []linkedCluster, linkErr error) (category, bool) {
	cat := category{name: categoryMulticluster}
	ns := c.o.kube.MulticlusterNamespace
	if linkErr != nil {
		cat.checkers = append(cat.checkers, checker{description: fmt.Sprintf("Links of namespace %s are readable", ns), hint: "l5d-trust-mc-links",
			check: func(context.Context) error { return linkErr }})
	}
	for _, lc := range linked {
		name, t := lc.Target.Name, lc.Target
		cat.checkers = append(cat.checkers,
			checker{description: fmt.Sprintf("cluster %s: credentials Secret %s/%s is usable", name, ns, t.Secret), hint: "l5d-trust-mc-credentials",
				check: func(context.Context) error {
					if lc.SecretProblem != "" {
						return fmt.Errorf("cluster %s (%s): %s", name, t.Source, lc.SecretProblem)
					}
					return nil
				}},
			checker{description: fmt.Sprintf("cluster %s: TrustAnchorRotation %s is readable with those credentials", name, t.Rotation), hint: "l5d-trust-mc-rotation",
				check: func(context.Context) error { return remoteReadable(lc) }},
			checker{description: fmt.Sprintf("cluster %s: its trust-rotation operator reports", name), hint: "l5d-trust-mc-operator",
				check: func(context.Context) error { return remoteReporting(lc) }},
			checker{description: fmt.Sprintf("cluster %s: on the same trust anchor as this cluster", name), hint: "l5d-trust-mc-anchor",
				check: func(ctx context.Context) error { return c.remoteSameAnchor(ctx, lc) }},
		)
	}
	return cat, len(cat.checkers) > 0
}

func remoteReadable(lc linkedCluster) error {
	r := lc.Remote
	switch {
	case lc.SecretProblem != "":
		return fmt.Errorf("cluster %s: no client (see the credentials check)", r.Name)
	case r.Problem != "":
		return fmt.Errorf("cluster %s (%s): %s", r.Name, r.Source, r.Problem)
	case !r.Found:
		return fmt.Errorf("cluster %s has no TrustAnchorRotation %s: install the trust-rotation operator there", r.Name, r.RotationName)
	}
	return nil
}

func remoteReporting(lc linkedCluster) error {
	r := lc.Remote
	if err := remoteReadable(lc); err != nil {
		return fmt.Errorf("cluster %s: its TrustAnchorRotation cannot be read (see above)", r.Name)
	}
	st := &r.Status
	switch {
	case st.Checkpoint == nil:
		return fmt.Errorf("cluster %s: TrustAnchorRotation %s has no checkpoint in its status: is its trust-rotation operator running?", r.Name, r.RotationName)
	case st.ObservedGeneration < r.Generation:
		return fmt.Errorf("cluster %s: TrustAnchorRotation %s's status is of generation %d, its spec of %d: is its trust-rotation operator running?",
			r.Name, r.RotationName, st.ObservedGeneration, r.Generation)
	}
	return nil
}

// remoteSameAnchor compares the linked cluster's current and previous anchors with this
// cluster's: the same current anchor passes; a renewed anchor that has reached one cluster and
// not yet the other warns (the rotation waits for it); unrelated anchors fail.
func (c *checks) remoteSameAnchor(ctx context.Context, lc linkedCluster) error {
	r := lc.Remote
	if err := remoteReporting(lc); err != nil {
		return fmt.Errorf("cluster %s: no report to compare (see above)", r.Name)
	}
	anchor, err := c.usableAnchor(ctx)
	if err != nil {
		return err
	}
	ours := steps.Fingerprint(anchor.Cert)
	var ourPrevious string
	if tar, err := c.rotation.get(ctx); err == nil {
		ourPrevious = tar.Status.PreviousAnchorFingerprint
	}
	theirs, theirPrevious := steps.RemoteAnchor(&r.Status), r.Status.PreviousAnchorFingerprint
	switch {
	case theirs == "":
		return fmt.Errorf("cluster %s reports no usable trust anchor (its status has no source fingerprint): see `linkerd trust check` there", r.Name)
	case theirs == ours:
		return nil
	case theirs == ourPrevious:
		return warn(fmt.Errorf("cluster %s is still on trust anchor %s, which this cluster's new anchor %s replaces: give it the new anchor (your distribution of the anchor: a copy, a shared issuer, a secret store); the rotation waits for it",
			r.Name, steps.ShortFingerprint(theirs), steps.ShortFingerprint(ours)))
	case ours == theirPrevious:
		return warn(fmt.Errorf("cluster %s already has a new trust anchor %s, this cluster still %s: give this cluster the new anchor; the rotation waits for it",
			r.Name, steps.ShortFingerprint(theirs), steps.ShortFingerprint(ours)))
	}
	return fmt.Errorf("cluster %s is on trust anchors [%s (current), %s (previous)], this cluster on [%s, %s]: linked clusters must share the trust anchor",
		r.Name, steps.ShortFingerprint(theirs), steps.ShortFingerprint(theirPrevious), steps.ShortFingerprint(ours), steps.ShortFingerprint(ourPrevious))
}
