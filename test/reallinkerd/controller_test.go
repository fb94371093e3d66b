package reallinkerd_test

import (
	"testing"

	"github.com/linkerd/trust-rotation/test/internal/proc"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// controllerProc is one run of a subcommand of Linkerd's control-plane binary (identity,
// proxy-injector) beside the bed, on loopback addresses (reallinkerd.Controller).
type controllerProc struct {
	*reallinkerd.Controller
	addr  string // its gRPC or webhook address
	admin string // its admin (metrics, readiness) address
	done  <-chan struct{}
}

func (p *controllerProc) log() string     { return p.Log() }
func (p *controllerProc) version() string { return p.Version() }
func (p *controllerProc) stop()           { p.Stop() }

// startController runs bin with args, -kubeconfig, -addr and adminFlag set to free addresses,
// and files (keyed "<volume dir>/<file>", relative to /var/run/linkerd) laid out as volumes.
func startController(t *testing.T, bin string, args []string, kubeconfig, adminFlag string, files map[string][]byte) *controllerProc {
	t.Helper()
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]string{}, args...), "-kubeconfig="+kubeconfig, "-addr="+addr, adminFlag+"="+admin)
	c, err := reallinkerd.StartController(bin, all, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return &controllerProc{Controller: c, addr: addr, admin: admin, done: c.Done()}
}

// refresh writes a volume's files as a kubelet refreshes a ConfigMap or Secret volume
// (reallinkerd.Controller.Refresh).
func (p *controllerProc) refresh(t *testing.T, volume string, files map[string][]byte) {
	t.Helper()
	if err := p.Refresh(volume, files); err != nil {
		t.Fatal(err)
	}
}
