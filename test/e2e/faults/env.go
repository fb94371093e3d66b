package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

const rotationName = steps.DefaultRotationName

// The trust anchor's Secret, as the test PKI issues it.
const anchorNamespace, anchorName = "cert-manager", "linkerd-trust-anchor"

// The control plane's Deployments, as meshsim installs them.
var controlPlane = []string{"linkerd-identity", "linkerd-destination", "linkerd-proxy-injector"}

// longLived keeps the shared environment's cleanups (the mesh simulator) from running at the
// end of the test that happened to create it: the environment lives as long as the test binary.
type longLived struct{ testing.TB }

func (longLived) Cleanup(func()) {}

var (
	envOnce sync.Once
	shared  *e2e.Env
	envErr  string
)

// SharedEnv returns the package's environment, creating it on first use: PKI, both charts, the
// mesh simulator with its control plane and 2×3 meshed Deployments of 2 replicas. The operator
// that bootstrapped it is stopped: each test runs operators of its own (see supervisor).
func SharedEnv(t *testing.T) *e2e.Env {
	t.Helper()
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	envOnce.Do(func() {
		var boot *e2e.Operator
		envErr = "creating the shared environment failed in an earlier test"
		shared = e2e.NewEnv(longLived{t}, context.Background(), c, e2e.EnvOptions{Namespaces: 2, Deployments: 3, Replicas: 2},
			func(rel *charts.Release) *e2e.Operator {
				boot = e2e.StartChartOperator(t, rel, "--leader-elect=false")
				return boot
			})
		boot.Stop()
	})
	if shared == nil {
		t.Fatal(envErr)
	}
	e := *shared
	e.T, e.Ctx = t, context.Background()
	return &e
}

// Supervisor runs operator processes for one test, as a Deployment would: it restarts the
// operator when it died (a crash hook, or a kill from the test).
type Supervisor struct {
	t     *testing.T
	e     *e2e.Env
	args  []string
	env   []string
	mu    sync.Mutex
	cur   *e2e.Operator
	all   []*e2e.Operator
	kills int
}

// NewSupervisor starts nothing yet; args are added to the chart's arguments.
func NewSupervisor(t *testing.T, e *e2e.Env, args ...string) *Supervisor {
	base := []string{"--leader-elect=false"}
	return &Supervisor{t: t, e: e, args: append(base, args...)}
}

// Start starts an operator; crashAt sets the crash hook (app.CrashEnv) for this process only.
func (s *Supervisor) Start(crashAt string, extra ...string) *e2e.Operator {
	s.t.Helper()
	env := append([]string{"POD_NAMESPACE=" + s.e.Release.Namespace}, s.env...)
	if crashAt != "" {
		env = append(env, app.CrashEnv+"="+crashAt)
	}
	args := append(append(append([]string{}, s.e.Release.OperatorArgs...), s.args...), extra...)
	op := e2e.StartOperatorWithEnv(s.t, env, s.e.Release.Kubeconfig, args...)
	s.mu.Lock()
	s.cur = op
	s.all = append(s.all, op)
	s.mu.Unlock()
	return op
}

// Ensure restarts the operator when it exited, and reports whether it did.
func (s *Supervisor) Ensure() bool {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil && !cur.Exited() {
		return false
	}
	s.Start("")
	return true
}

// Kill SIGKILLs the current operator.
func (s *Supervisor) Kill() {
	s.mu.Lock()
	cur := s.cur
	s.kills++
	s.mu.Unlock()
	cur.Kill()
}

// Stop ends every operator it started and scans their logs for key material.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	ops := s.all
	s.mu.Unlock()
	for _, op := range ops {
		op.Kill()
	}
	ScanLogs(s.t, s.e, ops)
}

// ScanLogs fails the test when an operator log holds key material of the cluster's Secrets
// (e2e.KeyMaterial).
func ScanLogs(t *testing.T, e *e2e.Env, ops []*e2e.Operator) {
	t.Helper()
	var keys e2e.KeyMaterial
	if err := keys.Collect(e.Ctx, e.Cluster.Kube()); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		data, err := os.ReadFile(op.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, found := range keys.Find("operator log "+op.LogPath, data) {
			t.Error(found)
		}
	}
}

// CheckPreviousAnchorHasNoKey fails unless linkerd-previous-anchor holds tls.crt only.
func CheckPreviousAnchorHasNoKey(t *testing.T, e *e2e.Env) {
	t.Helper()
	sec, err := e.Cluster.Kube().CoreV1().Secrets("linkerd").Get(e.Ctx, "linkerd-previous-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sec.Data {
		if k != steps.CertificateKey || bytes.Contains(v, []byte("PRIVATE KEY")) {
			t.Errorf("linkerd-previous-anchor holds %q: it must hold the certificate only", k)
		}
	}
}

// Ledger counts, from watches, every write a rotation makes: the distinct restartedAt values
// each control-plane Deployment's pod template carried, the distinct trust bundles and
// previous anchors written, and the distinct act tokens (with their act counts) each step used.
type Ledger struct {
	mu         sync.Mutex
	started    time.Time
	restarts   map[string]map[string]bool // deployment -> restartedAt values seen (initial excluded)
	initial    map[string]string
	bundles    map[string]bool
	initBundle string
	previous   map[string]bool
	initPrev   string
	// anchors are the distinct certificates the trust anchor's Secret held after the ledger
	// started, in order: one per issuance by cert-manager.
	anchors    []string
	initAnchor string
	tokens     map[string]map[string]int32 // step -> token stamp -> max acts
	// identityReplicas are linkerd-identity's spec.replicas in the order the watch saw them,
	// each once per change, after initReplicas.
	identityReplicas []int32
	initReplicas     int32
	// inFlight is, per rotation (the checkpoint's new anchor), the most anchors
	// status.inFlightAnchors held at once.
	inFlight map[string]int
	// bundleSeq and previousSeq are the trust bundles and previous anchors in the order the
	// watches saw them, each once per change.
	bundleSeq, previousSeq []string
	// strategies are the strategies the rotations' checkpoints recorded, per rotation.
	strategies map[string]v1alpha1.RotationStrategy
	stop       context.CancelFunc
}

// NewLedger starts counting the writes from now, until the test ends.
func NewLedger(t *testing.T, e *e2e.Env) *Ledger {
	t.Helper()
	kube := e.Cluster.Kube()
	l := &Ledger{started: time.Now(), restarts: map[string]map[string]bool{}, initial: map[string]string{}, bundles: map[string]bool{},
		previous: map[string]bool{}, tokens: map[string]map[string]int32{}, inFlight: map[string]int{},
		strategies: map[string]v1alpha1.RotationStrategy{}}
	for _, d := range controlPlane {
		dep, err := kube.AppsV1().Deployments("linkerd").Get(e.Ctx, d, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.initial[d] = dep.Spec.Template.Annotations[steps.RestartedAtAnnotation]
		l.restarts[d] = map[string]bool{}
		if d == "linkerd-identity" {
			l.initReplicas = replicasOf(dep)
		}
	}
	l.initBundle = bundleOf(t, e)
	sec, err := kube.CoreV1().Secrets("linkerd").Get(e.Ctx, "linkerd-previous-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.initPrev = string(sec.Data[steps.CertificateKey])
	anchor, err := kube.CoreV1().Secrets(anchorNamespace).Get(e.Ctx, anchorName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.initAnchor = string(anchor.Data[steps.CertificateKey])

	ctx, cancel := context.WithCancel(e.Ctx)
	l.stop = cancel
	core := kube.CoreV1().RESTClient()
	infs := []cache.SharedIndexInformer{
		cache.NewSharedIndexInformer(cache.NewListWatchFromClient(kube.AppsV1().RESTClient(), "deployments", "linkerd", fields.Everything()), &appsv1.Deployment{}, 0, nil),
		cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "configmaps", "linkerd", fields.OneTermEqualSelector("metadata.name", "linkerd-identity-trust-roots")), &corev1.ConfigMap{}, 0, nil),
		cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "secrets", "linkerd", fields.OneTermEqualSelector("metadata.name", "linkerd-previous-anchor")), &corev1.Secret{}, 0, nil),
		cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "secrets", anchorNamespace, fields.OneTermEqualSelector("metadata.name", anchorName)), &corev1.Secret{}, 0, nil),
		cache.NewSharedIndexInformer(e.TARs.ListWatch(fields.OneTermEqualSelector("metadata.name", rotationName)), &v1alpha1.TrustAnchorRotation{}, 0, nil),
	}
	record := func(obj any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch o := obj.(type) {
		case *appsv1.Deployment:
			if seen, ok := l.restarts[o.Name]; ok {
				if v := o.Spec.Template.Annotations[steps.RestartedAtAnnotation]; v != "" && v != l.initial[o.Name] {
					seen[v] = true
				}
			}
			if o.Name == "linkerd-identity" {
				last := l.initReplicas
				if n := len(l.identityReplicas); n > 0 {
					last = l.identityReplicas[n-1]
				}
				if r := replicasOf(o); r != last {
					l.identityReplicas = append(l.identityReplicas, r)
				}
			}
		case *corev1.ConfigMap:
			if b := o.Data[steps.TrustRootsKey]; b != l.initBundle {
				l.bundles[b] = true
				if n := len(l.bundleSeq); n == 0 || l.bundleSeq[n-1] != b {
					l.bundleSeq = append(l.bundleSeq, b)
				}
			}
		case *corev1.Secret:
			if o.Namespace == anchorNamespace {
				if a := string(o.Data[steps.CertificateKey]); a != l.initAnchor && !slices.Contains(l.anchors, a) {
					l.anchors = append(l.anchors, a)
				}
				return
			}
			if p := string(o.Data[steps.CertificateKey]); p != l.initPrev {
				l.previous[p] = true
				if n := len(l.previousSeq); n == 0 || l.previousSeq[n-1] != p {
					l.previousSeq = append(l.previousSeq, p)
				}
			}
		case *v1alpha1.TrustAnchorRotation:
			if cp := o.Status.Checkpoint; cp != nil && cp.Rotation != "" {
				l.inFlight[cp.Rotation] = max(l.inFlight[cp.Rotation], len(o.Status.InFlightAnchors))
				if prev, ok := l.strategies[cp.Rotation]; !ok || prev == cp.Strategy {
					l.strategies[cp.Rotation] = cp.Strategy
				} else {
					l.strategies[cp.Rotation] = "changed " + prev + " -> " + cp.Strategy
				}
			}
			if cp := o.Status.Checkpoint; cp != nil && cp.Token != "" {
				if l.tokens[cp.Step] == nil {
					l.tokens[cp.Step] = map[string]int32{}
				}
				// A step may extend its token at a later act (restart-identity records the
				// replicas it scales identity back to): the stamp is the act's identity.
				stamp, _, _ := strings.Cut(cp.Token, " ")
				l.tokens[cp.Step][stamp] = max(l.tokens[cp.Step][stamp], cp.Acts)
			}
		}
	}
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }}); err != nil {
			t.Fatal(err)
		}
		go inf.RunWithContext(ctx)
	}
	for _, inf := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("ledger informers did not sync")
		}
	}
	return l
}

// Close stops the ledger's watches.
func (l *Ledger) Close() { l.stop() }

// Summary is the ledger in one line, for logs.
func (l *Ledger) Summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, d := range controlPlane {
		parts = append(parts, fmt.Sprintf("%s restarts=%d", strings.TrimPrefix(d, "linkerd-"), len(l.restarts[d])))
	}
	parts = append(parts, fmt.Sprintf("bundle writes=%d previous writes=%d identity replicas %d->%v", len(l.bundles), len(l.previous), l.initReplicas, l.identityReplicas))
	var acts []string
	for step, toks := range l.tokens {
		for _, n := range toks {
			acts = append(acts, fmt.Sprintf("%s:%d", step, n))
		}
	}
	return strings.Join(parts, ", ") + "; acts " + strings.Join(acts, " ")
}

// Reissued says how cert-manager issued the trust anchor more often than the scenario renewed
// it (renewals times), or "" when it did not. cert-manager may issue a Certificate twice for
// one request: its trigger controller compares the Secret and the CertificateRequest from two
// informers, and a Secret seen late looks like a key that does not match (SecretMismatch). The
// operator handles that as any renewal mid-rotation (it supersedes the rotation, with 0
// violations), but then the rotation legitimately writes more than one rotation's worth, so the
// exact counts of checkNoRepeats do not apply to that run.
func (l *Ledger) Reissued(t *testing.T, e *e2e.Env, renewals int) string {
	t.Helper()
	l.mu.Lock()
	anchors := append([]string(nil), l.anchors...)
	l.mu.Unlock()
	if len(anchors) <= renewals {
		return ""
	}
	fps := describeBundles(anchors)
	var why []string
	events, err := e.Cluster.Kube().CoreV1().Events(anchorNamespace).List(e.Ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", anchorName).String()})
	if err == nil {
		for _, ev := range events.Items {
			if ev.Reason == "Issuing" && ev.LastTimestamp.After(l.started) {
				why = append(why, fmt.Sprintf("%q ×%d", ev.Message, ev.Count))
			}
		}
	}
	return fmt.Sprintf("cert-manager issued Secret %s/%s %d times (%s) for %d renewal(s); its Issuing Events since the run started: %s",
		anchorNamespace, anchorName, len(anchors), fps, renewals, strings.Join(why, ", "))
}

// RepeatOnReissue runs a scenario, and runs it again (three runs at most) when it reports that
// cert-manager issued the anchor more often than it renewed it (see reissued): each run checks
// the oracle before it reports, so safety is judged in every run; the exact write counts are
// judged in the run that had one issuance per renewal.
func RepeatOnReissue(t *testing.T, scenario func() (reissued string)) {
	t.Helper()
	for run := 1; ; run++ {
		why := scenario()
		if why == "" || t.Failed() {
			return
		}
		if run == 3 {
			t.Fatalf("%d runs in a row: %s", run, why)
		}
		t.Logf("run %d: %s; the exact write counts hold for one issuance per renewal: running the scenario again", run, why)
	}
}

// CheckNoRepeats fails unless the rotation made each destructive write exactly as often as a
// rotation without faults: three restarts of each control-plane Deployment, two bundles, one
// previous anchor, and one token per acting step (an act repeated after a crash reuses it).
// With the issuer renewed early (earlyIssuer), restart-identity scales identity to 0 and back
// to its replicas once instead of restarting it: two restarts of identity; otherwise its
// replicas never change. A cross-signed rotation (its checkpoint's strategy, which must not
// change while it runs) passes over expand-trust-bundle, refresh-control-plane and
// restart-identity: two restarts of each Deployment and one bundle, the reduced one.
func (l *Ledger) CheckNoRepeats(t *testing.T, earlyIssuer bool) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	crossSigned := false
	for rotation, s := range l.strategies {
		switch s {
		case v1alpha1.StrategyCrossSigned:
			crossSigned = true
		case v1alpha1.StrategyStandard:
		default:
			t.Errorf("rotation %s recorded strategy %q", steps.ShortFingerprint(rotation), s)
		}
	}
	if crossSigned && len(l.strategies) > 1 {
		t.Errorf("the rotations recorded strategies %v, want one rotation", l.strategies)
	}
	for _, d := range controlPlane {
		want := 3
		if earlyIssuer && d == "linkerd-identity" || crossSigned {
			want = 2
		}
		if n := len(l.restarts[d]); n != want {
			t.Errorf("Deployment %s was restarted %d times (restartedAt %v), want %d", d, n, keys(l.restarts[d]), want)
		}
	}
	var want []int32
	if earlyIssuer {
		want = []int32{0, l.initReplicas}
	}
	if !slices.Equal(l.identityReplicas, want) {
		t.Errorf("linkerd-identity's replicas went %d -> %v, want %v", l.initReplicas, l.identityReplicas, want)
	}
	switch n := len(l.bundles); {
	case crossSigned && n != 1:
		t.Errorf("the trust bundle was written with %d different contents, want 1 (reduced: a cross-signed rotation does not expand it)", n)
	case !crossSigned && n != 2:
		t.Errorf("the trust bundle was written with %d different contents, want 2 (expanded, reduced)", n)
	}
	if n := len(l.previous); n != 1 {
		t.Errorf("linkerd-previous-anchor was written with %d different certificates, want 1", n)
	}
	for step, toks := range l.tokens {
		if len(toks) != 1 {
			t.Errorf("step %s acted under %d tokens %v, want 1: an act was repeated with a new token", step, len(toks), toks)
		}
	}
}

// CheckStrategy fails unless every rotation the ledger saw recorded the strategy in its
// checkpoint, from start to end (a resumed operator must not lose it), and one did.
func (l *Ledger) CheckStrategy(t *testing.T, want v1alpha1.RotationStrategy) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.strategies) == 0 {
		t.Errorf("no rotation recorded a strategy in its checkpoint, want %s", want)
	}
	for rotation, s := range l.strategies {
		if s != want {
			t.Errorf("rotation %s recorded strategy %q in its checkpoint, want %s", steps.ShortFingerprint(rotation), s, want)
		}
	}
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func bundleOf(t testing.TB, e *e2e.Env) string {
	t.Helper()
	cm, err := e.Cluster.Kube().CoreV1().ConfigMaps("linkerd").Get(e.Ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[steps.TrustRootsKey]
}

func stepOf(tar *v1alpha1.TrustAnchorRotation) string {
	if tar.Status.Checkpoint == nil {
		return ""
	}
	return tar.Status.Checkpoint.Step
}

// DriveOpts tune a rotation driven by Drive.
type DriveOpts struct {
	// earlyIssuer renews the issuer right after the anchor.
	earlyIssuer bool
	// strategy, when set, is the rotation's: spec.strategy is set, and the anchor re-issued as
	// the strategy needs when it is not yet (e2e.Env.RenewForStrategy). "" keeps the spec's.
	strategy v1alpha1.RotationStrategy
	// onPoll runs at every observation of the TrustAnchorRotation, to inject faults.
	onPoll  func(tar *v1alpha1.TrustAnchorRotation)
	timeout time.Duration
}

// Restarter restarts dead operators; Drive calls it at every observation.
type Restarter interface{ Ensure() bool }

// Drive renews the trust anchor and plays a user following README's Rotate section until the
// rotation is Synced on the newest anchor: it restarts the workloads when the operator waits for
// them, renews the issuer when it waits for that, and restarts the operator (through sup)
// whenever it died.
func Drive(t *testing.T, e *e2e.Env, sup Restarter, o DriveOpts) {
	t.Helper()
	if err := DriveErr(t, e, sup, o); err != nil {
		t.Fatalf("%v\nrollouts not finished:\n%s", err, e2e.DescribeUnfinishedRollouts(e.Ctx, e.Cluster.Kube(), e.Namespaces()...))
	}
}

// DriveErr is Drive returning the error of a rotation that did not finish in time.
func DriveErr(t *testing.T, e *e2e.Env, sup Restarter, o DriveOpts) error {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 4 * time.Minute
	}
	// Every wait of the rotation, the workload restarts' included, ends with the rotation's time.
	ctx, cancel := context.WithTimeout(e.Ctx, o.timeout)
	defer cancel()
	ec := *e
	ec.Ctx = ctx
	e = &ec
	if o.strategy != "" {
		e.RenewForStrategy(o.strategy)
	} else {
		e.Renew("cert-manager", "linkerd-trust-anchor")
	}
	if o.earlyIssuer {
		e.Renew("linkerd", "linkerd-identity-issuer")
	}
	did := map[string]bool{}
	started := false
	return poll.Until(e.Ctx, o.timeout, "the rotation to finish", func(ctx context.Context) (bool, error) {
		sup.Ensure()
		tar, err := e.TARs.Get(ctx, rotationName)
		if err != nil {
			return false, poll.Pending("getting the TrustAnchorRotation: %v", err)
		}
		if o.onPoll != nil {
			o.onPoll(tar)
		}
		step, rotation := stepOf(tar), ""
		if cp := tar.Status.Checkpoint; cp != nil {
			rotation = cp.Rotation
		}
		started = started || rotation != ""
		once := func(what string, fn func()) {
			if key := what + "/" + rotation; !did[key] {
				did[key] = true
				fn()
			}
		}
		switch step {
		case steps.StepPropagateTrustRoots:
			if tar.Status.Checkpoint.Strategy == v1alpha1.StrategyCrossSigned {
				// A cross-signed rotation waits here only for pods behind its unchanged bundle
				// (a superseded rotation's final restart that did not happen): say so in the log.
				once("cross-signed-propagate", func() {
					t.Logf("cross-signed rotation to %.12s waits at %s: %s", rotation, step, tar.Status.BlockingMessage)
				})
			}
			once("propagate", e.RestartApps)
		case steps.StepWaitForIdentityIssuer:
			if !strings.Contains(tar.Status.BlockingMessage, "signed by neither") {
				once("issuer", func() { e.Renew("linkerd", "linkerd-identity-issuer") })
			}
		case steps.StepRenewWorkloadCertificates:
			once("certificates", e.RestartApps)
		case steps.StepRemoveOldTrustRoots:
			once("final", e.RestartApps)
		case steps.StepDetectAnchorRotation:
			anchor := e.SecretCert("cert-manager", "linkerd-trust-anchor")
			if started && tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.PreviousAnchorFingerprint == steps.Fingerprint(anchor) &&
				bundleOf(t, e) == steps.RenderBundle(anchor) {
				return true, nil
			}
		}
		return false, poll.Pending("phase %s, step %s: %q", tar.Status.Phase, step, tar.Status.BlockingMessage)
	})
}

// CheckOracle fails the test when the oracle saw an mTLS violation since start.
func CheckOracle(t *testing.T, e *e2e.Env, start time.Time) {
	t.Helper()
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Fatalf("mTLS violations: %v", err)
	}
}

// describeBundles names the anchors of each PEM text, by short fingerprint.
func describeBundles(pems []string) string {
	var out []string
	for _, p := range pems {
		certs, err := steps.ParseCertificates([]byte(p))
		if err != nil {
			out = append(out, "[unparseable]")
			continue
		}
		var fps []string
		for _, c := range certs {
			fps = append(fps, steps.Fingerprint(c)[:12])
		}
		out = append(out, "["+strings.Join(fps, " ")+"]")
	}
	return strings.Join(out, " ")
}
