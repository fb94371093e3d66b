// Package multicluster runs the trust-anchor rotation end to end on two linked clusters (three in
// one test) side by side (test/cluster), each with its own cert-manager, operator and simulated
// mesh, the meshes linked as Linkerd multicluster links them and judged by one mTLS oracle.
package multicluster

import (
	"os"
	"testing"

	"github.com/linkerd/trust-rotation/test/e2e"
)

func TestMain(m *testing.M) {
	code := m.Run()
	e2e.CleanupBinaries()
	os.Exit(code)
}
