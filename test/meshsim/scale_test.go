package meshsim_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
)

// TestScale meshes MESHSIM_SCALE pods (e.g. 1000) and reports how long it takes until every
// proxy holds a certificate, and the oracle's full-check cost. Skipped unless MESHSIM_SCALE is set.
func TestScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MESHSIM_SCALE"))
	if n == 0 {
		t.Skip("set MESHSIM_SCALE=<pods> to run")
	}
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	pki := installPKI(t, ctx, c.Kube(), c.CertManager())
	began := time.Now()
	m, _, err := meshsim.StartSample(ctx, meshsim.Config{RESTConfig: c.RESTConfig(), ProxyMinRefresh: time.Second},
		meshsim.WorkloadSpec{Prefix: "scale", Namespaces: 10, Deployments: n / 10, Replicas: 10})
	_ = pki
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	t.Logf("%d meshed pods Running with certificates in %v", len(m.Pods()), time.Since(began))
	start := time.Now()
	s := m.Oracle().Check()
	t.Logf("oracle full check: %v, status %+v", time.Since(start), s)
	if s.ActiveViolations != 0 {
		t.Errorf("violations: %v", m.Oracle().Violations())
	}
}
