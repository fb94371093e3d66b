package apply

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// transientBackoff spaces the tries of one write that the apiserver failed for a passing
// reason: four tries within about a second. An act writes several objects (the control plane's
// three Deployments, a batch of workloads); without these tries one 503 among them fails the
// act, and the reconcile's own backoff, which grows with each failure, then paces the rest of
// it. The operator's failure backoff still handles what outlasts them.
var transientBackoff = wait.Backoff{Steps: 4, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1}

// onTransient runs write, an idempotent write of one object (an apply of exactly the
// operator's fields, a merge patch without precondition, a delete), and runs it again while it
// fails with a transient error. A write the apiserver applied but whose answer was lost (a 500
// after etcd wrote) is safe to send again for the same reason.
func onTransient(write func() error) error {
	return retry.OnError(transientBackoff, isTransient, write)
}

// OnUnavailable runs write, a write with a resourceVersion precondition (the operator's
// status writes), and runs it again while the apiserver fails it as unavailable. A conflict is
// returned at once: the writer must read the object again. A write the apiserver applied but
// whose answer was lost meets that conflict on its next try.
func OnUnavailable(write func() error) error {
	return retry.OnError(transientBackoff, Unavailable, write)
}

// Unavailable reports whether err is one a write may not meet on its next try: the apiserver
// or etcd unavailable, timed out, or failing internally. A 429 is not here: client-go waits out
// a Retry-After itself, and for an eviction it is a PodDisruptionBudget's answer, which
// EvictPods reads.
func Unavailable(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err)
}

// isTransient is Unavailable or a conflict, which a write without a resourceVersion
// precondition meets only when the apiserver's own update loop lost a race.
func isTransient(err error) bool { return Unavailable(err) || apierrors.IsConflict(err) }
