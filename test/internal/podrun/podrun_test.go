package podrun

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

// A sandbox runs its command as PID 1 of its own namespaces, chrooted into its root, with its
// hostname, credentials, read-only root and volumes, reachable at its pod IP and reaching this
// machine through its gateway and on the loopback networks it is given (and on no other); it is
// stopped by SIGTERM and its veth goes with it.
func TestSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: a sandbox needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(root, "bin", "container"), "./testdata/container")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n, err := ReserveNet()
	if err != nil {
		t.Fatal(err)
	}
	// Something outside the sandbox to reach, through a proxy on the host end of its veth.
	outside := serve(t, "127.0.0.1:0", "hello from outside")
	proxy, err := NewServiceProxy(ctx, n.Gateway.String(), 0, outside)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	// Pods served on loopback addresses of this machine, as the mesh simulator serves them: one
	// in a network the sandbox reaches (LoopbackNets), one in a network it does not.
	_, reached, _ := net.ParseCIDR("127.30.0.0/16")
	n.LoopbackNets = []*net.IPNet{reached}
	loopback := serve(t, "127.30.0.7:0", "hello from a loopback pod")
	unrouted := serve(t, "127.29.0.7:0", "the sandbox reached an unrouted loopback network")

	spec := Spec{
		Root: root, ReadOnlyRoot: true, Hostname: "pod-a", Argv: []string{"container"},
		Env: []string{"PATH=/bin", "OUTSIDE=" + proxy.Addr(),
			"LOOPBACK=" + loopback, "UNROUTED=" + unrouted}, UID: 65532, GID: 65532, Groups: []uint32{65532},
		NoNewPrivs: true, DropAllCapabilities: true,
		Mounts: []Mount{
			{Target: "/config", ReadOnly: true, Files: map[string]File{"file": {Data: []byte("content"), Mode: 0o644}}},
			{Target: "/scratch", Mode: 0o777},
		},
	}
	s, err := Start(spec, n, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(5 * time.Second)

	probe := &corev1.Probe{TimeoutSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}}
	ctr := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	err = poll.Until(ctx, 30*time.Second, "the probe to pass", func(ctx context.Context) (bool, error) {
		if s.Exited() {
			return false, fmt.Errorf("exited:\n%s", s.LogTail(20))
		}
		if err := Probe(ctx, ctr, probe, n.PodIP); err != nil {
			return false, poll.Pending("%v", err)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Stop(5 * time.Second) {
		t.Error("SIGTERM did not stop the sandbox's PID 1")
	}
	log := s.LogTail(20)
	for _, want := range []string{
		"uid=65532 gid=65532 groups=[65532] hostname=pod-a pid=1",
		"write /: open /written: read-only file system",
		"write /scratch: <nil>",
		`read /config/file: "content" <nil>`,
		`outside: "hello from outside" <nil>`,
		`loopback: "hello from a loopback pod" <nil>`,
		"unrouted: dial tcp " + unrouted + ": connect: connection refused",
		"terminated",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, log)
		}
	}
	if proxy.Connections(n.PodIP) != 1 {
		t.Errorf("%d connections from the pod IP, want 1", proxy.Connections(n.PodIP))
	}
	<-s.Released()
	if _, err := net.InterfaceByName(s.HostInterface); err == nil {
		t.Errorf("the sandbox's veth %s is still there", s.HostInterface)
	}
}

// serve answers every connection to addr with msg until the test ends, and returns the address.
func serve(t *testing.T, addr, msg string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, msg)
			c.Close()
		}
	}()
	return ln.Addr().String()
}
