package charts

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/podrun"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/internal/proc"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// The chart's operator pod, run as a pod runs, from the image and the chart a release publishes.
// kwok runs no containers, so every other test runs the operator as a local process with the
// chart's flags; this one publishes the operator image (`make image`, no Docker engine) and both
// charts (`make chart`: helm package, helm push) to the test bed's OCI registry, installs the
// charts from there as a user does (`helm install oci://…/trust-rotation-operator --version`,
// the image pinned by digest), and runs the pods kwok holds for the chart's Deployment the way a
// kubelet and a container runtime would (test/internal/podrun): the image the pod names is
// pulled by digest from the registry and unpacked, and the operator container runs from its
// filesystem as the API holds it (the chart's command, args, env, ports, probes and security
// context, the image's entrypoint, environment and user, and the ServiceAccount admission's
// kube-api-access volume), with nothing but in-cluster configuration — the `kubernetes`
// Service's KUBERNETES_SERVICE_HOST/PORT, reached through a stand-in for kube-proxy, and a
// TokenRequest token of the chart's ServiceAccount bound to the pod, with the cluster CA, at
// /var/run/secrets/kubernetes.io/serviceaccount. Each runs as PID 1 of its own namespaces (its
// hostname the pod's name, its own network and pod IP), as uid and gid 65532, on a read-only
// root, without capabilities or new privileges. Both replicas pass the probes as declared, one
// leads (the Lease and its metrics say which), and when it is killed the other takes over once
// the Lease expires; a leader stopped with SIGTERM hands over at once.
func TestChartPodRunsAsAPod(t *testing.T) {
	c := cluster.Shared(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: running a pod's container needs root (mount, PID and network namespaces, a veth)")
	}
	cluster.DumpLogsOnFailure(t, c)
	ctx := testContext(t, 10*time.Minute)
	kube := c.Kube()

	if _, err := pki.Install(ctx, kube, c.CertManager(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	// A fresh install, whatever ran before on the shared cluster: no TrustAnchorRotation (the
	// chart creates it), no previous-anchor Secret nor trust roots (the leader bootstraps them,
	// by server-side apply with its token).
	tars, err := client.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := tars.Delete(ctx, steps.DefaultRotationName); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Secrets("linkerd").Delete(ctx, "linkerd-previous-anchor", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := kube.CoreV1().ConfigMaps("linkerd").Delete(ctx, "linkerd-identity-trust-roots", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	err = poll.Until(ctx, time.Minute, "the TrustAnchorRotation to be deleted", func(ctx context.Context) (bool, error) {
		_, err := tars.Get(ctx, steps.DefaultRotationName)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	helms, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// No operator release of an earlier test, nor its pods: the Deployment this test runs is
	// the one the install below creates.
	_ = Uninstall(ctx, c, helms[0], "linkerd")
	err = poll.Until(ctx, 2*time.Minute, "the pods of an earlier operator release to go", func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Pods("linkerd").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator,app.kubernetes.io/name=" + OperatorChart})
		if err != nil {
			return false, err
		}
		if _, err := kube.AppsV1().Deployments("linkerd").Get(ctx, OperatorChart, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, poll.Pending("Deployment linkerd/%s: %v", OperatorChart, err)
		}
		if len(list.Items) > 0 {
			return false, poll.Pending("%d pods", len(list.Items))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := publishOnce(t, ctx, c, helms[0])
	pulled := time.Now()
	img := pullImage(t, ctx, pub.Image)
	version := pub.AppVersion
	t.Logf("pulled and unpacked %s in %s: entrypoint %q, user %d:%d", pub.Image, time.Since(pulled).Round(time.Millisecond), img.Entrypoint, img.UID, img.GID)
	clusterIP, proxy := kubernetesService(t, ctx, c)
	// The chart's hooks run too, as pods, from the same image. The pre-install check passes this
	// fresh install, with a warning: the trust roots are left for the leader to create, as in a
	// GitOps install where Linkerd comes after the operator (manifests/argocd).
	hooks := newHookRunner(t, ctx, kube, img, clusterIP, "linkerd")
	dep, installed := startInstall(t, ctx, c, InstallOptions{
		Helm: helms[0], Repository: pub.Charts, Version: pub.ChartVersion, PlainHTTP: true, Hooks: true,
		Set: []string{"image.repository=" + pub.Repository, "image.digest=" + pub.Digest, hookPodLabel},
	})
	// (What the warning says depends on whether the hook may read the anchor, which earlier tests
	// of the shared cluster change: the unit test TestMissingBundleNamesTheOneApplyCommand holds
	// its words.)
	if pre := hooks.only(t, OperatorChart+"-preflight-"); pre.exit != 0 || !strings.Contains(pre.log, "‼ ConfigMap linkerd-identity-trust-roots contains the current trust anchor") {
		t.Fatalf("the preflight hook of a fresh install exited %d, want 0 and a warning about the trust roots:\n%s", pre.exit, pre.log)
	} else {
		t.Logf("the preflight hook of a fresh install, without trust roots, passed:\n%s", pre.log)
	}
	pods := deploymentPods(t, ctx, kube, dep)
	ctr, err := podrun.Container(pods[0], "operator")
	if err != nil {
		t.Fatal(err)
	}
	// The runtime's part: pull the image the pod names, by digest, from the registry.
	if ctr.Image != pub.Image {
		t.Fatalf("the operator container's image is %s, want the published %s", ctr.Image, pub.Image)
	}
	for _, a := range ctr.Args {
		if strings.HasPrefix(a, "--kubeconfig") || strings.HasPrefix(a, "--context") {
			t.Fatalf("the chart runs the operator with %s: a pod uses its in-cluster configuration", a)
		}
	}
	lease := leaseOf(t, ctr.Args)
	t.Logf("the operator container: args %q, env %v, ports %v, not enforced here: %v", ctr.Args, ctr.Env, ctr.Ports, podrun.Unapplied(pods[0], ctr))

	// The CA of the kube-api-access volume, published in every namespace by the controller-manager.
	err = poll.Until(ctx, time.Minute, "ConfigMap kube-root-ca.crt in linkerd", func(ctx context.Context) (bool, error) {
		if _, err := kube.CoreV1().ConfigMaps("linkerd").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, poll.Pending("%v", err)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// helm --wait found the Deployment ready (kwok's pods run nothing), and ran the post-install
	// hook: it waits, and says for what, before any operator pod runs.
	wait := hooks.waitStarted(OperatorChart + "-wait-ready-")
	err = poll.Until(ctx, time.Minute, "the post-install hook to say what it waits for", func(context.Context) (bool, error) {
		if wait.sandbox.Exited() {
			return false, fmt.Errorf("it exited before any operator ran:\n%s", wait.sandbox.LogTail(20))
		}
		return strings.Contains(wait.sandbox.LogTail(20), " waiting: "), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	r := &podRunner{t: t, ctx: ctx, kubelet: &podrun.Kubelet{Kube: kube}, img: img, clusterIP: clusterIP}
	a, b := r.run(pods[0]), r.run(pods[1])

	// The image's operator says the version make image stamps: the chart's appVersion.
	err = poll.Until(ctx, time.Minute, "the operator to log its version", func(ctx context.Context) (bool, error) {
		if !strings.Contains(a.log(), `"Starting trust-rotation-operator" version="`+version+`"`) {
			return false, poll.Pending("log:\n%s", a.LogTail(5))
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}

	// One leads: the Lease names it (hostname_pid: the pod's name, PID 1 of its namespace), and
	// it alone reports the rotation's phase; the other follows.
	leader := r.waitLeader(lease, "", a, b)
	follower := b
	if leader == b {
		follower = a
	}
	follower.waitFollowing()
	t.Logf("%s leads, %s follows", leader.identity(), follower.identity())
	rel := installed()
	if rel.Deployment.Name != dep.Name {
		t.Errorf("the release's Deployment is %s, want %s", rel.Deployment.Name, dep.Name)
	}
	assertWaitedForTheLease(t, ctx, kube, hooks.only(t, OperatorChart+"-wait-ready-"), lease, leader)
	// Synced from a fresh TrustAnchorRotation: the leader bootstraps the previous anchor and the
	// trust roots, one act each. The phase reads Synced from the first act on (bootstrap is a
	// step of that phase), so the objects are waited for, not read once.
	err = poll.Until(ctx, 2*time.Minute, "the leader to report the rotation Synced and bootstrap the previous anchor and the trust roots", func(ctx context.Context) (bool, error) {
		if synced, err := leader.reportsSynced(ctx); err != nil || !synced {
			return false, err
		}
		if _, err := kube.CoreV1().Secrets("linkerd").Get(ctx, "linkerd-previous-anchor", metav1.GetOptions{}); err != nil {
			return false, poll.Pending("the previous anchor: %v", err)
		}
		if _, err := kube.CoreV1().ConfigMaps("linkerd").Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{}); err != nil {
			return false, poll.Pending("the trust roots: %v", err)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if synced, err := follower.reportsSynced(ctx); err != nil || synced {
		t.Errorf("the follower %s reports a phase (%v): only the leader reconciles", follower.identity(), err)
	}
	// Both reached the apiserver through the Service, from their pod IPs: nothing else routes.
	for _, p := range []*runningPod{a, b} {
		if n := proxy.Connections(p.Net.PodIP); n == 0 {
			t.Errorf("%s never connected to the kubernetes Service", p.identity())
		}
	}

	// The probes, as declared. Readiness is "ready once the admin endpoint serves": a follower is
	// ready too, which a rolling update with maxUnavailable 0 needs (the new pod cannot lead while
	// the old leader holds the Lease). Liveness fails only for a leader that stopped renewing.
	for _, p := range []*runningPod{leader, follower} {
		p.assertProbes()
	}
	// Serving, each process is the operator itself (the sandbox's init executed it): it runs as
	// the security context says.
	t.Run("each pod runs as its security context says", func(t *testing.T) {
		for _, p := range []*runningPod{a, b} {
			assertConfinement(t, p)
		}
	})

	// A crash: the leader is killed (SIGKILL, by PID) and cannot release the Lease. The follower
	// takes over once the Lease expires, and not before.
	killed := time.Now()
	leader.Kill()
	r.waitLeader(lease, leader.identity(), follower)
	took := time.Since(killed)
	t.Logf("%s took over %s after the leader was killed (lease %s, renew deadline %s, retry period %s)",
		follower.identity(), took.Round(time.Millisecond), lease.duration, lease.renewDeadline, lease.retryPeriod)
	if took > lease.duration+lease.renewDeadline {
		t.Errorf("the takeover took %s, more than the lease duration and renew deadline (%s)", took, lease.duration+lease.renewDeadline)
	}
	if earliest := lease.duration - 2*lease.retryPeriod; took < earliest {
		t.Errorf("the takeover took %s, before the killed leader's Lease could expire (%s)", took, earliest)
	}
	err = poll.Until(ctx, time.Minute, "the new leader to report the rotation Synced", func(ctx context.Context) (bool, error) {
		return follower.reportsSynced(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	follower.assertProbes()

	// The kubelet restarts the killed container: a new process of the same pod, with a fresh
	// token, follows. Then the leader is stopped as a pod is deleted (SIGTERM): it releases the
	// Lease, and the restarted replica takes over without waiting for the lease to expire.
	restarted := r.run(leader.pod)
	restarted.waitFollowing()
	restarted.assertProbes()
	stopped := time.Now()
	if follower.Stop(time.Duration(*pods[0].Spec.TerminationGracePeriodSeconds) * time.Second) {
		t.Errorf("the leader ignored SIGTERM for the pod's termination grace period")
	}
	r.waitLeader(lease, follower.identity(), restarted)
	if took := time.Since(stopped); took >= lease.duration {
		t.Errorf("the takeover after SIGTERM took %s: the leader did not release the Lease", took)
	}
}

// assertWaitedForTheLease checks that the post-install hook's run ended well, and only after the
// Lease named the leader: it first said it was waiting (before the Lease was acquired), then
// that the leader held the Lease, then that the TrustAnchorRotation was Ready. Helm then deleted
// the Job and its ServiceAccount (hook-delete-policy hook-succeeded).
func assertWaitedForTheLease(t *testing.T, ctx context.Context, kube kubernetes.Interface, run *hookRun, l leaseConfig, leader *runningPod) {
	t.Helper()
	t.Logf("the post-install hook %s ran %s and exited %d:\n%s", run.pod.Name, run.finished.Sub(run.started).Round(time.Millisecond), run.exit, run.log)
	if run.exit != 0 {
		t.Fatalf("the post-install hook exited %d", run.exit)
	}
	lease, err := kube.CoordinationV1().Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.AcquireTime == nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != leader.identity() {
		t.Fatalf("Lease %s/%s: holder %v, acquired %v; want %s", l.namespace, l.name, lease.Spec.HolderIdentity, lease.Spec.AcquireTime, leader.identity())
	}
	acquired := lease.Spec.AcquireTime.Time
	if run.finished.Before(acquired) {
		t.Errorf("the post-install hook ended at %s, before the Lease was acquired at %s", run.finished.Format(time.RFC3339Nano), acquired.Format(time.RFC3339Nano))
	}
	lines := strings.Split(strings.TrimSpace(run.log), "\n")
	stamp, _, _ := strings.Cut(lines[0], " ")
	first, err := time.Parse(time.RFC3339, stamp)
	if err != nil || !strings.Contains(lines[0], " waiting: ") {
		t.Errorf("the hook's first line %q is not a timestamped wait", lines[0])
	} else if first.After(acquired) {
		t.Errorf("the hook first waited at %s, after the Lease was acquired at %s", first, acquired)
	}
	held := fmt.Sprintf("Lease %s/%s is held by %s", l.namespace, l.name, leader.identity())
	if i, j := strings.Index(run.log, held), strings.Index(run.log, "TrustAnchorRotation cluster is Ready"); i < 0 || j < i {
		t.Errorf("the hook's log does not say %q and then that the TrustAnchorRotation is Ready", held)
	}
	job := strings.TrimSuffix(run.pod.Name, run.pod.Name[strings.LastIndex(run.pod.Name, "-"):])
	if _, err := kube.BatchV1().Jobs(run.pod.Namespace).Get(ctx, job, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Job %s is still there after it succeeded (%v)", job, err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(run.pod.Namespace).Get(ctx, job, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount %s is still there after the hook succeeded (%v)", job, err)
	}
}

// podRunner runs pods' operator containers, each with a pod IP of its own.
type podRunner struct {
	t         *testing.T
	ctx       context.Context
	kubelet   *podrun.Kubelet
	img       podrun.Image
	clusterIP net.IP
	// podNet, when set, is the cluster's pod network, which the containers then reach as pods
	// reach other pods: the meshed pods' proxies, served on loopback addresses of this machine.
	podNet *net.IPNet
}

// runningPod is a pod's operator container, running.
type runningPod struct {
	*podrun.Sandbox
	t   *testing.T
	ctx context.Context
	pod *corev1.Pod
	ctr *corev1.Container
}

// run runs pod's operator container in a sandbox of its own, stopped when the test ends.
func (r *podRunner) run(pod *corev1.Pod) *runningPod {
	t := r.t
	t.Helper()
	n, err := podrun.ReserveNet(r.clusterIP)
	if err != nil {
		t.Fatal(err)
	}
	if r.podNet != nil {
		n.LoopbackNets = []*net.IPNet{r.podNet}
	}
	spec, err := r.kubelet.Spec(r.ctx, pod, "operator", r.img, n.PodIP)
	if err != nil {
		n.Release()
		t.Fatal(err)
	}
	ctr, err := podrun.Container(pod, "operator")
	if err != nil {
		n.Release()
		t.Fatal(err)
	}
	s, err := podrun.Start(spec, n, filepath.Join(t.TempDir(), pod.Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &runningPod{Sandbox: s, t: t, ctx: r.ctx, pod: pod, ctr: ctr}
	t.Cleanup(func() {
		s.Stop(15 * time.Second)
		<-s.Released()
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", p.identity(), s.PID(), s.LogTail(40))
		}
	})
	return p
}

// identity is the pod's identity in the Lease: its hostname (the pod's name) and its PID (1).
func (p *runningPod) identity() string { return p.pod.Name + "_1" }

func (p *runningPod) log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// waitFollowing waits until the pod's operator follows another's lead: it has read the Lease.
func (p *runningPod) waitFollowing() {
	p.t.Helper()
	err := poll.Until(p.ctx, time.Minute, p.identity()+" to follow the leader", func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("it exited:\n%s", p.LogTail(30))
		}
		return strings.Contains(p.log(), `"Following leader"`), nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// reportsSynced reports whether the pod's /metrics, on the container's admin port, says the
// rotation is Synced: only the leader sets the phase.
func (p *runningPod) reportsSynced(ctx context.Context) (bool, error) {
	if p.Exited() {
		return false, fmt.Errorf("%s exited:\n%s", p.identity(), p.LogTail(30))
	}
	port := 0
	for _, cp := range p.ctr.Ports {
		if cp.Name == "admin" {
			port = int(cp.ContainerPort)
		}
	}
	body, err := proc.Get(ctx, net.JoinHostPort(p.Net.PodIP.String(), strconv.Itoa(port)), "/metrics")
	if err != nil {
		return false, poll.Pending("%s /metrics: %v", p.identity(), err)
	}
	return strings.Contains(string(body), `trust_rotation_phase{phase="Synced"} 1`), nil
}

// assertProbes waits for the container's liveness and readiness probes, as declared, to pass.
func (p *runningPod) assertProbes() {
	p.t.Helper()
	for name, probe := range map[string]*corev1.Probe{"liveness": p.ctr.LivenessProbe, "readiness": p.ctr.ReadinessProbe} {
		if probe == nil {
			p.t.Errorf("the operator container has no %s probe", name)
			continue
		}
		// The kubelet gives up after initialDelaySeconds and failureThreshold periods.
		limit := time.Duration(probe.InitialDelaySeconds+probe.PeriodSeconds*probe.FailureThreshold) * time.Second
		err := poll.Until(p.ctx, limit, fmt.Sprintf("the %s probe of %s", name, p.identity()), func(ctx context.Context) (bool, error) {
			if p.Exited() {
				return false, fmt.Errorf("it exited:\n%s", p.LogTail(30))
			}
			if err := podrun.Probe(ctx, p.ctr, probe, p.Net.PodIP); err != nil {
				return false, poll.Pending("%v", err)
			}
			return true, nil
		})
		if err != nil {
			p.t.Error(err)
		}
	}
}

// waitLeader waits until the Lease names one of pods other than previous, and returns it.
func (r *podRunner) waitLeader(l leaseConfig, previous string, pods ...*runningPod) *runningPod {
	r.t.Helper()
	var leader *runningPod
	err := poll.Until(r.ctx, 2*time.Minute, "a pod to hold Lease "+l.namespace+"/"+l.name, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			if p.Exited() {
				return false, fmt.Errorf("%s exited:\n%s", p.identity(), p.LogTail(30))
			}
		}
		lease, err := r.kubelet.Kube.CoordinationV1().Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		for _, p := range pods {
			// The process says so too: a Lease left by an earlier process of the same pod
			// (same hostname, PID 1) names the same identity.
			if holder == p.identity() && holder != previous && strings.Contains(p.log(), `"Became leader"`) {
				leader = p
				return true, nil
			}
		}
		return false, poll.Pending("held by %q", holder)
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return leader
}

// assertConfinement checks, from /proc, that the pod's process runs as its security context
// says: its user and group, no capability, no new privileges, a read-only root.
func assertConfinement(t *testing.T, p *runningPod) {
	t.Helper()
	spec := p.Spec
	status := procFields(t, p.PID(), "status")
	ids := func(id uint32) string { s := strconv.Itoa(int(id)); return strings.Join([]string{s, s, s, s}, "\t") }
	for key, want := range map[string]string{
		"Uid": ids(spec.UID), "Gid": ids(spec.GID), "Groups": strconv.Itoa(int(spec.GID)),
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
		"NoNewPrivs": "1", "NSpid": strconv.Itoa(p.PID()) + "\t1",
	} {
		if got := status[key]; got != want {
			t.Errorf("%s: %s is %q, want %q", p.identity(), key, got, want)
		}
	}
	if spec.UID != 65532 || spec.GID != 65532 || !spec.ReadOnlyRoot {
		t.Errorf("%s: the chart's security context makes uid %d, gid %d, read-only root %v; want 65532, 65532, true",
			p.identity(), spec.UID, spec.GID, spec.ReadOnlyRoot)
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	// mountinfo: ID parent major:minor root mountpoint options ...; paths are as the process sees
	// them, from its root.
	var rootOpts, saOpts string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		switch f[4] {
		case "/":
			rootOpts = f[5]
		case "/var/run/secrets/kubernetes.io/serviceaccount":
			saOpts = f[5]
		}
	}
	if !strings.HasPrefix(rootOpts, "ro") {
		t.Errorf("%s: its root is mounted %q, want read-only", p.identity(), rootOpts)
	}
	if !strings.HasPrefix(saOpts, "ro") {
		t.Errorf("%s: its ServiceAccount volume is mounted %q, want read-only", p.identity(), saOpts)
	}
	// Only in-cluster configuration: nothing names a kubeconfig.
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "KUBECONFIG=") {
			t.Errorf("%s runs with %s", p.identity(), kv)
		}
	}
}

// procFields reads /proc/<pid>/<file> as "Key:\tvalue" lines.
func procFields(t *testing.T, pid int, file string) map[string]string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// leaseConfig is the leader election the operator's arguments configure.
type leaseConfig struct {
	namespace, name                      string
	duration, renewDeadline, retryPeriod time.Duration
}

func leaseOf(t *testing.T, args []string) leaseConfig {
	t.Helper()
	value := func(flag string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
				return v
			}
		}
		t.Fatalf("the operator's arguments have no --%s: %q", flag, args)
		return ""
	}
	duration := func(flag string) time.Duration {
		d, err := time.ParseDuration(value(flag))
		if err != nil {
			t.Fatalf("--%s: %v", flag, err)
		}
		return d
	}
	if value("leader-elect") != "true" {
		t.Fatalf("the chart runs the operator without leader election: %q", args)
	}
	return leaseConfig{
		namespace: value("leader-election-namespace"), name: value("leader-election-name"),
		duration: duration("leader-election-lease-duration"), renewDeadline: duration("leader-election-renew-deadline"),
		retryPeriod: duration("leader-election-retry-period"),
	}
}

// deploymentPods waits for the Deployment's pods (kwok's) to be Running, as many as its
// replicas, and returns them.
func deploymentPods(t *testing.T, ctx context.Context, kube kubernetes.Interface, dep *appsv1.Deployment) []*corev1.Pod {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	err = poll.Until(ctx, 2*time.Minute, fmt.Sprintf("%d Running pods of Deployment %s/%s", *dep.Spec.Replicas, dep.Namespace, dep.Name), func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				pods = append(pods, p)
			}
		}
		if len(pods) != int(*dep.Spec.Replicas) {
			return false, poll.Pending("%d Running", len(pods))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// The image's base, as a release builds it, is pinned by digest: a rebuild of a release gets the
// same base. (IMAGE_BASE=local, a base made on this machine, is for machines that reach no public
// registry, such as this test's.)
func TestImageBaseIsPinned(t *testing.T) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE_BASE \?= (\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no default IMAGE_BASE")
	}
	if !regexp.MustCompile(`^[^@\s]+:[^@\s]+@sha256:[0-9a-f]{64}$`).Match(m[1]) {
		t.Errorf("IMAGE_BASE %s is not pinned: want name:tag@sha256:<digest>", m[1])
	}
}
