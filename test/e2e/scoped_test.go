package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// scopedNamespace is the one namespace TestScopedRestartsLeakNoKey lets the operator restart in.
const scopedNamespace = "app-0"

// outOfScopeMarker starts the part of a blocking message that names the workloads the operator
// may not restart (steps.restartPlan.describe).
const outOfScopeMarker = "outside the namespaces the operator may restart in (--restart-namespaces; restart them yourself): "

// TestScopedRestartsLeakNoKey rotates with automatic restarts allowed in one namespace only
// (dataPlaneRestart.rbacScope Namespaces, under the chart's admission policy), the operator under
// the chart's ServiceAccount at the highest log verbosity: the operator restarts the workloads of
// that namespace and names the others, which the test restarts as a user would, until the
// rotation completes with no mTLS violation. Then no private key of the cluster's Secrets shows
// in anything the rotation produced: the operator's log, the Events, the TrustAnchorRotation's
// status at every observation, the operator's /metrics, and the output of every CLI command, run
// as the admin (who may read the Secrets) during the rotation and after it.
func TestScopedRestartsLeakNoKey(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	// The chart's RoleBinding goes into the namespace, so it exists first, as meshsim makes it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scopedNamespace, Annotations: map[string]string{meshsim.AnnotationInject: "enabled"}}}
	if _, err := c.Kube().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	set := append(append([]string{}, automationValues...), "dataPlaneRestart.rbacScope=Namespaces", "dataPlaneRestart.namespaces={"+scopedNamespace+"}")
	// The operator at the highest verbosity, reading its Secrets with plain LISTs, as client-go
	// does against an apiserver without streaming lists (before Kubernetes 1.32, or with the
	// WatchList feature off): the responses, which carry the private keys, go through client-go's
	// request logging, unlike the events of a watch.
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 2, Replicas: 1, ChartSet: set}, func(rel *charts.Release) *Operator {
		args := append(append([]string{}, rel.OperatorArgs...), "--v=10")
		return StartOperatorWithEnv(t, []string{"POD_NAMESPACE=" + rel.Namespace, "KUBE_FEATURE_WatchListClient=false"}, rel.Kubeconfig, args...)
	})
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := charts.Install(ctx, c, charts.InstallOptions{Set: []string{"rotation.spec.dataPlaneRestart.policy=Manual"}}); err != nil {
			t.Errorf("restoring the charts' defaults: %v", err)
		}
		if err := e.resetSpec(ctx); err != nil {
			t.Errorf("restoring the rotation's default spec: %v", err)
		}
	})
	if !slices.Contains(e.Release.OperatorArgs, "--restart-namespaces="+scopedNamespace) {
		t.Fatalf("the chart runs the operator with %v, not limited to %s", e.Release.OperatorArgs, scopedNamespace)
	}
	// Every restart below passes the chart's admission policy.
	policy := e.Release.Deployment.Name + "-restart"
	if _, err := c.Kube().AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, policy, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's ValidatingAdmissionPolicyBinding %s: %v", policy, err)
	}
	var keys KeyMaterial
	collect := func() {
		t.Helper()
		if err := keys.Collect(ctx, c.Kube()); err != nil {
			t.Fatal(err)
		}
	}
	collect()
	cli := &cliRuns{t: t, ctx: ctx, bin: Binary(t, "linkerd-trust"), kubeconfig: c.Kubeconfig()}
	var statuses bytes.Buffer
	start := time.Now()
	e.Mesh.ResetRolloutStats()

	newAnchor := e.Renew("cert-manager", "linkerd-trust-anchor")
	collect()
	byUs := restartAsAsked(e, newAnchor, func(tar *v1alpha1.TrustAnchorRotation) {
		b, _ := json.Marshal(tar)
		statuses.Write(append(b, '\n'))
	}, func() {
		collect()
		if cli.runs == 0 {
			cli.all(true) // once, mid-rotation: rotate then refuses
		}
	})
	collect()

	stats := e.Mesh.RolloutStats()
	for _, w := range e.Apps {
		n, ours := stats.Restarts[w.String()], byUs[w.String()]
		switch {
		case w.Namespace == scopedNamespace && (n < 2 || ours > 0):
			t.Errorf("%s, in the operator's restart namespace, restarted %d times, %d by the test: want 2 or more, all by the operator", w, n, ours)
		case w.Namespace != scopedNamespace && (ours < 2 || n != ours):
			t.Errorf("%s, outside the operator's restart namespace, restarted %d times, %d by the test: want 2 or more, all by the test", w, n, ours)
		}
	}
	if err := e.Mesh.Oracle().CheckNoViolationsSince(start); err != nil {
		t.Errorf("mTLS violations: %v", err)
	}

	t.Run("NoKeyMaterialAnywhere", func(t *testing.T) {
		cli.t = t
		cli.all(false)
		if keys.Keys() == 0 {
			t.Fatal("no private key collected from the cluster's Secrets: the scan would prove nothing")
		}
		var sources []source
		log, err := os.ReadFile(e.Operator.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		// The log shows the requests, the LIST of the trust anchor's Secret among them.
		if !bytes.Contains(log, []byte(c.Server()+"/api/v1/namespaces/cert-manager/secrets?fieldSelector=metadata.name%3Dlinkerd-trust-anchor&limit=")) {
			t.Errorf("the operator's log at --v=10 does not show the LIST of the trust anchor's Secret:\n%s", e.Operator.LogTail(20))
		}
		sources = append(sources, source{"the operator's log (--v=10) " + e.Operator.LogPath, log})
		evs, err := c.Kube().CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(evs)
		sources = append(sources, source{"the cluster's Events", b})
		tars, err := e.TARs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(tars)
		sources = append(sources, source{"the TrustAnchorRotations", b}, source{"the TrustAnchorRotation as observed during the rotation", statuses.Bytes()})
		metrics, err := e.Operator.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, source{"the operator's /metrics", []byte(metrics)})
		sources = append(sources, cli.out...)
		for _, s := range sources {
			if len(s.data) == 0 {
				t.Errorf("%s is empty: nothing to scan", s.name)
			}
			for _, found := range keys.Find(s.name, s.data) {
				t.Error(found)
			}
		}
		t.Logf("scanned %d sources (%d CLI runs) for %d needles", len(sources), cli.runs, keys.Keys())
	})
}

// restartAsAsked waits until the rotation is Synced on anchor, restarting — as the user the
// blocking message asks — the workloads it names outside the operator's restart namespaces, each
// once per step; seen gets every observation of the rotation, and asked runs before each restart.
// It returns how many times it restarted each workload, by "<ns>/<name>".
func restartAsAsked(e *Env, anchor *x509.Certificate, seen func(*v1alpha1.TrustAnchorRotation), asked func()) map[string]int {
	t := e.T
	t.Helper()
	fp := steps.Fingerprint(anchor)
	done := map[string]bool{} // step + workload
	byUs := map[string]int{}
	var pending []meshsim.Workload
	for {
		pending = nil
		tar, err := WaitRotation(e.Ctx, e.TARs, rotationName, 4*time.Minute, "Synced on anchor "+fp[:12]+", or workloads named for the user to restart",
			func(tar *v1alpha1.TrustAnchorRotation) bool {
				seen(tar)
				if tar.Status.Phase == v1alpha1.PhaseSynced && tar.Status.PreviousAnchorFingerprint == fp &&
					stepOf(tar) == steps.StepDetectAnchorRotation && tar.Status.BlockingMessage == "" {
					return true
				}
				if !restartSteps[stepOf(tar)] {
					// The status written as a later step starts may still carry the last step's message.
					return false
				}
				for _, w := range namedOutOfScope(t, tar.Status.BlockingMessage) {
					if !done[stepOf(tar)+" "+w.String()] {
						pending = append(pending, w)
					}
				}
				return len(pending) > 0
			})
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) == 0 {
			return byUs
		}
		for _, w := range pending {
			if w.Namespace == scopedNamespace {
				t.Errorf("the rotation asks the user to restart %s, in the operator's own restart namespace: %q", w, tar.Status.BlockingMessage)
			}
			done[stepOf(tar)+" "+w.String()] = true
			byUs[w.String()]++
		}
		step := stepOf(tar)
		t.Logf("%s: restarting %v, as asked", step, pending)
		asked()
		e.Restart(pending)
		// Until the operator saw the restarts: the step moved on, or names none of them.
		if _, err := WaitRotation(e.Ctx, e.TARs, rotationName, 2*time.Minute, "the rotation to see the restarts", func(tar *v1alpha1.TrustAnchorRotation) bool {
			seen(tar)
			named := namedOutOfScope(t, tar.Status.BlockingMessage)
			return stepOf(tar) != step || !slices.ContainsFunc(pending, func(w meshsim.Workload) bool { return slices.Contains(named, w) })
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// restartSteps are the steps that ask for workload restarts (the README's "you" steps).
var restartSteps = map[string]bool{steps.StepPropagateTrustRoots: true, steps.StepRenewWorkloadCertificates: true, steps.StepRemoveOldTrustRoots: true}

// namedOutOfScope parses the Deployments a blocking message names outside the operator's
// restart namespaces.
func namedOutOfScope(t testing.TB, msg string) []meshsim.Workload {
	_, rest, ok := strings.Cut(msg, outOfScopeMarker)
	if !ok {
		return nil
	}
	rest, _, _ = strings.Cut(rest, ";")
	rest, _, _ = strings.Cut(rest, " and ") // "…, x and 3 more": the rest are named once these converge
	var out []meshsim.Workload
	for _, key := range strings.Split(rest, ", ") {
		ref, ok := steps.ParseWorkload(strings.TrimSpace(key))
		if !ok || ref.Kind != "Deployment" {
			t.Fatalf("the blocking message names %q, not a Deployment: %q", key, msg)
		}
		out = append(out, meshsim.Workload{Namespace: ref.Namespace, Name: ref.Name})
	}
	return out
}

// source is something a component produced, to scan for key material.
type source struct {
	name string
	data []byte
}

// cliRuns runs every command of the CLI as the admin and keeps their output.
type cliRuns struct {
	t               *testing.T
	ctx             context.Context
	bin, kubeconfig string
	runs            int
	out             []source
}

// all runs every command, rotate too when rotating (a rotation is in progress: it refuses).
func (r *cliRuns) all(rotating bool) {
	r.t.Helper()
	cmds := [][]string{
		{"version"}, {"bundle"}, {"bundle", "-o", "json"}, {"check"}, {"check", "--pre"}, {"check", "-o", "json"},
		{"check", "--proxy", "-o", "json"}, {"inspect"}, {"inspect", "-o", "json"}, {"plan"}, {"plan", "-o", "json"},
		{"plan", "--assume-anchor-renewed", "-o", "yaml"}, {"_extension-metadata"},
	}
	if rotating {
		cmds = append(cmds, []string{"rotate"})
	}
	for _, args := range cmds {
		cmd := exec.CommandContext(r.ctx, r.bin, append(args, "--kubeconfig", r.kubeconfig)...)
		if args[0] == "version" || args[0] == "_extension-metadata" {
			cmd = exec.CommandContext(r.ctx, r.bin, args...)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
			r.t.Errorf("linkerd-trust %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		r.runs++
		r.out = append(r.out, source{"the output of linkerd-trust " + strings.Join(args, " "), out})
	}
}
