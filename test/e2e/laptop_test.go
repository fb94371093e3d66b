package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/podrun"
)

// Users of TestCLIOutsideThePodNetwork: both may read what inspect reads; one may also open a
// port-forward to a pod, as a developer with `kubectl port-forward` rights may.
const (
	laptopUser          = "trust-rotation:laptop"
	laptopNoForwardUser = "trust-rotation:laptop-no-port-forward"
)

// TestCLIOutsideThePodNetwork runs `linkerd trust inspect` as a user on a laptop does: from a
// network namespace that reaches the apiserver but not the pod network. With no flag, the CLI
// finds on its first probe that the pods' IPs do not answer, says so in one line, and reaches
// every proxy through the apiserver's port-forward (the real apiserver's, to kwok's kubelet
// server): every pod is probed. Forced to dial the IPs, or without the right to port-forward,
// every probe fails and the output says why and what to do. On this machine, inside the pod
// network, it dials the IPs and says nothing; --port-forward works there too.
func TestCLIOutsideThePodNetwork(t *testing.T) {
	c := cluster.Shared(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: a network namespace of its own needs root")
	}
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	meshed := forwardProxyPorts(t, ctx, c)
	withForward := laptopKubeconfig(t, ctx, c, laptopUser, true)
	withoutForward := laptopKubeconfig(t, ctx, c, laptopNoForwardUser, false)
	root := staticCLIRoot(t)

	t.Run("FromALaptop", func(t *testing.T) {
		notes, in := laptopInspect(t, ctx, root, withForward)
		if len(notes) != 1 || !strings.Contains(notes[0], "the pod network is not reachable from here") || !strings.Contains(notes[0], "port-forward") {
			t.Fatalf("notes %q: want the one line that says the pods are reached through the port-forward", notes)
		}
		w := in.Live.WorkloadCertificates
		if w.Target < meshed || w.Converged != w.Target || w.NotProbed != 0 || len(in.Live.Problems) != 0 {
			t.Fatalf("workload certificates %+v, problems %q: want all %d+ meshed pods probed and converged; rejected %q, pods behind %+v",
				w, in.Live.Problems, meshed, in.Live.Rejected, in.Pods)
		}
		t.Logf("%s; %d/%d pods probed through the port-forward", notes[0], w.Converged, w.Target)
	})

	t.Run("ForcedToThePodIPs", func(t *testing.T) {
		notes, in := laptopInspect(t, ctx, root, withForward, "--port-forward=false")
		if len(notes) != 0 {
			t.Errorf("notes %q: a forced mode decides nothing", notes)
		}
		wantTrouble(t, in, "reached at its IP", "pass --port-forward")
	})

	t.Run("WithoutThePortForwardRight", func(t *testing.T) {
		notes, in := laptopInspect(t, ctx, root, withoutForward)
		if len(notes) != 1 || !strings.Contains(notes[0], "nor through the apiserver's port-forward") || !strings.Contains(notes[0], "pods/portforward") {
			t.Fatalf("notes %q: want one line with both reasons, the refused port-forward named", notes)
		}
		wantTrouble(t, in, "reached at its IP", "needs create on pods/portforward")
	})

	t.Run("InsideThePodNetwork", func(t *testing.T) {
		for _, args := range [][]string{nil, {"--port-forward"}} {
			cmd := exec.CommandContext(ctx, Binary(t, "linkerd-trust"), append([]string{"inspect", "-o", "json", "--kubeconfig", c.Kubeconfig()}, args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("inspect %q: %v\n%s", args, err, stderr.String())
			}
			if strings.Contains(stderr.String(), "port-forward") {
				t.Errorf("inspect %q said %q: nothing to decide here", args, stderr.String())
			}
			var in inspected
			if err := json.Unmarshal(out, &in); err != nil {
				t.Fatalf("inspect %q: %v\n%s", args, err, out)
			}
			if w := in.Live.WorkloadCertificates; w.Target < meshed || w.Converged != w.Target {
				t.Errorf("inspect %q: workload certificates %+v, want all %d+ converged; problems %q, rejected %q, pods behind %+v",
					args, w, meshed, in.Live.Problems, in.Live.Rejected, in.Pods)
			}
		}
	})
}

// inspected is what the test reads of `inspect -o json`.
type inspected struct {
	Live struct {
		WorkloadCertificates struct {
			Converged int `json:"convergedPods"`
			Target    int `json:"targetPods"`
			NotProbed int `json:"notProbedPods"`
		} `json:"workloadCertificates"`
		Problems []string `json:"problems"`
		Rejected []string `json:"rejectedCertificates"`
	} `json:"live"`
	Pods []struct {
		Namespace string   `json:"namespace"`
		Name      string   `json:"name"`
		Problems  []string `json:"problems"`
	} `json:"pods"`
}

func wantTrouble(t *testing.T, in inspected, parts ...string) {
	t.Helper()
	if in.Live.WorkloadCertificates.Converged != 0 {
		t.Errorf("%d pods converged from outside the pod network, dialling their IPs", in.Live.WorkloadCertificates.Converged)
	}
	for _, p := range in.Live.Problems {
		ok := strings.Contains(p, "no meshed pod answered")
		for _, part := range parts {
			ok = ok && strings.Contains(p, part)
		}
		if ok {
			return
		}
	}
	t.Errorf("problems %q: want the one that says every probe failed, with %q", in.Live.Problems, parts)
}

// forwardProxyPorts tells kwok's kubelet where each meshed pod's linkerd-admin port is (the
// mesh simulator's proxy at the pod's IP on this machine) and returns how many there are.
func forwardProxyPorts(t *testing.T, ctx context.Context, c *cluster.Cluster) int {
	t.Helper()
	pods, err := c.Kube().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || !c.IsPodIP(p.Status.PodIP) {
			continue
		}
		for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if ctr.Name != steps.ProxyContainerName {
				continue
			}
			port := steps.ProxyAdminPort(&ctr)
			if err := c.ForwardPort(ctx, p.Namespace, p.Name, port, p.Status.PodIP, port); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no meshed pod is running")
	}
	return n
}

// laptopKubeconfig grants user what inspect reads (and pods/portforward when forward) and
// returns a kubeconfig acting as that user.
func laptopKubeconfig(t *testing.T, ctx context.Context, c *cluster.Cluster, user string, forward bool) []byte {
	t.Helper()
	rules := append([]rbacv1.PolicyRule{}, readOnlyRules...)
	if forward {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create"}})
	}
	name := strings.ReplaceAll(user, ":", "-")
	rbac := c.Kube().RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	path, err := c.KubeconfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// staticCLIRoot builds the CLI without cgo into a directory that stands for a laptop's disk:
// the binary alone.
func staticCLIRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	modRoot, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "linkerd-trust"), "./cmd/linkerd-trust")
	cmd.Dir, cmd.Env = modRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "home"), 0o777); err != nil {
		t.Fatal(err)
	}
	return root
}

// laptopInspect runs `linkerd-trust inspect -o json args...` from a network namespace of its
// own that reaches the apiserver (on 127.0.0.1 of this machine) and nothing of the pod
// network, and returns the lines it wrote on stderr (each starts "linkerd-trust: ") and its
// document.
func laptopInspect(t *testing.T, ctx context.Context, root string, kubeconfig []byte, args ...string) ([]string, inspected) {
	t.Helper()
	n, err := podrun.ReserveNet()
	if err != nil {
		t.Fatal(err)
	}
	n.LoopbackNets = []*net.IPNet{{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(32, 32)}}
	spec := podrun.Spec{
		Root:     root,
		Hostname: "laptop",
		Argv:     append([]string{"/bin/linkerd-trust", "inspect", "-o", "json"}, args...),
		Env:      []string{"KUBECONFIG=/kube/config", "HOME=/home", "PATH=/bin"},
		UID:      1000, GID: 1000,
		Mounts: []podrun.Mount{{Target: "/kube", Files: map[string]podrun.File{"config": {Data: kubeconfig, Mode: 0o644}}}},
	}
	log := filepath.Join(t.TempDir(), "laptop.log")
	s, err := podrun.Start(spec, n, log)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-ctx.Done():
		s.Kill()
		t.Fatalf("inspect %q from the laptop did not end", args)
	}
	<-s.Released()
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if s.ExitCode() != 0 {
		t.Fatalf("inspect %q from the laptop exited %d:\n%s", args, s.ExitCode(), out)
	}
	var notes []string
	var doc bytes.Buffer
	for _, line := range strings.SplitAfter(string(out), "\n") {
		if strings.HasPrefix(line, "linkerd-trust: ") {
			notes = append(notes, strings.TrimSpace(line))
		} else {
			doc.WriteString(line)
		}
	}
	var in inspected
	if err := json.Unmarshal(doc.Bytes(), &in); err != nil {
		t.Fatalf("inspect %q from the laptop: %v\n%s", args, err, out)
	}
	t.Logf("inspect %q from the laptop: notes %q, problems %q", args, notes, in.Live.Problems)
	return notes, in
}
