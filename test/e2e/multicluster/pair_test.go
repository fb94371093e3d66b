package multicluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// pair is two linked clusters, west and east, whose meshes one oracle judges.
type pair struct {
	west, east *linked
	oracle     *meshsim.Oracle
	// start is when both clusters were linked and read each other (Synced).
	start time.Time
}

// startPair starts west and east, each with its own cert-manager, the chart (chartSet), an
// operator kept running as its Deployment would keep it (see keeper) and a simulated mesh with a
// gateway; east's trust anchor is a copy of west's. Each links the other as `linkerd
// multicluster link` does, and one oracle judges every pod pair of both meshes, across the link
// as on a flat network. With linked clusters on (multicluster.enabled), it returns once each
// operator has read the other cluster's TrustAnchorRotation.
func startPair(t *testing.T, ctx context.Context, chartSet []string) *pair {
	t.Helper()
	p := &pair{oracle: meshsim.NewOracle(nil, 200*time.Millisecond, nil)}
	p.oracle.SetFlatNetwork(true)
	closeVerifier, err := meshsim.EquipOracle(p.oracle, reallinkerd.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeVerifier) // after the oracle stops: cleanups run last first
	octx, stopOracle := context.WithCancel(ctx)
	t.Cleanup(stopOracle)
	go p.oracle.Run(octx)

	p.west = &linked{name: "west", c: startCluster(t, ctx, "west")}
	p.east = &linked{name: "east", c: startCluster(t, ctx, "east")}
	opts := e2e.EnvOptions{Namespaces: 1, Deployments: 2, Replicas: 2, ChartSet: chartSet, Oracle: p.oracle, Gateway: true}
	for _, l := range []*linked{p.west, p.east} {
		o := opts
		o.ClusterName = l.name
		if l == p.east {
			// The anchor is renewed once, in west, and reaches east as a copy.
			if _, err := pki.CopyAnchor(ctx, p.west.c.Kube(), p.east.c.Kube(), pki.Options{}); err != nil {
				t.Fatal(err)
			}
			o.PKI = pki.Options{CopiedAnchor: true}
		}
		l.env = e2e.NewEnv(t, ctx, l.c, o, func(rel *charts.Release) *e2e.Operator {
			l.op = keep(t, ctx, l.name, rel)
			return l.op.current()
		})
	}
	link(t, ctx, p.west, p.east)
	link(t, ctx, p.east, p.west)
	if slicesContain(chartSet, "multicluster.enabled=true") {
		for _, pr := range [][2]*linked{{p.west, p.east}, {p.east, p.west}} {
			l, other := pr[0], pr[1]
			l.wait(t, ctx, "reads "+other.name, func(tar *v1alpha1.TrustAnchorRotation) bool {
				r := remoteEntry(tar, other.name)
				return tar.Status.Phase == v1alpha1.PhaseSynced && r != nil && r.LastObserved != nil && r.Phase == v1alpha1.PhaseSynced &&
					r.Source == "Link linkerd-multicluster/"+other.name && r.TrustBundle != nil
			})
		}
	}
	p.start = time.Now()
	t.Logf("both clusters linked; the oracle judges %d pods", p.oracle.Status().Pods)
	return p
}

// pairTest skips the test in -short mode, else starts a pair (startPair) under a 30-minute
// context. Defer cancel in the test: it stops the keepers before the test's cleanups stop the
// operators.
func pairTest(t *testing.T, chartSet []string) (context.Context, context.CancelFunc, *pair) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: starts two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	return ctx, cancel, startPair(t, ctx, chartSet)
}

// renewAnchorInWest renews the trust anchor in west (east gets it only when the test copies
// it) and restarts west's workloads onto the expanded bundle; it returns the new anchor.
func (p *pair) renewAnchorInWest(t *testing.T, ctx context.Context) *x509.Certificate {
	t.Helper()
	newAnchor := p.west.env.Renew(pki.DefaultCertManagerNamespace, pki.DefaultTrustAnchor)
	p.west.waitPhase(t, ctx, v1alpha1.PhasePropagatingTrustRoots)
	p.west.env.RestartApps()
	return newAnchor
}

// anchorToEast copies west's trust anchor to east (the user's distribution of the anchor) and
// waits until east's rotation starts.
func (p *pair) anchorToEast(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := pki.CopyAnchor(ctx, p.west.c.Kube(), p.east.c.Kube(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	p.east.waitPhase(t, ctx, v1alpha1.PhasePropagatingTrustRoots)
}

// waitInjectors waits until every proxy-injector l's mesh simulator runs injects the trust bundle
// l's ConfigMap holds. After an apiserver outage the simulator's informers may relist late (their
// back-off reaches 30 s), and until it has seen the injector's rollout it would inject pods as
// the old injector did; a real injector pod reads its bundle itself. Test-bed synchronisation:
// the operator's decisions do not depend on it.
func (l *linked) waitInjectors(t *testing.T, ctx context.Context) {
	t.Helper()
	err := poll.Until(ctx, 2*time.Minute, l.name+"'s simulated injectors on the current bundle", func(ctx context.Context) (bool, error) {
		cm, err := l.c.Kube().CoreV1().ConfigMaps(pki.DefaultLinkerdNamespace).Get(ctx, steps.DefaultTrustRootsConfigMap, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		want := meshsim.BundleSHA256(cm.Data[steps.TrustRootsKey])
		ins := l.env.Mesh.Injectors()
		if len(ins) == 0 {
			return false, poll.Pending("no injector runs")
		}
		for _, in := range ins {
			if in.BundleSHA256 != want {
				return false, poll.Pending("injector %s injects bundle %.12s, the ConfigMap holds %.12s", in.Pod.Name, in.BundleSHA256, want)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// issuerInWest renews west's identity issuer and restarts west's workloads onto it.
func (p *pair) issuerInWest(t *testing.T, ctx context.Context) {
	t.Helper()
	p.west.env.Renew(pki.DefaultLinkerdNamespace, pki.DefaultIdentityIssuer)
	p.west.waitPhase(t, ctx, v1alpha1.PhaseRenewingWorkloadCerts)
	p.west.env.RestartApps()
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkOracle fails the test on any mTLS violation across the linked meshes since the pair was
// linked.
func (p *pair) checkOracle(t *testing.T) {
	t.Helper()
	if err := p.oracle.CheckNoViolationsSince(p.start); err != nil {
		t.Fatalf("mTLS violations across the linked meshes: %v", err)
	}
	t.Logf("oracle: %+v", p.oracle.Status())
}

// finish takes the rotation onto newAnchor from where west waits at its second remote gate on
// east: east's issuer renewed and its workloads restarted, then both clusters' workloads
// restarted onto the reduced bundle; both end Synced with newAnchor as their previous anchor.
func (p *pair) finish(t *testing.T, ctx context.Context, newAnchor *x509.Certificate) {
	t.Helper()
	p.east.env.Renew(pki.DefaultLinkerdNamespace, pki.DefaultIdentityIssuer)
	p.east.waitPhase(t, ctx, v1alpha1.PhaseRenewingWorkloadCerts)
	p.east.env.RestartApps()
	for _, l := range []*linked{p.west, p.east} {
		l.waitPhase(t, ctx, v1alpha1.PhaseRemovingOldTrustRoots)
		l.env.RestartApps()
	}
	for _, l := range []*linked{p.west, p.east} {
		tar := l.waitPhase(t, ctx, v1alpha1.PhaseSynced)
		if tar.Status.PreviousAnchorFingerprint != steps.Fingerprint(newAnchor) {
			t.Errorf("%s finished on previous anchor %s, want the new anchor", l.name, tar.Status.PreviousAnchorFingerprint)
		}
	}
}

// keeper runs a cluster's operator the way its Deployment does: whenever the process exits
// (it exits on losing its leader lease, say while its apiserver is down; or the test killed it)
// a new one is started with the chart's flags, until the test ends or the keeper is paused.
type keeper struct {
	t    *testing.T
	ctx  context.Context
	name string
	rel  *charts.Release

	mu     sync.Mutex
	cur    *e2e.Operator
	paused bool
	starts int
}

func keep(t *testing.T, ctx context.Context, name string, rel *charts.Release) *keeper {
	k := &keeper{t: t, ctx: ctx, name: name, rel: rel}
	k.start()
	return k
}

// start runs a new operator and restarts it when it exits.
func (k *keeper) start() {
	op := e2e.StartChartOperator(k.t, k.rel)
	k.mu.Lock()
	k.cur, k.paused = op, false
	k.starts++
	k.mu.Unlock()
	go func() {
		select {
		case <-k.ctx.Done():
			return
		case <-op.Done():
		}
		// A second's back-off before the restart, as the kubelet's for a container that exited.
		select {
		case <-k.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		k.mu.Lock()
		restart := !k.paused && k.cur == op && k.ctx.Err() == nil
		k.mu.Unlock()
		if restart {
			k.t.Logf("%s: the operator exited; starting it again, as its Deployment would", k.name)
			k.start()
		}
	}()
}

func (k *keeper) current() *e2e.Operator {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// kill SIGKILLs the running operator, as a crash would; the keeper starts a new one.
func (k *keeper) kill() {
	k.current().Kill()
}

// stop pauses the keeper and stops the operator (SIGTERM): the cluster runs no operator until
// resume.
func (k *keeper) stop() {
	k.mu.Lock()
	k.paused = true
	op := k.cur
	k.mu.Unlock()
	op.Stop()
}

// resume starts an operator again after stop.
func (k *keeper) resume() { k.start() }

// processes is the number of operator processes started so far.
func (k *keeper) processes() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts
}

// writes is what a cluster's operator has written to its Linkerd control plane: the trust-roots
// ConfigMap (its bundle and resource version), the identity Deployment's pod-template
// annotations (a restart changes them) and the previous anchor's fingerprint.
type writes struct {
	trustRoots, trustRootsRV string
	identityTemplate         string
	previousAnchor           string
}

func (l *linked) writes(t *testing.T, ctx context.Context) writes {
	t.Helper()
	kube := l.c.Kube()
	cm, err := kube.CoreV1().ConfigMaps(pki.DefaultLinkerdNamespace).Get(ctx, steps.DefaultTrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := kube.AppsV1().Deployments(pki.DefaultLinkerdNamespace).Get(ctx, "linkerd-identity", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := writes{trustRoots: cm.Data[steps.TrustRootsKey], trustRootsRV: cm.ResourceVersion, identityTemplate: fmt.Sprint(d.Spec.Template.Annotations)}
	w.previousAnchor = steps.Fingerprint(l.env.SecretCert(pki.DefaultLinkerdNamespace, steps.DefaultPreviousAnchorSecret))
	return w
}
