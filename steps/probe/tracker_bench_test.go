package probe

import (
	"crypto/x509"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps/podindex"
)

// BenchmarkCertTrackerCertificates is one reconcile's read of the workload-certificate
// convergence over 10,000 pods: O(1) once converged; while pods are behind it also names them.
func BenchmarkCertTrackerCertificates(b *testing.B) {
	for _, behind := range []int{0, 5000} {
		b.Run(fmt.Sprintf("behind=%d", behind), func(b *testing.B) {
			var t *CertTracker
			x := podindex.New(func(old, cur *podindex.Pod) { t.PodChanged(old, cur) })
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
// of 10,000 has been probed and converged: its entry by UID and the pod's last probe, and the
// expiry watch's delayed read of the pod (expiry.go), which waits in the queue for as long as the
// pod's proxy keeps its certificate.
func BenchmarkCertTrackerRetained(b *testing.B) {
	anchor, anchorKey := newCert(b, "root", true, nil, nil)
	issuer, issuerKey := newCert(b, "identity", true, anchor, anchorKey)
	leaf, _ := newCert(b, "web.app.serviceaccount.identity.linkerd.cluster.local", false, issuer, issuerKey)
	const pods = 10000
	var perPod float64
	for b.Loop() {
		list := benchPods(pods)
		t := NewCertTracker(podindex.New(nil), nil, 1, 0, nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		// Without a root yet, PodChanged queues no probe: what is measured is the tracker's
		// accounting, not its queue, which a running tracker empties as it probes.
		for _, p := range list {
			t.PodChanged(nil, p)
		}
		t.SetActive(anchor, false)
		now := time.Now()
		for _, p := range list {
			t.record(b.Context(), p, []*x509.Certificate{issuer}, time.Time{}, nil)
			t.leafTimes(p, leaf, now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if c := t.Certificates(); c.Converged != pods {
			b.Fatalf("%d of %d pods converged", c.Converged, pods)
		}
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / pods
		runtime.KeepAlive(list)
		runtime.KeepAlive(t)
		t.queue.ShutDown()
	}
	b.ReportMetric(perPod, "retained-B/pod")
}

// benchPods is the mesh of the scale benchmark: n data-plane pods, 5 per Deployment, 10 per
// namespace, all on the trust-root hash "old".
func benchPods(n int) []*podindex.Pod {
	pods := make([]*podindex.Pod, n)
	for i := range pods {
		ns := fmt.Sprintf("app-%d", i/10)
		pods[i] = &podindex.Pod{
			Namespace: ns, Name: fmt.Sprintf("app-%d-pod-%d", i/5, i), UID: fmt.Sprint(i),
			Workload: ns + "/Deployment/" + fmt.Sprintf("app-%d", i/5), TrustRootHash: "old",
			Meshed: true, Alive: true, Running: true, IP: "127.0.0.1", AdminPort: 4191,
		}
	}
	return pods
}
