package observe

import (
	"crypto/x509"
	"fmt"
	"runtime"
	"testing"
	"time"
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
	x := NewPodIndex(nil)
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
			x := NewPodIndex(nil)
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

// BenchmarkCertTrackerCertificates is one reconcile's read of the workload-certificate
// convergence over 10,000 pods: O(1) once converged; while pods are behind it also names them.
func BenchmarkCertTrackerCertificates(b *testing.B) {
	for _, behind := range []int{0, 5000} {
		b.Run(fmt.Sprintf("behind=%d", behind), func(b *testing.B) {
			var t *CertTracker
			x := NewPodIndex(func(old, cur *Pod) { t.PodChanged(old, cur) })
			t = NewCertTracker(x, nil, 1, 0, nil)
			for i, p := range benchPods(10000) {
				x.Upsert(p)
				if i >= behind {
					t.live[p.UID].ok = true
					t.converged++
					addCount(t.behind, p.Workload, -1)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = t.Certificates()
			}
		})
	}
}

// BenchmarkCertTrackerRetained is the heap the CertTracker keeps per meshed pod once every pod
// of 10,000 has been probed and converged: its entry by UID and the pod's last probe.
func BenchmarkCertTrackerRetained(b *testing.B) {
	anchor, anchorKey := newCert(b, "root", true, nil, nil)
	issuer, _ := newCert(b, "identity", true, anchor, anchorKey)
	const pods = 10000
	var perPod float64
	for b.Loop() {
		list := benchPods(pods)
		t := NewCertTracker(NewPodIndex(nil), nil, 1, 0, nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		// Without a root yet, PodChanged queues no probe: what is measured is the tracker's
		// accounting, not its queue, which a running tracker empties as it probes.
		for _, p := range list {
			t.PodChanged(nil, p)
		}
		t.SetActive(anchor, false)
		for _, p := range list {
			t.record(b.Context(), p, []*x509.Certificate{issuer}, time.Time{}, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if c := t.Certificates(); c.Converged != pods {
			b.Fatalf("%d of %d pods converged", c.Converged, pods)
		}
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / pods
		runtime.KeepAlive(list)
		runtime.KeepAlive(t)
	}
	b.ReportMetric(perPod, "retained-B/pod")
}
