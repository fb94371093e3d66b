package kube_test

import (
	"os"
	"testing"

	"github.com/linkerd/trust-rotation/test/cluster"
)

// The tests that need a real apiserver (the leader election's hand-over to and from client-go's,
// the Events beside client-go's recorder's) share one local cluster; -short skips them.
func TestMain(m *testing.M) {
	os.Exit(cluster.ForTest(m, cluster.Options{Nodes: 1, WithoutCertManager: true}))
}
