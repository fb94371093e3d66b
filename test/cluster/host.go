package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"k8s.io/klog/v2"
)

// freePorts asks the kernel for n distinct free TCP ports on 127.0.0.1. All listeners are held
// until every port is chosen, so the n ports differ; they are released before the components
// bind them, which leaves a small window for another process to take one. A clash then shows as
// a component failing to start, never as two clusters sharing a port silently.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// advertiseAddress returns an address of this machine that the apiserver can publish as the
// endpoint of the built-in `kubernetes` Service. The apiserver rejects loopback there, so it
// prefers the first IPv4 address of an up, non-loopback interface, then any global unicast
// address, and only as a last resort (a machine with no network at all) falls back to the
// documentation address 192.0.2.1 — the endpoint is published, never dialled, in this bed.
func advertiseAddress() net.IP {
	ifaces, err := net.Interfaces()
	if err != nil {
		klog.InfoS("Listing network interfaces failed; using a placeholder advertise address", "err", err)
		return net.ParseIP("192.0.2.1")
	}
	var v6 net.IP
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			if ip4 := ipn.IP.To4(); ip4 != nil {
				return ip4
			}
			if v6 == nil {
				v6 = ipn.IP
			}
		}
	}
	if v6 != nil {
		return v6
	}
	klog.InfoS("No non-loopback interface address found; using a placeholder advertise address")
	return net.ParseIP("192.0.2.1")
}

// podNet is a 127.<n>.0.0/16 pod network reserved for one cluster by holding an exclusive flock
// on a per-n file. The kernel drops the lock when the process dies, so a crashed test never
// leaks a reservation, and concurrent clusters (in one process or several) never share pod IPs.
type podNet struct {
	cidr *net.IPNet
	lock *os.File // nil when the CIDR was given in Options
}

// Pod networks are chosen from 127.32.0.0/16 … 127.250.0.0/16, leaving 127.0–31 to other uses.
const firstPodNet, lastPodNet = 32, 250

func reservePodNet() (*podNet, error) {
	dir := filepath.Join(os.TempDir(), "linkerd-trust-rotation-podnets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the pod network lock directory: %w", err)
	}
	for n := firstPodNet; n <= lastPodNet; n++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("127.%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening the pod network lock 127.%d: %w", n, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return nil, fmt.Errorf("locking the pod network 127.%d: %w", n, err)
		}
		_, cidr, _ := net.ParseCIDR(fmt.Sprintf("127.%d.0.0/16", n))
		return &podNet{cidr: cidr, lock: f}, nil
	}
	return nil, fmt.Errorf("all pod networks 127.%d-%d.0.0/16 are held by other clusters", firstPodNet, lastPodNet)
}

func (p *podNet) release() {
	if p != nil && p.lock != nil {
		p.lock.Close() // closing the only descriptor drops the flock
		p.lock = nil
	}
}

// nodeIP is the address kwok reports for the fake nodes: the last address of the pod network,
// which kwok's pool (allocating upwards from the network address) reaches only after 65,000 pods.
func (p *podNet) nodeIP() net.IP {
	ip := make(net.IP, 4)
	base := p.cidr.IP.To4()
	for i := range ip {
		ip[i] = base[i] | ^p.cidr.Mask[i]
	}
	ip[3]-- // not the broadcast address
	return ip
}
