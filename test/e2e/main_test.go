package e2e

import (
	"os"
	"testing"

	"github.com/linkerd/trust-rotation/test/cluster"
)

func TestMain(m *testing.M) {
	// The apiserver records every request for a Secret: tests prove a client never made one.
	code := cluster.ForTest(m, cluster.Options{
		Users:       []cluster.User{{Name: ReadOnlyUser}},
		AuditPolicy: cluster.SecretsAuditPolicy,
	})
	CleanupBinaries()
	os.Exit(code)
}
