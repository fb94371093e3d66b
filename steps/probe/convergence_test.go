package probe

import (
	"crypto/x509"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// Certificates counts the alive meshed pods, the control plane's included, whose last probe
// presented a chain to the root, and says why each pod it names is behind: not running, not
// probed yet, its probe failed, or its issuer is off the root's path. A pod replaced under the
// same name starts over; a change of root judges every result again.
func TestCertificatesCounts(t *testing.T) {
	anchor, anchorKey := newCert(t, "root", true, nil, nil)
	other, otherKey := newCert(t, "other-root", true, nil, nil)
	issuer, _ := newCert(t, "identity", true, anchor, anchorKey)
	stranger, _ := newCert(t, "stranger", true, other, otherKey)

	var tr *CertTracker
	x := podindex.New(func(old, cur *podindex.Pod) { tr.PodChanged(old, cur) })
	tr = NewCertTracker(x, nil, 1, 0, nil)
	tr.SetActive(anchor, false)
	pods := map[string]*podindex.Pod{}
	for _, p := range []*podindex.Pod{
		podOf("web", "web-0", "1", ""), podOf("web", "web-1", "2", ""), podOf("web", "web-2", "3", ""),
		podOf("api", "api-0", "4", ""), podOf("api", "api-1", "5", ""),
	} {
		pods[p.Name] = p
		x.Upsert(p)
	}
	cp := controlPlanePod("linkerd-identity", "linkerd-identity-0", "6", "")
	x.Upsert(cp)
	pending := podOf("api", "api-2", "7", "")
	pending.Running = false
	x.Upsert(pending)
	x.Upsert(endedPod("job-0", "8", ""))

	ctx := t.Context()
	tr.record(ctx, pods["web-0"], []*x509.Certificate{issuer}, time.Time{}, nil)
	tr.record(ctx, pods["web-1"], []*x509.Certificate{issuer}, time.Time{}, nil)
	tr.record(ctx, pods["web-2"], []*x509.Certificate{stranger}, time.Time{}, nil)
	tr.record(ctx, pods["api-0"], nil, time.Time{}, errors.New("connection refused"))
	tr.record(ctx, cp, []*x509.Certificate{issuer}, time.Time{}, nil)
	offPath := "certificate issued by " + steps.ShortFingerprint(steps.Fingerprint(stranger)) +
		", which does not chain to " + steps.ShortFingerprint(steps.Fingerprint(anchor)) + ", the active issuer's trust anchor"

	check := func(what string, want steps.Convergence) {
		t.Helper()
		if got := tr.Certificates(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Certificates() =\n  %+v\nwant\n  %+v", what, got, want)
		}
	}
	// api-1 and api-2 (not running) were never probed.
	check("at first", steps.Convergence{Converged: 3, Target: 7, NotProbed: 2,
		Behind:          []steps.WorkloadCount{{Workload: "app/Deployment/api", Pods: 3}, {Workload: "app/Deployment/web", Pods: 1}},
		BehindWorkloads: 2,
		Pods: []steps.PodProblem{
			{Namespace: "app", Name: "api-0", Reason: "probe failed: connection refused"},
			{Namespace: "app", Name: "api-1", Reason: "not probed yet"},
			{Namespace: "app", Name: "api-2", Reason: "not running"},
			{Namespace: "app", Name: "web-2", Reason: offPath},
		}})

	// web-0 replaced under the same name: the new pod has not been probed; api-1 and api-2 gone.
	x.Upsert(podOf("web", "web-0", "9", ""))
	x.Delete("app/api-1")
	x.Delete("app/api-2")
	check("after a replacement and deletions", steps.Convergence{Converged: 2, Target: 5, NotProbed: 1,
		Behind:          []steps.WorkloadCount{{Workload: "app/Deployment/web", Pods: 2}, {Workload: "app/Deployment/api", Pods: 1}},
		BehindWorkloads: 2,
		Pods: []steps.PodProblem{
			{Namespace: "app", Name: "api-0", Reason: "probe failed: connection refused"},
			{Namespace: "app", Name: "web-0", Reason: "not probed yet"},
			{Namespace: "app", Name: "web-2", Reason: offPath},
		}})

	// On the other root, only web-2 converges.
	tr.SetActive(other, false)
	if c := tr.Certificates(); c.Converged != 1 || c.Target != 5 || c.BehindWorkloads != 3 {
		t.Errorf("on the other root: %d of %d, %d workloads behind; want 1 of 5, 3", c.Converged, c.Target, c.BehindWorkloads)
	}
	tr.SetActive(anchor, false)
	web0, _ := x.Get("app/web-0")
	tr.record(ctx, web0, []*x509.Certificate{issuer}, time.Time{}, nil)
	tr.record(ctx, pods["web-2"], []*x509.Certificate{issuer}, time.Time{}, nil)
	tr.record(ctx, pods["api-0"], []*x509.Certificate{issuer}, time.Time{}, nil)
	check("converged", steps.Convergence{Converged: 5, Target: 5})
}

// podOf is an alive, running, meshed data-plane pod of the Deployment web or api in app.
func podOf(workload, name, uid, hash string) *podindex.Pod {
	return &podindex.Pod{Namespace: "app", Name: name, UID: uid, Workload: "app/Deployment/" + workload,
		TrustRootHash: hash, Meshed: true, Alive: true, Running: true}
}

// controlPlanePod is an alive, running, meshed pod of a Linkerd Deployment.
func controlPlanePod(deployment, name, uid, hash string) *podindex.Pod {
	p := podOf("", name, uid, hash)
	p.Namespace, p.Workload, p.ControlPlane = "linkerd", "linkerd/Deployment/"+deployment, true
	return p
}

// endedPod is a pod of the Job job that ended: it no longer counts.
func endedPod(name, uid, hash string) *podindex.Pod {
	p := podOf("job", name, uid, hash)
	p.Alive = false
	return p
}
