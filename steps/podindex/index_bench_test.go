package podindex

import (
	"fmt"
	"testing"
)

// benchPods is the mesh of the scale benchmark: n data-plane pods, 5 per Deployment, 10 per
// namespace, all on the trust-root hash "old".
func benchPods(n int) []*Pod {
	pods := make([]*Pod, n)
	for i := range pods {
		ns := fmt.Sprintf("app-%d", i/10)
		pods[i] = &Pod{
			Namespace: ns, Name: fmt.Sprintf("app-%d-pod-%d", i/5, i), UID: fmt.Sprint(i),
			Workload: ns + "/Deployment/" + fmt.Sprintf("app-%d", i/5), TrustRootHash: "old",
			Meshed: true, Alive: true, Running: true, IP: "127.0.0.1", AdminPort: 4191,
		}
	}
	return pods
}

// BenchmarkPodIndexUpsert is the per-event cost of the convergence accounting: one pod update
// in a 10,000-pod index (the pod moves to the other hash and back).
func BenchmarkPodIndexUpsert(b *testing.B) {
	pods := benchPods(10000)
	x := New(nil)
	for _, p := range pods {
		x.Upsert(p)
	}
	moved := make([]*Pod, len(pods))
	for i, p := range pods {
		c := *p
		c.TrustRootHash = "new"
		moved[i] = &c
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % len(pods)
		if (i/len(pods))%2 == 0 {
			x.Upsert(moved[k])
		} else {
			x.Upsert(pods[k])
		}
		i++
	}
}

// BenchmarkPodIndexTrustBundle is one reconcile's read of the trust-bundle convergence over
// 10,000 pods: O(1) once converged; while pods are behind it also names the workloads behind.
func BenchmarkPodIndexTrustBundle(b *testing.B) {
	for _, behind := range []int{0, 1, 5000} {
		b.Run(fmt.Sprintf("behind=%d", behind), func(b *testing.B) {
			pods := benchPods(10000)
			for i := behind; i < len(pods); i++ {
				pods[i].TrustRootHash = "new"
			}
			x := New(nil)
			for _, p := range pods {
				x.Upsert(p)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = x.TrustBundle("new")
			}
		})
	}
}
