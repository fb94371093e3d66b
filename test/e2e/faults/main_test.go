// Package faults proves, end to end on the local cluster with the real cert-manager and the
// mesh simulator's mTLS oracle watching throughout, that a rotation never breaks mTLS and always
// finishes whatever happens around it: the operator killed at every step, leader failover, an
// apiserver restart and injected request failures, stuck pods, and hostile input. The tests of
// this package share one cluster and one environment, and run rotations back to back on it.
package faults

import (
	"os"
	"testing"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/e2e"
)

func TestMain(m *testing.M) {
	code := cluster.ForTest(m, cluster.Options{})
	e2e.CleanupBinaries()
	os.Exit(code)
}
