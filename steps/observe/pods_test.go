package observe

import (
	"fmt"
	"testing"

	"github.com/linkerd/trust-rotation/steps"
)

func TestTopWorkloadsKeepsTheSortedTop(t *testing.T) {
	counts := map[string]int{}
	for i := range 50 {
		counts[fmt.Sprintf("ns/Deployment/w%02d", i)] = i % 7
	}
	var all []steps.WorkloadCount
	for w, n := range counts {
		all = append(all, steps.WorkloadCount{Workload: w, Pods: n})
	}
	steps.SortWorkloads(all)
	top, n := topWorkloads(counts)
	if n != 50 || fmt.Sprint(top) != fmt.Sprint(all[:behindLimit]) {
		t.Errorf("topWorkloads = %v, %d; want %v, 50", top, n, all[:behindLimit])
	}
	if top, n := topWorkloads(map[string]int{"a": 1}); n != 1 || len(top) != 1 || top[0].Workload != "a" {
		t.Errorf("one workload: %v, %d", top, n)
	}
}
