package faults

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// stuckName is the Deployment whose pod never runs; it sorts before the sample workloads
// (svc-N) of its namespace, so the blocking message's example pod is its pod while it is stuck.
const stuckName = "stuck"

// TestStuckPods runs one rotation through four stuck pods, all in place when the operator starts
// waiting for the workloads' new certificates (renew-workload-certificates), and fixes them one
// at a time in the order the blocking message names them (namespace, then name):
//  1. a meshed pod that never runs (its nodeSelector matches no node): the message names the pod,
//     "not running"; fixed by removing the nodeSelector;
//  2. a proxy that refuses TLS on its admin port (every pod of app-0/svc-0): the message names a
//     pod, "probe failed: TLS handshake ..."; then the same proxies present another identity's
//     live chain with its key, then their own chain without its key: each time the message names
//     a pod and the rejection ("presents identity ...", "... without proving it holds its key"),
//     `linkerd trust inspect` says "Rejected certificate", the operator counts the probes as
//     rejected, and the pods are never counted converged; fixed by clearing the fault;
//  3. a proxy whose admin port accepts and never answers (every pod of app-0/svc-2): the message
//     names a pod, "probe failed: ... deadline exceeded"; one pod is deleted while a probe of it
//     is in flight (replaced by its Deployment): the message moves on to the other pod;
//  4. that other pod is fixed by clearing its fault.
//
// The formerly stuck Deployment is then restarted when the trust-bundle reduction names it.
// Expected: while any fault holds, the rotation stays at renew-workload-certificates with a
// blockingMessage naming the first stuck pod and the reason (and the stuck workloads); after the
// last fix it resumes on its own and reaches Synced; 0 mTLS violations throughout.
func TestStuckPods(t *testing.T) {
	e := SharedEnv(t)
	kube := e.Cluster.Kube()
	refuse, hang := e.Apps[0], e.Apps[2] // app-0/svc-0, app-0/svc-2
	if refuse.Namespace != hang.Namespace {
		t.Fatalf("the sample workloads are not laid out as expected: %v", e.Apps)
	}
	ns := refuse.Namespace
	stuck := meshsim.Workload{Namespace: ns, Name: stuckName}
	t.Cleanup(func() {
		e.Mesh.ClearProxyFaults()
		deleteStuck(t, e)
	})

	start := time.Now()
	sup := NewSupervisor(t, e)
	op := sup.Start("")
	defer sup.Stop()

	const (
		before = iota
		notRunning
		refusesTLS
		foreignChain
		unprovenChain
		hangs
		deletedWhileProbed
		fixed
	)
	stage := before
	var stageStart time.Time
	var first, second corev1.Pod // the hanging pods: the one deleted mid-probe, the one fixed
	advance := func(next int, format string, args ...any) {
		t.Helper()
		t.Logf("after %s: "+format, append([]any{time.Since(stageStart).Round(time.Millisecond)}, args...)...)
		stage, stageStart = next, time.Now()
	}
	restartedStuck := false
	onPoll := func(tar *v1alpha1.TrustAnchorRotation) {
		step, msg := stepOf(tar), tar.Status.BlockingMessage
		switch {
		case stage == fixed:
			// The pod that never ran was replaced onto the expanded bundle: like every
			// workload, it needs a restart onto the reduced one, and the operator names it.
			if !restartedStuck && step == steps.StepRemoveOldTrustRoots && strings.Contains(msg, "restart: ") &&
				strings.Contains(msg, ns+"/Deployment/"+stuckName) {
				restartedStuck = true
				t.Logf("at %s, restarting %s as named: %q", step, stuck, msg)
				if err := e.Mesh.RolloutRestart(e.Ctx, stuck); err != nil {
					t.Fatal(err)
				}
				if err := meshsim.WaitForRollout(e.Ctx, kube, stuck); err != nil {
					t.Fatal(err)
				}
			}
			return
		case stage == before:
			if step != steps.StepRenewWorkloadCertificates {
				return
			}
			// Before the user restarts the workloads (drive does next): the restarted pods of
			// these two Deployments start with the fault.
			e.Mesh.SetWorkloadProxyFault(refuse.Namespace, refuse.Name, meshsim.ProxyFaultRefuseTLS)
			e.Mesh.SetWorkloadProxyFault(hang.Namespace, hang.Name, meshsim.ProxyFaultHang)
			createStuck(t, e, refuse.Name)
			stageStart = time.Now()
			stage = notRunning
			t.Logf("at %s: faults injected (%s refuses TLS, %s hangs), Deployment %s pending", step, refuse, hang, stuck)
			return
		case step != steps.StepRenewWorkloadCertificates:
			t.Fatalf("the rotation went on to %s (phase %s) while a pod was still stuck (stage %d): %q", step, tar.Status.Phase, stage, msg)
		}
		names := func(p corev1.Pod, reason string) bool {
			return strings.Contains(msg, "e.g. pod "+p.Namespace+"/"+p.Name+": "+reason)
		}
		switch stage {
		case notRunning:
			pods := livePods(t, e, stuck)
			if len(pods) != 1 || pods[0].Status.Phase != corev1.PodPending || !names(pods[0], "not running") ||
				!strings.Contains(msg, ns+"/Deployment/"+refuse.Name) || !strings.Contains(msg, ns+"/Deployment/"+hang.Name) {
				return
			}
			advance(refusesTLS, "parked on the pod that never runs: %q", msg)
			patch := []byte(`[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
			if _, err := kube.AppsV1().Deployments(ns).Patch(e.Ctx, stuckName, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatalf("removing the impossible nodeSelector: %v", err)
			}
		case refusesTLS:
			if !slices.ContainsFunc(livePods(t, e, refuse), func(p corev1.Pod) bool { return names(p, "probe failed: TLS handshake") }) {
				return
			}
			advance(foreignChain, "the pod that never ran was replaced; parked on the proxy refusing TLS: %q", msg)
			e.Mesh.SetWorkloadProxyFault(refuse.Namespace, refuse.Name, meshsim.ProxyFaultForeignChain)
		case foreignChain:
			if !rejectedNamed(t, e, tar, livePods(t, e, refuse), names, "presents identity ", ", expected ") {
				return
			}
			advance(unprovenChain, "parked on the proxies presenting another identity's chain: %q", msg)
			e.Mesh.SetWorkloadProxyFault(refuse.Namespace, refuse.Name, meshsim.ProxyFaultUnprovenChain)
		case unprovenChain:
			if !rejectedNamed(t, e, tar, livePods(t, e, refuse), names, "presents a certificate for ", " without proving it holds its key") {
				return
			}
			checkRejectedProbes(t, op)
			advance(hangs, "parked on the proxies presenting their chain without its key: %q", msg)
			e.Mesh.SetWorkloadProxyFault(refuse.Namespace, refuse.Name, meshsim.ProxyFaultNone)
		case hangs:
			pods := livePods(t, e, hang)
			if len(pods) != 2 || !names(pods[0], "probe failed:") ||
				!strings.Contains(msg, "deadline exceeded") && !strings.Contains(msg, "timeout") {
				return
			}
			advance(deletedWhileProbed, "the proxy refusing TLS was fixed; parked on the proxy that hangs: %q", msg)
			first, second = pods[0], pods[1]
			for _, p := range pods {
				e.Mesh.SetProxyFault(p.UID, meshsim.ProxyFaultHang)
			}
			e.Mesh.SetWorkloadProxyFault(hang.Namespace, hang.Name, meshsim.ProxyFaultNone) // the replacement is healthy
			if err := poll.Until(e.Ctx, time.Minute, "a probe of "+first.Name+" in flight", func(context.Context) (bool, error) {
				return e.Mesh.HungConnections(first.UID) > 0, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := kube.CoreV1().Pods(ns).Delete(e.Ctx, first.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting pod %s while it is probed: %v", first.Name, err)
			}
			t.Logf("deleted pod %s while a probe of it was in flight", first.Name)
		case deletedWhileProbed:
			if strings.Contains(msg, first.Name) || !names(second, "probe failed:") {
				return
			}
			advance(fixed, "the pod deleted while probed is forgotten; parked on the other pod that hangs: %q", msg)
			e.Mesh.SetProxyFault(second.UID, meshsim.ProxyFaultNone)
			e.Mesh.SetProxyFault(first.UID, meshsim.ProxyFaultNone)
		}
	}
	Drive(t, e, sup, DriveOpts{onPoll: onPoll, timeout: 8 * time.Minute})
	if stage != fixed {
		t.Fatalf("the rotation finished at stage %d: a stuck pod did not park it", stage)
	}
	if !restartedStuck {
		t.Error("the trust-bundle step never named the formerly stuck Deployment")
	}
	t.Logf("resumed on its own: Synced %s after the last fix; rotation took %s", time.Since(stageStart).Round(time.Millisecond), time.Since(start).Round(time.Second))
	CheckOracle(t, e, start)
}

// createStuck creates the meshed Deployment stuck in the namespace of the sample workloads,
// under an existing ServiceAccount, whose pod never runs: its nodeSelector matches no node.
func createStuck(t *testing.T, e *e2e.Env, serviceAccount string) {
	t.Helper()
	labels := map[string]string{"app": stuckName}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: stuckName, Namespace: e.Apps[0].Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: serviceAccount,
					NodeSelector:       map[string]string{"trust-rotation.test/no-such-node": "true"},
					Containers:         []corev1.Container{{Name: "app", Image: "ghcr.io/example/app:latest"}},
				},
			},
		},
	}
	if _, err := e.Cluster.Kube().AppsV1().Deployments(d.Namespace).Create(e.Ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s: %v", stuckName, err)
	}
}

// deleteStuck deletes the stuck Deployment and waits until its pods are gone, so that the
// following tests' rotations do not count them.
func deleteStuck(t *testing.T, e *e2e.Env) {
	t.Helper()
	ns := e.Apps[0].Namespace
	bg := metav1.DeletePropagationBackground
	err := e.Cluster.Kube().AppsV1().Deployments(ns).Delete(e.Ctx, stuckName, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting Deployment %s: %v", stuckName, err)
	}
	if err := poll.Until(e.Ctx, 2*time.Minute, "the stuck Deployment's pods to be gone", func(ctx context.Context) (bool, error) {
		list, err := e.Cluster.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + stuckName})
		if err != nil {
			return false, poll.Pending("listing pods: %v", err)
		}
		if len(list.Items) > 0 {
			return false, poll.Pending("%d pods left", len(list.Items))
		}
		return true, nil
	}); err != nil {
		t.Error(err)
	}
}

// livePods lists a Deployment's pods that are not being deleted, sorted by name (as the
// operator's blocking message orders them).
func livePods(t *testing.T, e *e2e.Env, w meshsim.Workload) []corev1.Pod {
	t.Helper()
	list, err := e.Cluster.Kube().CoreV1().Pods(w.Namespace).List(e.Ctx, metav1.ListOptions{LabelSelector: "app=" + w.Name})
	if err != nil {
		t.Fatalf("listing the pods of %s: %v", w, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// rejectedNamed reports whether the blocking message names one of pods with a rejection that
// begins with reason and says detail; once it does, it checks that the pods are not counted
// converged, and that `linkerd trust inspect` lists one of them as a rejected certificate with
// the same rejection.
func rejectedNamed(t *testing.T, e *e2e.Env, tar *v1alpha1.TrustAnchorRotation, pods []corev1.Pod,
	names func(corev1.Pod, string) bool, reason, detail string) bool {
	t.Helper()
	if !strings.Contains(tar.Status.BlockingMessage, detail) || !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return names(p, reason) }) {
		return false
	}
	wc := tar.Status.WorkloadCertificates
	if wc == nil || wc.Status == v1alpha1.Converged || wc.ConvergedPods > wc.TargetPods-int32(len(pods)) {
		t.Errorf("workloadCertificates %+v count converged some of the %d pods presenting a rejected chain", wc, len(pods))
	}
	out, err := exec.CommandContext(e.Ctx, e2e.Binary(t, "linkerd-trust"), "inspect", "--kubeconfig", e.Cluster.Kubeconfig()).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v: %s", err, out)
	}
	if !slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool {
		return strings.Contains(l, "Rejected certificate:") && strings.Contains(l, reason) && strings.Contains(l, detail) &&
			slices.ContainsFunc(pods, func(p corev1.Pod) bool { return strings.Contains(l, p.Namespace+"/"+p.Name) })
	}) {
		t.Errorf("inspect lists no rejected certificate of %d pods with %q:\n%s", len(pods), reason+"..."+detail, out)
	}
	return true
}

// checkRejectedProbes checks that the operator counted the rejected chains as such in
// trust_rotation_certificate_probes_total.
func checkRejectedProbes(t *testing.T, op *e2e.Operator) {
	t.Helper()
	text, err := op.Metrics(context.Background())
	if err != nil {
		t.Fatalf("reading metrics: %v", err)
	}
	const series = `trust_rotation_certificate_probes_total{result="rejected"} `
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series); ok {
			if n, err := strconv.ParseFloat(v, 64); err != nil || n < 2 {
				t.Errorf("%s%s: want at least one rejected probe per fault", series, v)
			}
			return
		}
	}
	t.Errorf("no series %s in the operator's metrics", series)
}
