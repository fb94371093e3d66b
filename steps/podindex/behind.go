package podindex

import (
	"sort"

	"github.com/linkerd/trust-rotation/steps"
)

// How a convergence names what is behind. The trust bundle's (Index.TrustBundle) and the live
// certificates' (steps/probe: CertTracker.Certificates, CertificateCheck) name it alike, which
// is why these are exported.

// BehindLimit is how many workloads and pods a convergence lists by name.
const BehindLimit = 10

// TopWorkloads returns the BehindLimit workloads with the most pods behind, in SortWorkloads'
// order, and how many workloads are behind. It keeps the top ones as it goes rather than
// sorting every workload: a reconcile during a rollout of 10,000 pods had 2,000 to sort.
func TopWorkloads(counts map[string]int) ([]steps.WorkloadCount, int) {
	top := make([]steps.WorkloadCount, 0, BehindLimit+1)
	before := func(a, b steps.WorkloadCount) bool {
		return a.Pods > b.Pods || a.Pods == b.Pods && a.Workload < b.Workload
	}
	for w, n := range counts {
		c := steps.WorkloadCount{Workload: w, Pods: n}
		if len(top) == BehindLimit && !before(c, top[BehindLimit-1]) {
			continue
		}
		i := sort.Search(len(top), func(i int) bool { return before(c, top[i]) })
		top = append(top, steps.WorkloadCount{})
		copy(top[i+1:], top[i:])
		top[i] = c
		if len(top) > BehindLimit {
			top = top[:BehindLimit]
		}
	}
	return top, len(counts)
}

// SortProblems sorts the pods a convergence names by namespace, then name.
func SortProblems(ps []steps.PodProblem) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Namespace != ps[j].Namespace {
			return ps[i].Namespace < ps[j].Namespace
		}
		return ps[i].Name < ps[j].Name
	})
}

// ShortHash is how a convergence shows a trust-root hash or a certificate's fingerprint: its
// short form (steps.ShortFingerprint), "(none)" when there is none.
func ShortHash(h string) string {
	if h == "" {
		return "(none)"
	}
	return steps.ShortFingerprint(h)
}
