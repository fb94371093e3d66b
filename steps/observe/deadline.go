package observe

import (
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
)

// What the next rotation's deadline reads of the data plane (steps.DeadlineInputs), kept as
// the pods and the probes come, so that a reconcile reads it without a walk of the mesh.

// FillDeadline sets what the deadline reads of the data plane.
func FillDeadline(s *steps.State, index *podindex.Index, certs *probe.CertTracker) {
	s.Deadline = steps.DeadlineInputs{WorkloadCertificateLifetime: certs.LeafLifetime(), OldestMeshedPod: index.OldestMeshed()}
}
