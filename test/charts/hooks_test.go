package charts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/podrun"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/pki"
)

// hookPodLabel is the --set value that labels the chart's hook pods for the test to run them
// (cluster.PodRunnerLabel): kwok would complete them without running anything.
var hookPodLabel = "hooks.podLabels." + strings.ReplaceAll(cluster.PodRunnerLabel, ".", `\.`) + "=hook"

// The pre-install hook gates `helm install`: on a cluster without the trust anchor's
// Certificate, the chart's preflight Job — run from the published image, as a kubelet would,
// under the hook's own ServiceAccount — runs `linkerd-trust check --pre`, which fails; the Job
// fails, so helm install exits 1 naming the failed pre-install hook, and the release created
// nothing else: no operator Deployment.
func TestChartPreflightGatesTheInstall(t *testing.T) {
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
	helms, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := helms[0]
	// No release of the operator from an earlier test, and no Deployment.
	_ = Uninstall(ctx, c, h, "linkerd")
	if _, err := kube.AppsV1().Deployments("linkerd").Get(ctx, OperatorChart, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Deployment linkerd/%s exists before the install (%v)", OperatorChart, err)
	}
	pub := publishOnce(t, ctx, c, h)

	// The cluster without the anchor's Certificate; put back (and issued) for the tests after.
	if err := c.CertManager().CertmanagerV1().Certificates("cert-manager").Delete(ctx, "linkerd-trust-anchor", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_ = Uninstall(ctx, c, h, "linkerd")
		if _, err := pki.Install(ctx, kube, c.CertManager(), pki.Options{}); err != nil {
			t.Errorf("restoring the PKI: %v", err)
		}
	})

	clusterIP, _ := kubernetesService(t, ctx, c)
	runner := newHookRunner(t, ctx, kube, pullImage(t, ctx, pub.Image), clusterIP, "linkerd")
	_, err = Install(ctx, c, InstallOptions{
		Helm: h, Repository: pub.Charts, Version: pub.ChartVersion, PlainHTTP: true, Hooks: true, Timeout: 2 * time.Minute,
		Set: []string{"image.repository=" + pub.Repository, "image.digest=" + pub.Digest, hookPodLabel},
	})
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("helm install on a cluster without the anchor's Certificate: %v, want exit status 1", err)
	}
	t.Logf("helm install failed as it should:\n%v", err)
	// Helm prints the failed hook's log (hook-output-log-policy: hook-failed): the check's own
	// messages, then its own error naming the hook.
	for _, want := range []string{"× Certificate linkerd-trust-anchor is Ready", "Certificate cert-manager/linkerd-trust-anchor not found",
		"Status check results are ×", "failed pre-install", "job trust-rotation-operator-preflight failed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("helm's output does not say %q", want)
		}
	}
	run := runner.only(t, "trust-rotation-operator-preflight-")
	if run.exit != 1 {
		t.Errorf("the preflight check exited %d, want 1", run.exit)
	}
	// The check's own message, as the Job's log and its pod's termination message hold it
	// (terminationMessagePolicy FallbackToLogsOnError), for `kubectl logs` and `kubectl describe`.
	for _, want := range []string{"× Certificate linkerd-trust-anchor is Ready", "Certificate cert-manager/linkerd-trust-anchor not found", "Status check results are ×"} {
		if !strings.Contains(run.log, want) {
			t.Errorf("the preflight Job's log does not say %q:\n%s", want, run.log)
		}
	}
	for _, want := range []string{"Certificate cert-manager/linkerd-trust-anchor not found", "Status check results are ×"} {
		if !strings.Contains(run.message, want) {
			t.Errorf("the preflight pod's termination message does not say %q:\n%s", want, run.message)
		}
	}
	if _, err := kube.AppsV1().Deployments("linkerd").Get(ctx, OperatorChart, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the failed install created Deployment linkerd/%s (%v)", OperatorChart, err)
	}
}

// hookRunner runs the chart's hook pods (labelled cluster.PodRunnerLabel) as a kubelet would:
// once kwok has them Running, their container runs from the published image, and when it exits
// the pod's status says so — Succeeded or Failed, the exit code, and on failure the log's tail as
// the termination message (FallbackToLogsOnError) — for the Job controller to complete or fail
// the Job.
type hookRunner struct {
	t         *testing.T
	ctx       context.Context
	kubelet   *podrun.Kubelet
	img       podrun.Image
	clusterIP net.IP
	namespace string

	mu   sync.Mutex
	runs map[string]*hookRun
}

// hookRun is one hook pod's container, run.
type hookRun struct {
	pod *corev1.Pod
	// started is when the container started, finished when it exited, with exit.
	started, finished time.Time
	exit              int
	// log is its output, and message the termination message its pod's status got.
	log, message string
	sandbox      *podrun.Sandbox
	done         chan struct{}
}

// kubernetesService stands in for kube-proxy: the `kubernetes` Service's ClusterIP and port lead
// to the apiserver, which in this test bed listens on loopback only, until the test ends. It
// returns the ClusterIP, and the proxy, which counts who connected.
func kubernetesService(t *testing.T, ctx context.Context, c *cluster.Cluster) (net.IP, *podrun.ServiceProxy) {
	t.Helper()
	svc, err := c.Kube().CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(c.Server())
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := podrun.NewServiceProxy(ctx, svc.Spec.ClusterIP, int(svc.Spec.Ports[0].Port), server.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return net.ParseIP(svc.Spec.ClusterIP), proxy
}

// newHookRunner runs every hook pod of namespace from img until the test ends, each with a pod
// IP of its own that reaches clusterIP (kubernetesService).
func newHookRunner(t *testing.T, ctx context.Context, kube kubernetes.Interface, img podrun.Image, clusterIP net.IP, namespace string) *hookRunner {
	t.Helper()
	r := &hookRunner{t: t, ctx: ctx, kubelet: &podrun.Kubelet{Kube: kube}, img: img,
		clusterIP: clusterIP, namespace: namespace, runs: map[string]*hookRun{}}
	r.serveLogs(t, ctx, kube)
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			r.startNew()
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-loopDone
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, run := range r.runs {
			if run.sandbox != nil {
				run.sandbox.Stop(5 * time.Second)
				<-run.sandbox.Released()
			}
		}
	})
	return r
}

// startNew runs the hook pods that kwok has Running and that have not run yet.
func (r *hookRunner) startNew() {
	list, err := r.kubelet.Kube.CoreV1().Pods(r.namespace).List(r.ctx, metav1.ListOptions{LabelSelector: cluster.PodRunnerLabel})
	if err != nil {
		return
	}
	for i := range list.Items {
		pod := &list.Items[i]
		r.mu.Lock()
		_, seen := r.runs[pod.Name]
		r.mu.Unlock()
		if seen || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		run := &hookRun{pod: pod, done: make(chan struct{})}
		r.mu.Lock()
		r.runs[pod.Name] = run
		r.mu.Unlock()
		if err := r.run(run); err != nil {
			r.t.Errorf("running hook pod %s: %v", pod.Name, err)
			close(run.done)
		}
	}
}

// run starts the pod's one container, and reports its end in the pod's status.
func (r *hookRunner) run(run *hookRun) error {
	pod := run.pod
	if len(pod.Spec.Containers) != 1 {
		return fmt.Errorf("pod %s has %d containers, want 1", pod.Name, len(pod.Spec.Containers))
	}
	ctr := &pod.Spec.Containers[0]
	n, err := podrun.ReserveNet(r.clusterIP)
	if err != nil {
		return err
	}
	spec, err := r.kubelet.Spec(r.ctx, pod, ctr.Name, r.img, n.PodIP)
	if err != nil {
		n.Release()
		return err
	}
	logPath := filepath.Join(r.t.TempDir(), pod.Name+".log")
	run.started = time.Now()
	s, err := podrun.Start(spec, n, logPath)
	if err != nil {
		return err
	}
	r.mu.Lock()
	run.sandbox = s
	r.mu.Unlock()
	go func() {
		defer close(run.done)
		run.exit = s.ExitCode()
		run.finished = time.Now()
		b, _ := os.ReadFile(logPath)
		run.log = string(b)
		phase, reason := corev1.PodSucceeded, "Completed"
		if run.exit != 0 {
			phase, reason = corev1.PodFailed, "Error"
			if ctr.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
				// The kubelet's fallback: the log's last 80 lines, at most 2048 bytes.
				run.message = s.LogTail(80)
				if len(run.message) > 2048 {
					run.message = run.message[len(run.message)-2048:]
				}
			}
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := r.kubelet.Kube.CoreV1().Pods(pod.Namespace).Get(r.ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Phase = phase
			cur.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: ctr.Name, Image: ctr.Image, ImageID: r.img.Root, Ready: false,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: int32(run.exit), Reason: reason, Message: run.message,
					StartedAt: metav1.NewTime(run.started), FinishedAt: metav1.NewTime(run.finished),
				}},
			}}
			for i := range cur.Status.Conditions {
				if c := &cur.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
					c.Status, c.LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(run.finished)
				}
			}
			_, err = r.kubelet.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(r.ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil && r.ctx.Err() == nil {
			r.t.Errorf("reporting the end of hook pod %s: %v", pod.Name, err)
		}
	}()
	return nil
}

// only returns the one run of a pod named prefix…, once it has ended.
func (r *hookRunner) only(t *testing.T, prefix string) *hookRun {
	t.Helper()
	var found []*hookRun
	r.mu.Lock()
	for name, run := range r.runs {
		if strings.HasPrefix(name, prefix) {
			found = append(found, run)
		}
	}
	r.mu.Unlock()
	if len(found) != 1 {
		t.Fatalf("%d hook pods %s* ran, want 1", len(found), prefix)
	}
	select {
	case <-found[0].done:
	case <-r.ctx.Done():
		t.Fatalf("hook pod %s did not end", found[0].pod.Name)
	}
	return found[0]
}

// waitStarted waits until a hook pod named prefix… runs, and returns it.
func (r *hookRunner) waitStarted(prefix string) *hookRun {
	r.t.Helper()
	var run *hookRun
	err := poll.Until(r.ctx, 3*time.Minute, "a hook pod "+prefix+"* to run", func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for name, rn := range r.runs {
			if strings.HasPrefix(name, prefix) && rn.sandbox != nil {
				run = rn
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return run
}

// serveLogs is the kubelet's log endpoint for the hook pods: the apiserver serves a pod's log
// (pods/log, kubectl logs, Helm's hook-output-log-policy) from GET
// https://<node address>:<kubelet port>/containerLogs/<namespace>/<pod>/<container>, and kwok
// serves none. Every fake node has the same address and port, so one listener serves them all,
// with a throwaway certificate (this apiserver is given no kubelet CA, so it checks none).
func (r *hookRunner) serveLogs(t *testing.T, ctx context.Context, kube kubernetes.Interface) {
	t.Helper()
	node, err := kube.CoreV1().Nodes().Get(ctx, cluster.NodeName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port == 0 {
		port = 10250 // the apiserver's default when a node reports none (kwok without --node-port)
	}
	if ip == "" {
		t.Fatalf("node %s has no InternalIP or kubelet port: %+v", node.Name, node.Status)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
	if err != nil {
		t.Fatalf("the kubelet log endpoint: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/containerLogs/"), "/")
		if len(parts) != 3 || parts[0] != r.namespace {
			http.NotFound(w, req)
			return
		}
		r.mu.Lock()
		run := r.runs[parts[1]]
		r.mu.Unlock()
		if run == nil || run.sandbox == nil || run.pod.Spec.Containers[0].Name != parts[2] {
			http.NotFound(w, req)
			return
		}
		b, err := os.ReadFile(run.sandbox.LogPath)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(b)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
}

// startInstall runs the install in the background, since helm returns only once the hook and
// operator pods the test runs have done their part, and returns the operator Deployment as soon
// as helm created it, and a function that waits for helm to return and fails the test on error.
func startInstall(t *testing.T, ctx context.Context, c *cluster.Cluster, opts InstallOptions) (*appsv1.Deployment, func() *Release) {
	t.Helper()
	type installed struct {
		rel *Release
		err error
	}
	done := make(chan installed, 1)
	go func() {
		rel, err := Install(ctx, c, opts)
		done <- installed{rel, err}
	}()
	var dep *appsv1.Deployment
	err := poll.Until(ctx, 3*time.Minute, "helm to create the operator Deployment", func(ctx context.Context) (bool, error) {
		select {
		case in := <-done:
			return false, fmt.Errorf("helm install returned before the operator ran: %v", in.err)
		default:
		}
		d, err := c.Kube().AppsV1().Deployments("linkerd").Get(ctx, OperatorChart, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		dep = d
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dep, func() *Release {
		t.Helper()
		select {
		case in := <-done:
			if in.err != nil {
				t.Fatalf("helm install: %v", in.err)
			}
			return in.rel
		case <-ctx.Done():
			t.Fatal("helm install did not return")
			return nil
		}
	}
}
