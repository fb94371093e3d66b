package meshsim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

func clusterPod(cluster string, i int, role PodRole) PodRef {
	return PodRef{Cluster: cluster, Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("%s-uid-%d", cluster, i)), Role: role}
}

// TestOracleJudgesLinkedClusters: one oracle over two meshes judges every pair that talks across
// the link, in both directions — west's workloads against east's gateway and the reverse, and on
// a flat network workload against workload too — but never pairs that do not talk (a control
// plane across the link, or workloads across a gateway-mode link).
func TestOracleJudgesLinkedClusters(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	p := newRotationPKI(t, clk.Now())
	cases := map[string]struct {
		flat bool
		// west and east: each cluster's workload, gateway and control-plane pod, as roots (which
		// anchors it trusts) and chain (the anchor its certificate chains to).
		setup         func(o *Oracle)
		wantViolation string // "" for none; else a substring of the violation's description
	}{
		"west's workloads on the new anchor while east's gateway trusts only the old one: a violation in gateway mode": {
			setup: func(o *Oracle) {
				o.setRoots(clusterPod("west", 0, RoleWorkload), p.both)
				o.setChain(clusterPod("west", 0, RoleWorkload), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
				o.setRoots(clusterPod("east", 1, RoleGateway), p.oldOnly)
				o.setChain(clusterPod("east", 1, RoleGateway), p.oldIss.leaf(t, "g", clk.Now(), time.Hour))
			},
			wantViolation: "west:ns/p0's chain rejected by east:ns/p1's roots",
		},
		"the reverse direction: east's gateway presents a chain west's workload no longer trusts": {
			setup: func(o *Oracle) {
				o.setRoots(clusterPod("west", 0, RoleWorkload), p.newOnly)
				o.setChain(clusterPod("west", 0, RoleWorkload), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
				o.setRoots(clusterPod("east", 1, RoleGateway), p.both)
				o.setChain(clusterPod("east", 1, RoleGateway), p.oldIss.leaf(t, "g", clk.Now(), time.Hour))
			},
			wantViolation: "east:ns/p1's chain rejected by west:ns/p0's roots",
		},
		"workloads of different clusters do not talk in gateway mode": {
			setup: func(o *Oracle) {
				o.setRoots(clusterPod("west", 0, RoleWorkload), p.newOnly)
				o.setChain(clusterPod("west", 0, RoleWorkload), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
				o.setRoots(clusterPod("east", 1, RoleWorkload), p.oldOnly)
				o.setChain(clusterPod("east", 1, RoleWorkload), p.oldIss.leaf(t, "e", clk.Now(), time.Hour))
			},
		},
		"on a flat network they do, in both directions": {
			flat: true,
			setup: func(o *Oracle) {
				o.setRoots(clusterPod("west", 0, RoleWorkload), p.both)
				o.setChain(clusterPod("west", 0, RoleWorkload), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
				o.setRoots(clusterPod("east", 1, RoleWorkload), p.oldOnly)
				o.setChain(clusterPod("east", 1, RoleWorkload), p.oldIss.leaf(t, "e", clk.Now(), time.Hour))
			},
			wantViolation: "west:ns/p0's chain rejected by east:ns/p1's roots",
		},
		"a control plane serves its own cluster alone, even on a flat network": {
			flat: true,
			setup: func(o *Oracle) {
				o.setRoots(clusterPod("west", 0, RoleWorkload), p.both)
				o.setChain(clusterPod("west", 0, RoleWorkload), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
				o.setRoots(clusterPod("east", 1, RoleControlPlane), p.oldOnly)
				o.setChain(clusterPod("east", 1, RoleControlPlane), p.oldIss.leaf(t, "i", clk.Now(), time.Hour))
			},
		},
		"within one cluster every pair counts, the control plane included": {
			setup: func(o *Oracle) {
				o.setRoots(clusterPod("east", 0, RoleWorkload), p.both)
				o.setChain(clusterPod("east", 0, RoleWorkload), p.newIss.leaf(t, "w", clk.Now(), time.Hour))
				o.setRoots(clusterPod("east", 1, RoleControlPlane), p.oldOnly)
				o.setChain(clusterPod("east", 1, RoleControlPlane), p.oldIss.leaf(t, "i", clk.Now(), time.Hour))
			},
			wantViolation: "east:ns/p0's chain rejected by east:ns/p1's roots",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOracle(clk, time.Second, nil)
			o.SetFlatNetwork(tc.flat)
			tc.setup(o)
			o.Check()
			vs := o.Violations()
			if tc.wantViolation == "" {
				if len(vs) != 0 {
					t.Fatalf("violations where no pair talks: %v", vs)
				}
				return
			}
			if len(vs) != 1 || !strings.Contains(vs[0].String(), tc.wantViolation) || vs[0].Pairs != 1 {
				t.Fatalf("violations %v; want one of one pod pair: %q", vs, tc.wantViolation)
			}
		})
	}
}
