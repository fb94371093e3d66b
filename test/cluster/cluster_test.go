package cluster_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
)

func TestMain(m *testing.M) { os.Exit(cluster.ForTest(m, cluster.Options{})) }

// TestTwoClustersStartAndStopClean starts two clusters at once (one without cert-manager), checks
// they do not share ports or pod networks, then stops them and checks by PID that every process
// is gone, that every port is free again and that the work directories are removed.
func TestTwoClustersStartAndStopClean(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts two real clusters; run without -short")
	}
	ctx := t.Context()
	opts := []cluster.Options{{}, {WithoutCertManager: true, Nodes: 1}}
	clusters := make([]*cluster.Cluster, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { clusters[i], errs[i] = cluster.Start(ctx, o) })
	}
	wg.Wait()
	for i, c := range clusters {
		if c != nil {
			t.Cleanup(func() { _ = c.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("cluster %d: %v", i, errs[i])
		}
	}
	a, b := clusters[0], clusters[1]
	if a.PodCIDR().String() == b.PodCIDR().String() {
		t.Errorf("both clusters use pod network %s", a.PodCIDR())
	}
	for _, pa := range a.Ports() {
		for _, pb := range b.Ports() {
			if pa == pb {
				t.Errorf("both clusters use port %d", pa)
			}
		}
	}
	for i, c := range clusters {
		nodes, err := c.Kube().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("cluster %d: listing nodes: %v", i, err)
		}
		want := opts[i].Nodes
		if want == 0 {
			want = 2 // the default
		}
		if len(nodes.Items) != want {
			t.Errorf("cluster %d has %d nodes, want %d", i, len(nodes.Items), want)
		}
	}
	if len(a.Processes()) != 6 || len(b.Processes()) != 5 {
		t.Errorf("want 6 processes with cert-manager and 5 without, got %v and %v", a.Processes(), b.Processes())
	}

	for i, c := range clusters {
		procs, ports, dir := c.Processes(), c.Ports(), c.WorkDir()
		if err := c.Stop(); err != nil {
			t.Errorf("cluster %d: Stop: %v", i, err)
		}
		for _, p := range procs {
			if err := syscall.Kill(p.PID, 0); !errors.Is(err, syscall.ESRCH) {
				exe, _ := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe")
				if filepath.Base(exe) == p.Name {
					t.Errorf("cluster %d: %s (pid %d) still runs after Stop", i, p.Name, p.PID)
				}
			}
		}
		for _, port := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Errorf("cluster %d: port %d still taken after Stop: %v", i, port, err)
				continue
			}
			l.Close()
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cluster %d: work directory %s remains after Stop (%v)", i, dir, err)
		}
	}
}

// TestRBACIsEnforced checks that identities other than the admin get only what RBAC grants:
// a ServiceAccount (impersonated, as the e2e tests run the operator) and a static-token user are
// Forbidden, and a RoleBinding makes the ServiceAccount's request succeed.
func TestRBACIsEnforced(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx := t.Context()
	ns := createNamespace(t, c, "rbac")
	sa := cluster.ServiceAccountUser(ns, "operator")

	asSA, err := kubernetes.NewForConfig(c.RESTConfigFor(sa))
	if err != nil {
		t.Fatal(err)
	}
	tokenCfg, err := c.TokenRESTConfig(cluster.UnprivilegedUser)
	if err != nil {
		t.Fatal(err)
	}
	asUser, err := kubernetes.NewForConfig(tokenCfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, client := range map[string]kubernetes.Interface{sa: asSA, cluster.UnprivilegedUser: asUser} {
		_, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s listing secrets: want Forbidden, got %v", name, err)
		}
	}
	if _, err := c.Kube().CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("admin listing secrets: %v", err)
	}

	// A kubeconfig for the same identity, for processes such as kubectl or the operator binary.
	kubeconfig, err := c.KubeconfigFor(sa)
	if err != nil {
		t.Fatal(err)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "-n", ns, "auth", "can-i", "list", "secrets").CombinedOutput()
		if err == nil || string(out) != "no\n" {
			t.Errorf("kubectl auth can-i as %s: want \"no\" and exit 1, got %q (%v)", sa, out, err)
		}
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-secrets", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-secrets", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "operator", Namespace: ns}},
	}
	if _, err := c.Kube().RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube().RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer reads RBAC from an informer cache; observe the grant taking effect.
	err = poll.Until(ctx, 30*time.Second, "the RoleBinding to take effect", func(ctx context.Context) (bool, error) {
		_, err := asSA.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, poll.Pending("%v", err)
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asSA.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("%s listing secrets in kube-system: want Forbidden, got %v", sa, err)
	}
}

// TestDeploymentPodsRunOnLoopback checks what the mesh simulator builds on: a Deployment's pods
// are scheduled and Running with IPs from the cluster's loopback pod network, a process can
// serve on a pod's IP, and `kubectl rollout restart` replaces every pod.
func TestDeploymentPodsRunOnLoopback(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx := t.Context()
	ns := createNamespace(t, c, "deploy")
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "example.invalid/web:1",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
		},
	}
	dep, err := c.Kube().AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitRolledOut(t, c, dep, "")

	for _, p := range pods {
		if !c.IsPodIP(p.Status.PodIP) || !net.ParseIP(p.Status.PodIP).IsLoopback() {
			t.Errorf("pod %s has IP %q, want a loopback address in %s", p.Name, p.Status.PodIP, c.PodCIDR())
		}
	}
	// Serve on the first pod's IP and reach it there, as the mesh simulator's proxies will.
	addr := net.JoinHostPort(pods[0].Status.PodIP, "8080")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on pod address %s: %v", addr, err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err == nil {
			_, _ = conn.Write([]byte("hello from " + pods[0].Name))
			conn.Close()
		}
	}()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dialling pod address %s: %v", addr, err)
	}
	got, _ := io.ReadAll(conn)
	conn.Close()
	if string(got) != "hello from "+pods[0].Name {
		t.Errorf("read %q from %s", got, addr)
	}

	// `kubectl rollout restart` sets this pod-template annotation; a new ReplicaSet replaces
	// every pod. (kubectl writes whole seconds and refuses a second restart within the same
	// second; nanoseconds here keep the kubectl restart below from colliding with this one.)
	oldHash := pods[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	patch := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"` + time.Now().Format(time.RFC3339Nano) + `"}}}}}`
	dep, err = c.Kube().AppsV1().Deployments(ns).Patch(ctx, dep.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods = waitRolledOut(t, c, dep, oldHash)

	// The real kubectl does the same.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		oldHash = pods[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig(), "-n", ns, "rollout", "restart", "deployment/web").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl rollout restart: %v: %s", err, out)
		}
		dep, err = c.Kube().AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitRolledOut(t, c, dep, oldHash)
	}
}

// waitRolledOut waits until dep's latest generation is fully rolled out: every replica updated
// and available, exactly that many pods left (old ones deleted), all Running with an IP and none
// carrying oldHash. It returns the pods.
func waitRolledOut(t *testing.T, c *cluster.Cluster, dep *appsv1.Deployment, oldHash string) []corev1.Pod {
	t.Helper()
	want := *dep.Spec.Replicas
	var pods []corev1.Pod
	err := poll.Until(t.Context(), time.Minute, "deployment "+dep.Name+" to roll out", func(ctx context.Context) (bool, error) {
		d, err := c.Kube().AppsV1().Deployments(dep.Namespace).Get(ctx, dep.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := d.Status
		if s.ObservedGeneration < dep.Generation || s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
			return false, poll.Pending("status %+v", s)
		}
		list, err := c.Kube().CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(dep.Spec.Selector),
		})
		if err != nil {
			return false, err
		}
		if int32(len(list.Items)) != want {
			return false, poll.Pending("%d pods exist", len(list.Items))
		}
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == oldHash {
				return false, poll.Pending("pod %s: phase %s, IP %q, hash %s", p.Name, p.Status.Phase, p.Status.PodIP, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey])
			}
		}
		pods = list.Items
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// createNamespace creates a namespace with a unique name and waits for its default
// ServiceAccount (pods are rejected until it exists).
func createNamespace(t *testing.T, c *cluster.Cluster, prefix string) string {
	t.Helper()
	ns, err := c.Kube().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = poll.Until(t.Context(), 30*time.Second, "the default ServiceAccount of "+ns.Name, func(ctx context.Context) (bool, error) {
		_, err := c.Kube().CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
