package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/proc"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// The multicluster demo (-clusters 2, `make demo-multicluster`): two linked clusters, west and
// east, side by side, each with its own cert-manager, operator and simulated mesh with a
// gateway, the meshes judged by one mTLS oracle across the link. The anchor is renewed once, in
// west, and reaches east as a copy; each cluster's workloads are restarted at its own pace, and
// each operator holds its rotation at the remote gates until the other cluster has caught up.
// It reports how long each gate took to pass once the other cluster's status said it could
// (both statuses watched by this process), and every request an operator made to the other
// cluster's apiserver (from that apiserver's audit log).

// remoteReadsAuditPolicy records every request for a TrustAnchorRotation or its status once, when received
// (who, which verb), and nothing else.
const remoteReadsAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete"]
rules:
  - level: Metadata
    resources:
      - group: "trust.linkerd.io"
        resources: ["trustanchorrotations", "trustanchorrotations/status"]
  - level: None
`

// multiclusterChartSet turns linked clusters on (see docs/multicluster.md).
var multiclusterChartSet = []string{"multicluster.enabled=true", "multicluster.remoteAccess.enabled=true"}

// side is one cluster of the demo.
type side struct {
	name  string
	c     *cluster.Cluster
	rel   *charts.Release
	tars  *client.Client
	op    *proc.Process
	opLog string
	mesh  *meshsim.Mesh
	apps  []meshsim.Workload
}

func runMulticluster(ctx context.Context, namespaces, deployments int, replicas int32, workDir string, result *string) error {
	bin, cleanup, err := buildBinaries(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	oracle := meshsim.NewOracle(nil, 200*time.Millisecond, nil)
	oracle.SetFlatNetwork(true) // every pod of one cluster with every pod of the other, both ways
	closeVerifier, err := meshsim.EquipOracle(oracle, reallinkerd.FromEnv())
	if err != nil {
		return err
	}
	defer closeVerifier()
	octx, stopOracle := context.WithCancel(ctx)
	defer stopOracle()
	go oracle.Run(octx)

	var west, east *side
	for _, name := range []string{"west", "east"} {
		dir := ""
		if workDir != "" {
			dir = filepath.Join(workDir, name)
		}
		s, stop, err := startSide(ctx, name, bin, dir, oracle, west, namespaces, deployments, replicas)
		defer stop()
		if err != nil {
			return err
		}
		if west == nil {
			west = s
		} else {
			east = s
		}
	}
	say("linkerd multicluster link, both ways: a Link and a credentials Secret in each cluster for the other")
	linkedAt := time.Now()
	for _, pair := range [][2]*side{{west, east}, {east, west}} {
		if err := linkSides(ctx, pair[0], pair[1]); err != nil {
			return err
		}
	}
	for _, pair := range [][2]*side{{west, east}, {east, west}} {
		s, other := pair[0], pair[1]
		if err := waitFor(ctx, s.tars, s.name+" reads "+other.name, func(t *v1alpha1.TrustAnchorRotation) bool {
			for _, r := range t.Status.RemoteClusters {
				if r.Name == other.name && r.LastObserved != nil && r.TrustBundle != nil {
					return true
				}
			}
			return false
		}); err != nil {
			return err
		}
	}
	say("%d meshed pods in two linked clusters; each operator reads the other's TrustAnchorRotation; mTLS oracle watching every pair", oracle.Status().Pods)

	gates := newGateClock(west, east)
	gctx, stopGates := context.WithCancel(ctx)
	defer stopGates()
	go gates.watch(gctx, west)
	go gates.watch(gctx, east)
	for _, s := range []*side{west, east} {
		w := newPhaseWatch(s.tars)
		w.prefix = s.name + ": "
		go w.run(ctx)
		defer w.stop()
	}
	start := time.Now()

	say("STEP 1 (west): cmctl renew -n cert-manager linkerd-trust-anchor")
	if err := renew(ctx, west.c, "cert-manager", "linkerd-trust-anchor"); err != nil {
		return err
	}
	if err := waitPhase(ctx, west.tars, v1alpha1.PhasePropagatingTrustRoots); err != nil {
		return err
	}
	if err := restartSide(ctx, west); err != nil {
		return err
	}
	if err := waitPhase(ctx, west.tars, v1alpha1.PhaseWaitingForRemoteClusters); err != nil {
		return err
	}
	say("STEP 2 (east, later): the new anchor reaches east (a copy of west's Secret: your distribution), then east's restart")
	if _, err := pki.CopyAnchor(ctx, west.c.Kube(), east.c.Kube(), pki.Options{}); err != nil {
		return err
	}
	if err := waitPhase(ctx, east.tars, v1alpha1.PhasePropagatingTrustRoots); err != nil {
		return err
	}
	if err := restartSide(ctx, east); err != nil {
		return err
	}
	for _, s := range []*side{west, east} {
		if err := waitPhase(ctx, s.tars, v1alpha1.PhaseWaitingForIdentityRotation); err != nil {
			return err
		}
	}
	say("STEP 3 (west): cmctl renew -n linkerd linkerd-identity-issuer, then west's restart")
	if err := renew(ctx, west.c, "linkerd", "linkerd-identity-issuer"); err != nil {
		return err
	}
	if err := waitPhase(ctx, west.tars, v1alpha1.PhaseRenewingWorkloadCerts); err != nil {
		return err
	}
	if err := restartSide(ctx, west); err != nil {
		return err
	}
	if err := waitPhase(ctx, west.tars, v1alpha1.PhaseWaitingForRemoteClusters); err != nil {
		return err
	}
	say("STEP 4 (east, later): cmctl renew -n linkerd linkerd-identity-issuer, then east's restart")
	if err := renew(ctx, east.c, "linkerd", "linkerd-identity-issuer"); err != nil {
		return err
	}
	if err := waitPhase(ctx, east.tars, v1alpha1.PhaseRenewingWorkloadCerts); err != nil {
		return err
	}
	if err := restartSide(ctx, east); err != nil {
		return err
	}
	say("STEP 5 (both): the final restart onto the reduced bundle")
	for _, s := range []*side{west, east} {
		if err := waitPhase(ctx, s.tars, v1alpha1.PhaseRemovingOldTrustRoots); err != nil {
			return err
		}
		if err := restartSide(ctx, s); err != nil {
			return err
		}
	}
	for _, s := range []*side{west, east} {
		if err := waitPhase(ctx, s.tars, v1alpha1.PhaseSynced); err != nil {
			return err
		}
	}
	took := time.Since(start)
	stopGates()

	fmt.Printf("\n$ linkerd trust inspect   # in west\n")
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "linkerd-trust"), "inspect", "--kubeconfig", west.c.Kubeconfig())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		fmt.Printf("(linkerd trust inspect: %v)\n", err)
	}
	fmt.Println()
	gates.report()
	for _, pair := range [][2]*side{{west, east}, {east, west}} {
		if err := reportRemoteReads(pair[0], pair[1], linkedAt); err != nil {
			return err
		}
	}
	violations := oracle.ViolationCount()
	*result = fmt.Sprintf("demo: multicluster rotation complete in %s, %d mTLS violations", took.Round(100*time.Millisecond), violations)
	if r := oracle.VerifierReport(); r != "" {
		*result += "; " + r
	}
	return nil
}

// startSide starts one cluster with everything in it; from, when set, is the cluster whose
// trust anchor this one's is a copy of. stop undoes what was started, also on error.
func startSide(ctx context.Context, name, bin, workDir string, oracle *meshsim.Oracle, from *side, namespaces, deployments int, replicas int32) (s *side, stop func(), err error) {
	s = &side{name: name}
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	say("%s: starting a local cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok, cert-manager)", name)
	if s.c, err = cluster.Start(ctx, cluster.Options{WorkDir: workDir, AuditPolicy: remoteReadsAuditPolicy}); err != nil {
		return nil, stop, err
	}
	undo = append(undo, func() {
		say("%s: stopping the cluster", name)
		if err := s.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: stopping cluster %s: %v\n", name, err)
		}
	})
	kube := s.c.Kube()
	say("%s: linkerd multicluster install (its namespace and the Link CRD)", name)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: meshsim.MulticlusterNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, stop, err
	}
	if err := meshsim.InstallLinkCRD(ctx, s.c.RESTConfig()); err != nil {
		return nil, stop, err
	}
	opts := pki.Options{}
	if from != nil {
		say("%s: the trust anchor Secret, a copy of %s's (linked clusters share one anchor)", name, from.name)
		if _, err := pki.CopyAnchor(ctx, from.c.Kube(), kube, opts); err != nil {
			return nil, stop, err
		}
		opts.CopiedAnchor = true
	}
	say("%s: Linkerd's PKI with cert-manager; helm install of both charts with %s", name, strings.Join(multiclusterChartSet, ","))
	if _, err := pki.Install(ctx, kube, s.c.CertManager(), opts); err != nil {
		return nil, stop, err
	}
	if s.rel, err = charts.Install(ctx, s.c, charts.InstallOptions{Set: multiclusterChartSet}); err != nil {
		return nil, stop, err
	}
	adminAddr, err := proc.FreeAddr()
	if err != nil {
		return nil, stop, err
	}
	s.opLog = filepath.Join(os.TempDir(), fmt.Sprintf("trust-rotation-demo-operator-%s-%d.log", name, os.Getpid()))
	if s.op, err = proc.Start(filepath.Join(bin, "trust-rotation-operator"),
		append([]string{"--kubeconfig", s.rel.Kubeconfig, "--admin-addr", adminAddr}, s.rel.OperatorArgs...),
		[]string{"POD_NAMESPACE=" + s.rel.Namespace}, s.opLog); err != nil {
		return nil, stop, err
	}
	undo = append(undo, func() { s.op.Stop(10 * time.Second) })
	if s.tars, err = client.NewForConfig(s.c.RESTConfig()); err != nil {
		return nil, stop, err
	}
	if err := waitFor(ctx, s.tars, name+": the operator to bootstrap", func(t *v1alpha1.TrustAnchorRotation) bool {
		return t.Status.Checkpoint != nil && t.Status.Checkpoint.Step == steps.StepDetectAnchorRotation
	}); err != nil {
		return nil, stop, fmt.Errorf("%w (operator log: %s)", err, s.opLog)
	}
	say("%s: the mesh simulator, its control plane, %d meshed Deployments x %d replicas and the multicluster gateway", name, deployments, replicas)
	if s.mesh, err = meshsim.Start(ctx, meshsim.Config{RESTConfig: s.c.RESTConfig(), VolumeRefreshDelay: meshsim.Never,
		Registerer: prometheus.NewRegistry(), ClusterName: name, Oracle: oracle,
		Linkerd: reallinkerd.FromEnv()}); err != nil {
		return nil, stop, err
	}
	undo = append(undo, s.mesh.Stop)
	if err := meshsim.InstallControlPlane(ctx, kube, meshsim.ControlPlaneOptions{}); err != nil {
		return nil, stop, err
	}
	if err := meshsim.WaitForRollouts(ctx, kube, s.mesh.ControlPlane()); err != nil {
		return nil, stop, err
	}
	if s.apps, err = meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{Prefix: "emojivoto", Namespaces: namespaces, Deployments: deployments, Replicas: replicas}); err != nil {
		return nil, stop, err
	}
	gw, err := meshsim.InstallGateway(ctx, kube)
	if err != nil {
		return nil, stop, err
	}
	s.apps = append(s.apps, gw)
	if err := meshsim.WaitForRollouts(ctx, kube, s.apps); err != nil {
		return nil, stop, err
	}
	return s, stop, s.mesh.WaitForCertificates(ctx, 0, nil)
}

// linkSides links from to to as `linkerd multicluster link-gen` does: a Link and a credentials
// Secret in from, whose kubeconfig reaches to's apiserver with the token of its remote-access
// ServiceAccount.
func linkSides(ctx context.Context, from, to *side) error {
	kubeconfig, err := meshsim.RemoteAccessKubeconfig(ctx, to.c.RESTConfig())
	if err != nil {
		return err
	}
	return meshsim.Link(ctx, meshsim.LinkOptions{Source: from.c.RESTConfig(), Target: to.name, Kubeconfig: kubeconfig, GatewayAddress: "127.0.0.1"})
}

func restartSide(ctx context.Context, s *side) error {
	say("%s: kubectl rollout restart of every meshed workload", s.name)
	if err := s.mesh.RolloutRestartAll(ctx, s.apps); err != nil {
		return err
	}
	if err := meshsim.WaitForRollouts(ctx, s.c.Kube(), s.apps); err != nil {
		return err
	}
	return s.mesh.WaitForCertificates(ctx, 0, nil)
}

// gateClock times the remote gates from this process's watches of both TrustAnchorRotations:
// when a cluster's status first reports what the other's gate waits for (its data plane on a
// bundle holding the new anchor; its pods on new-anchor certificates), and when the other's
// checkpoint first moves past that gate.
type gateClock struct {
	mu    sync.Mutex
	names map[*client.Client]string
	ready map[string]time.Time // "<cluster>/<gate step>": its status lets the other pass
	at    map[string]time.Time // "<cluster>/<gate step>": its checkpoint reached the gate
	pass  map[string]time.Time // "<cluster>/<gate step>": its checkpoint moved past the gate
}

func newGateClock(sides ...*side) *gateClock {
	g := &gateClock{names: map[*client.Client]string{}, ready: map[string]time.Time{}, at: map[string]time.Time{}, pass: map[string]time.Time{}}
	for _, s := range sides {
		g.names[s.tars] = s.name
	}
	return g
}

// stepsAfter are the steps after each remote gate, in order: a checkpoint at one of them has
// passed the gate.
var stepsAfter = func() map[string][]string {
	all := steps.Facts().Steps()
	out := map[string][]string{}
	for i, st := range all {
		if st.Gate != 0 {
			for _, later := range all[i+1:] {
				out[st.Name] = append(out[st.Name], later.Name)
			}
		}
	}
	return out
}()

func (g *gateClock) watch(ctx context.Context, s *side) {
	for ctx.Err() == nil {
		w, err := s.tars.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", steps.DefaultRotationName).String()})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if t, ok := ev.Object.(*v1alpha1.TrustAnchorRotation); ok {
				g.observe(s.name, t, time.Now())
			}
		}
		w.Stop()
	}
}

func (g *gateClock) observe(name string, t *v1alpha1.TrustAnchorRotation, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &t.Status
	first := func(m map[string]time.Time, key string) {
		if _, ok := m[key]; !ok {
			m[key] = now
		}
	}
	anchor := steps.RemoteAnchor(st)
	if st.Checkpoint == nil || anchor == "" || anchor == st.PreviousAnchorFingerprint {
		return // not rotating, or Synced again
	}
	if tb := st.TrustBundle; tb != nil && tb.Status == v1alpha1.Converged && slices.Contains(tb.Anchors, anchor) {
		first(g.ready, name+"/"+steps.StepWaitForRemoteTrustRoots)
	}
	if wc := st.WorkloadCertificates; wc != nil && wc.Status == v1alpha1.Converged && slices.Equal(wc.Anchors, []string{anchor}) {
		first(g.ready, name+"/"+steps.StepWaitForRemoteCertificates)
	}
	for gate, later := range stepsAfter {
		if st.Checkpoint.Step == gate {
			first(g.at, name+"/"+gate)
		}
		if slices.Contains(later, st.Checkpoint.Step) {
			first(g.pass, name+"/"+gate)
		}
	}
}

// report prints, for each gate a cluster waited at, the time from the other cluster's status
// allowing it to the gate's passing.
func (g *gateClock) report() {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.names))
	for _, n := range g.names {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, gate := range []string{steps.StepWaitForRemoteTrustRoots, steps.StepWaitForRemoteCertificates} {
		for _, n := range names {
			other := names[0]
			if other == n {
				other = names[1]
			}
			passed, ok1 := g.pass[n+"/"+gate]
			ready, ok2 := g.ready[other+"/"+gate]
			at, waited := g.at[n+"/"+gate]
			if !ok1 || !ok2 {
				fmt.Printf("remote gate %s of %s: not timed (passed %v, %s ready %v)\n", gate, n, ok1, other, ok2)
				continue
			}
			if !waited || at.After(ready) {
				// It reached the gate after the other allowed it: it did not wait on it.
				fmt.Printf("remote gate %s of %s: no wait (%s was ready before %s reached the gate)\n", gate, n, other, n)
				continue
			}
			fmt.Printf("remote gate %s of %s: passed %s after %s's status allowed it\n", gate, n, passed.Sub(ready).Round(time.Millisecond), other)
		}
	}
}

// remoteReadUserAgent is the operator's user agent on a linked cluster's apiserver
// (observe.RemoteClient); the audit log records it with the request.
const remoteReadUserAgent = "trust-rotation-operator (remote read)"

// reportRemoteReads prints the requests from's operator made to to's apiserver (its remote-read
// user agent, from to's audit log) since the clusters were linked.
func reportRemoteReads(from, to *side, linked time.Time) error {
	events, err := to.c.AuditEvents()
	if err != nil {
		return err
	}
	verbs := map[string]int{}
	total, writes := 0, 0
	for _, ev := range events {
		if strings.HasPrefix(ev.UserAgent, "trust-rotation-operator/") && ev.Verb == "update" {
			writes++ // to's own operator writing its status: each reaches from's watch
		}
		if ev.UserAgent != remoteReadUserAgent {
			continue
		}
		verbs[ev.Verb]++
		total++
	}
	var parts []string
	for v, n := range verbs {
		parts = append(parts, fmt.Sprintf("%d %s", n, v))
	}
	sort.Strings(parts)
	fmt.Printf("%s's operator on %s's apiserver: %d request(s) in the %s since they were linked (%s), all of TrustAnchorRotation %s, while %s's operator wrote it %d time(s) in all, each change reaching the watch\n",
		from.name, to.name, total, time.Since(linked).Round(time.Second), strings.Join(parts, ", "), steps.DefaultRotationName, to.name, writes)
	return nil
}
