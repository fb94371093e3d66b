package app

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// progressWriteInterval is the least time between two status writes that only report progress
// (pod counts and the blocking message that names them), and between two reconciles that pod
// changes and probe results ask for (churn). While thousands of pods roll, the counts change on
// nearly every pod event: writing each change was ~13 status writes a second at 1,000 pods, each
// also a watch event back into the operator and a reconcile. Phase, checkpoint, condition and
// convergence-completed changes are written at once: what reacts to them waits on nothing but
// this write. Progress a second old is what `kubectl get -w` shows a person watching; at 500ms the
// 10,000-pod bench spent a tenth of the rotation's CPU on the reconciles and writes of counts.
const progressWriteInterval = time.Second

// holdProgress reports whether the change from prev to next only reports progress, no
// control-plane pod changed since the reconcile before (churn), and its reconcile began sooner
// than progressWriteInterval after the one that last wrote the status began; it then arranges a
// reconcile for when the interval has passed, which writes the latest progress.
//
// Both ends are the instants the reconciles began, the instants churn paces them by: measured
// from the end of the last write instead, the reconcile churn paced came a few milliseconds too
// early to write, held its progress, and its timer asked for a second reconcile right after, two
// reconciles per interval where one does.
func (c *Controller) holdProgress(prev, next *v1alpha1.TrustAnchorRotationStatus) bool {
	if !progressOnly(prev, next) || c.controlPlaneChanged {
		return false
	}
	if c.reconcileBegan.Sub(c.lastWriteBegan) >= progressWriteInterval {
		return false
	}
	c.recheckAfter(c.lastWriteBegan.Add(progressWriteInterval))
	return true
}

// progressOnly reports whether two statuses differ only in convergence counts and in a blocking
// message that is there in both, which the conditions' messages repeat: a condition whose type,
// status or reason changed is written at once.
func progressOnly(prev, next *v1alpha1.TrustAnchorRotationStatus) bool {
	if (prev.BlockingMessage == "") != (next.BlockingMessage == "") ||
		convergedOf(prev.TrustBundle) != convergedOf(next.TrustBundle) ||
		convergedOf(prev.WorkloadCertificates) != convergedOf(next.WorkloadCertificates) {
		return false
	}
	a, b := prev.DeepCopy(), next.DeepCopy()
	for _, s := range []*v1alpha1.TrustAnchorRotationStatus{a, b} {
		s.TrustBundle, s.WorkloadCertificates, s.BlockingMessage = nil, nil, ""
		for i := range s.Conditions {
			s.Conditions[i].Message = ""
		}
	}
	return equality.Semantic.DeepEqual(a, b)
}

func convergedOf(c *v1alpha1.ConvergenceStatus) v1alpha1.ConvergenceState {
	if c == nil {
		return ""
	}
	return c.Status
}
