package e2e

import (
	"os"
	"testing"

	"github.com/linkerd/trust-rotation/test/cluster"
)

func TestMain(m *testing.M) {
	code := cluster.ForTest(m, cluster.Options{})
	CleanupBinaries()
	os.Exit(code)
}
