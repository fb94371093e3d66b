package e2e

import (
	"os"
	"testing"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/podrun"
)

func TestMain(m *testing.M) {
	podrun.Init() // this binary is also the init of TestCLIOutsideThePodNetwork's sandboxes
	// The apiserver records every request for a Secret: tests prove a client never made one.
	code := cluster.ForTest(m, cluster.Options{
		Users:       []cluster.User{{Name: ReadOnlyUser}},
		AuditPolicy: cluster.SecretsAuditPolicy,
		// TestCLIOutsideThePodNetwork reaches the proxies through the apiserver's port-forward.
		PortForward: true,
	})
	CleanupBinaries()
	os.Exit(code)
}
