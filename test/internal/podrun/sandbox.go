// Package podrun runs a pod's container on this machine the way a kubelet and a container
// runtime would, for a test bed whose nodes (kwok) run nothing: the binary runs as PID 1 of its
// own PID, mount, UTS, IPC and network namespaces, chrooted into a directory that stands in for
// its image, with the pod's volumes mounted (the projected ServiceAccount token, the cluster CA
// and the namespace at /var/run/secrets/kubernetes.io/serviceaccount; emptyDirs), under the
// container's user and group, with its read-only root filesystem, no new privileges and no
// capabilities, and a network interface of its own (a veth to this machine), so that probes reach
// it at its pod IP and it reaches the apiserver through the `kubernetes` Service.
//
// Starting a sandbox needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), the ip and nsenter commands, and
// the calling binary's main (or TestMain) to call Init first: the sandbox's init is this same
// binary, re-executed.
package podrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/internal/proc"
)

// Spec is what the sandbox runs: a container, resolved (see Kubelet.Spec).
type Spec struct {
	// Root is the directory that becomes the container's /: the image. Every sandbox mounts it
	// afresh, so sandboxes may share it.
	Root string
	// ReadOnlyRoot mounts Root read-only (securityContext.readOnlyRootFilesystem).
	ReadOnlyRoot bool
	// Hostname is the container's hostname: its pod's name.
	Hostname string
	// Argv is the command and its arguments; Argv[0] is looked up in the PATH of Env when it
	// is not absolute, inside Root.
	Argv []string
	// Env is the whole environment of the process.
	Env []string
	// Dir is the working directory, inside Root ("/" when empty).
	Dir string
	// UID, GID and Groups are the process's credentials.
	UID, GID uint32
	Groups   []uint32
	// NoNewPrivs sets no_new_privs (securityContext.allowPrivilegeEscalation false).
	NoNewPrivs bool
	// DropAllCapabilities empties the capability bounding set (capabilities.drop [ALL]); a
	// process that is not root then has no capability at all.
	DropAllCapabilities bool
	// Mounts are the container's volume mounts, each a tmpfs.
	Mounts []Mount
}

// Mount is a tmpfs mounted at Target in the container, holding Files.
type Mount struct {
	Target string
	// Files are the mount's content, by path relative to Target.
	Files map[string]File
	// Mode is the mount's root directory mode.
	Mode     os.FileMode
	ReadOnly bool
}

// File is a file of a Mount.
type File struct {
	Data []byte
	Mode os.FileMode
}

// Net is a sandbox's network: a veth whose sandbox end (eth0) has PodIP and routes everything
// through the host end, Gateway, on one /30 of 169.254.64.0/18. HostAddrs are added to the host
// end as /32s, so that this machine answers on them for as long as the sandbox lives: a
// Service's ClusterIP, say. ReserveNet makes one.
type Net struct {
	PodIP, Gateway net.IP
	HostAddrs      []net.IP
	// LoopbackNets are networks of 127.0.0.0/8 that the sandbox reaches on this machine through
	// its veth, as a pod reaches other pods: the test bed's pod network, whose pods the mesh
	// simulator serves on loopback addresses of this machine. Without them a sandbox's 127/8 is
	// its own loopback, as in any network namespace (see setupNet). One that holds 127.0.0.1
	// (this machine's apiserver, for a sandbox that stands for a laptop) takes the sandbox's
	// own loopback address away.
	LoopbackNets []*net.IPNet
	// lock is the exclusive flock that reserves the /30 among every process of this machine.
	lock *os.File
}

// Sandbox networks are /30s of 169.254.64.0/18, link-local addresses no network routes.
const netBlocks = 1 << 12

// ReserveNet reserves a /30 for one sandbox by an exclusive flock on a file of its own, which
// the kernel drops should this process die: concurrent tests never share one. Start takes the
// reservation over and releases it once the sandbox and its veth are gone.
func ReserveNet(hostAddrs ...net.IP) (Net, error) {
	dir := filepath.Join(os.TempDir(), "linkerd-trust-rotation-podrun-nets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Net{}, err
	}
	for i := range netBlocks {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return Net{}, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return Net{}, fmt.Errorf("reserving sandbox network %d: %w", i, err)
		}
		base := 4 * i
		ip := func(n int) net.IP { return net.IPv4(169, 254, byte(64+(base+n)>>8), byte(base+n)) }
		return Net{Gateway: ip(1), PodIP: ip(2), HostAddrs: hostAddrs, lock: f}, nil
	}
	return Net{}, errors.New("every sandbox network of 169.254.64.0/18 is reserved")
}

// Sandbox is a running sandbox: its process is the container's process (PID 1 inside).
type Sandbox struct {
	*proc.Process
	Spec Spec
	Net  Net
	// HostInterface is the host end of the sandbox's veth; it goes away with the sandbox.
	HostInterface string
	released      chan struct{}
}

// Released is closed once the sandbox has exited, its veth is gone, and its network is free
// for another sandbox.
func (s *Sandbox) Released() <-chan struct{} { return s.released }

// release frees the sandbox's network once its process has exited and the kernel has deleted
// its veth (with its network namespace, shortly after).
func (s *Sandbox) release() {
	<-s.Done()
	defer close(s.released)
	defer s.Net.lock.Close()
	err := poll.Until(context.Background(), time.Minute, "veth "+s.HostInterface+" to go", func(context.Context) (bool, error) {
		_, err := net.InterfaceByName(s.HostInterface)
		return err != nil, nil
	})
	if err != nil {
		// Still there: delete it, so that the next sandbox of this network finds it free.
		_ = exec.Command("ip", "link", "delete", s.HostInterface).Run()
	}
}

// initEnv tells the re-executed binary that it is a sandbox's init.
const initEnv = "TRUST_ROTATION_PODRUN_INIT"

// Release gives up a reservation that no sandbox took over.
func (n Net) Release() {
	if n.lock != nil {
		n.lock.Close()
	}
}

// Start starts a sandbox running spec with network n (from ReserveNet), its output in logPath.
func Start(spec Spec, n Net, logPath string) (*Sandbox, error) {
	if n.lock == nil {
		return nil, errors.New("the sandbox network was not reserved (ReserveNet)")
	}
	if os.Geteuid() != 0 {
		n.lock.Close()
		return nil, errors.New("podrun needs root: namespaces, mounts and a veth")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command(self)
	cmd.Env = []string{initEnv + "=1"}
	cmd.ExtraFiles = []*os.File{r} // fd 3: the spec, and the go-ahead once the network is up
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
	}
	p, err := proc.StartCommand(cmd, logPath) // killed with the test, should it die first
	r.Close()
	if err != nil {
		n.lock.Close()
		return nil, err
	}
	s := &Sandbox{Process: p, Spec: spec, Net: n, HostInterface: "trp" + strconv.Itoa(p.PID()), released: make(chan struct{})}
	go s.release()
	if err := s.setupNet(); err != nil {
		p.Kill()
		return nil, err
	}
	if err := json.NewEncoder(w).Encode(spec); err != nil {
		p.Kill()
		return nil, fmt.Errorf("handing the sandbox its spec: %w", err)
	}
	return s, nil
}

// setupNet creates the sandbox's veth, configures both ends, and routes the sandbox through the
// host end.
func (s *Sandbox) setupNet() error {
	pid := strconv.Itoa(s.PID())
	host, gw, pod := s.HostInterface, s.Net.Gateway.String(), s.Net.PodIP.String()
	cmds := [][]string{
		{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"ip", "addr", "add", gw + "/30", "dev", host},
	}
	for _, a := range s.Net.HostAddrs {
		cmds = append(cmds, []string{"ip", "addr", "add", a.String() + "/32", "dev", host})
	}
	in := []string{"nsenter", "--target", pid, "--net", "ip"}
	cmds = append(cmds,
		[]string{"ip", "link", "set", host, "up"},
		append(in, "link", "set", "lo", "up"),
		append(in, "addr", "add", pod+"/30", "dev", "eth0"),
		append(in, "link", "set", "eth0", "up"),
		append(in, "route", "add", "default", "via", gw),
	)
	// A loopback network of this machine, reached from another network namespace. Inside, the
	// kernel's local table routes all of 127/8 to the namespace's own lo; a more specific route
	// in that table sends the network out of eth0 instead. Linux then drops a packet to or from
	// 127/8 on any interface but lo as a martian, unless the interface has route_localnet
	// (Documentation/networking/ip-sysctl.rst): eth0 needs it for the answers that come from a
	// loopback address, and the host end for the requests to one and for its answers. On the
	// host end, the local table delivers them to the listener on that address.
	if len(s.Net.LoopbackNets) > 0 {
		cmds = append(cmds,
			[]string{"sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/" + host + "/route_localnet"},
			[]string{"nsenter", "--target", pid, "--net", "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet"},
		)
	}
	for _, n := range s.Net.LoopbackNets {
		if !n.IP.IsLoopback() {
			return fmt.Errorf("sandbox network: %s is not a loopback network", n)
		}
		if n.Contains(net.IPv4(127, 0, 0, 1)) {
			// This machine's own loopback address (its apiserver's, say): the sandbox gives up
			// its own, whose address would make the answers from this machine's look like its
			// own packets coming back (a martian source).
			// The rest of 127/8 then goes nowhere, rather than out of eth0 to this machine.
			cmds = append(cmds, append(in, "addr", "del", "127.0.0.1/8", "dev", "lo"),
				append(in, "route", "add", "unreachable", "127.0.0.0/8"))
		}
		cmds = append(cmds, append(in, "route", "add", n.String(), "via", gw, "dev", "eth0", "table", "local"))
	}
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("sandbox network: %s: %v: %s", strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// Init turns this process into a sandbox's init when Start re-executed it: it prepares the
// sandbox and executes the container's command, and never returns. Otherwise it returns at once.
// Call it first in main or TestMain.
func Init() {
	if os.Getenv(initEnv) == "" {
		return
	}
	// no_new_privs and the capability bounding set are per thread: set them on the thread that
	// executes the command.
	runtime.LockOSThread()
	err := initSandbox()
	fmt.Fprintf(os.Stderr, "podrun: %v\n", err)
	os.Exit(127)
}

func initSandbox() error {
	f := os.NewFile(3, "spec")
	b, err := io.ReadAll(f) // EOF once Start has set up the network
	if err != nil {
		return err
	}
	var spec Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("reading the spec: %w", err)
	}
	f.Close()
	root := spec.Root
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	// A mount of the image of this sandbox's own, so that its read-only flag is this sandbox's.
	if err := syscall.Mount(root, root, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the root %s: %w", root, err)
	}
	const nosuid = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	mounts := []struct {
		target, fstype string
		flags          uintptr
		data           string
	}{
		{"/proc", "proc", nosuid, ""},
		{"/sys", "sysfs", nosuid | syscall.MS_RDONLY, ""},
		{"/dev", "tmpfs", syscall.MS_NOSUID | syscall.MS_NOEXEC, "mode=755"},
	}
	for _, m := range mounts {
		if err := mountAt(root, m.target, m.fstype, m.flags, m.data); err != nil {
			return err
		}
	}
	for _, dev := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		target := filepath.Join(root, "dev", dev)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return err
		}
		if err := syscall.Mount("/dev/"+dev, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", dev, err)
		}
	}
	for _, m := range spec.Mounts {
		if err := mountVolume(root, m); err != nil {
			return err
		}
	}
	if spec.ReadOnlyRoot {
		if err := syscall.Mount("", root, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remounting the root read-only: %w", err)
		}
	}
	if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	bin, err := lookPath(root, spec.Argv[0], spec.Env)
	if err != nil {
		return err
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	if err := syscall.Chdir(dir); err != nil {
		return fmt.Errorf("working directory %s: %w", dir, err)
	}
	if spec.DropAllCapabilities {
		for c := uintptr(0); ; c++ {
			if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_CAPBSET_DROP, c, 0); errno != 0 {
				if errno == syscall.EINVAL && c > 0 { // past the last capability
					break
				}
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, errno)
			}
		}
	}
	groups := make([]int, len(spec.Groups))
	for i, g := range spec.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("groups %v: %w", groups, err)
	}
	if err := syscall.Setgid(int(spec.GID)); err != nil {
		return fmt.Errorf("gid %d: %w", spec.GID, err)
	}
	if err := syscall.Setuid(int(spec.UID)); err != nil {
		return fmt.Errorf("uid %d: %w", spec.UID, err)
	}
	// A change of credentials clears the parent-death signal: set it again.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		return fmt.Errorf("parent-death signal: %w", errno)
	}
	if spec.NoNewPrivs {
		const prSetNoNewPrivs = 38
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); errno != 0 {
			return fmt.Errorf("no_new_privs: %w", errno)
		}
	}
	return syscall.Exec(bin, spec.Argv, spec.Env)
}

// mountAt mounts a filesystem at target inside root, creating the mount point.
func mountAt(root, target, fstype string, flags uintptr, data string) error {
	dir := filepath.Join(root, target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(fstype, dir, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", fstype, target, err)
	}
	return nil
}

// mountVolume mounts a tmpfs at m.Target inside root, writes its files, and makes it read-only
// when m says so.
func mountVolume(root string, m Mount) error {
	mode := m.Mode
	if mode == 0 {
		mode = 0o755
	}
	if err := mountAt(root, m.Target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode="+strconv.FormatUint(uint64(mode.Perm()), 8)); err != nil {
		return err
	}
	dir := filepath.Join(root, m.Target)
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	for name, f := range m.Files {
		path := filepath.Join(dir, name)
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("volume at %s: file %q is outside it", m.Target, name)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.Data, f.Mode); err != nil {
			return err
		}
		if err := os.Chmod(path, f.Mode); err != nil { // WriteFile's mode is subject to the umask
			return err
		}
	}
	if m.ReadOnly {
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
			return fmt.Errorf("remounting %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// lookPath finds the container's command inside root, as a runtime does: an absolute path as
// is, a bare name in the PATH of env.
func lookPath(root, name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			return "", fmt.Errorf("the container's command %s: %w", name, err)
		}
		return name, nil
	}
	for _, e := range env {
		if path, ok := strings.CutPrefix(e, "PATH="); ok {
			for _, d := range filepath.SplitList(path) {
				if st, err := os.Stat(filepath.Join(root, d, name)); err == nil && !st.IsDir() {
					return filepath.Join(d, name), nil
				}
			}
		}
	}
	return "", fmt.Errorf("the container's command %s is not in its PATH", name)
}
