package cli

import (
	"fmt"
	"strings"
	"testing"
)

// check --proxy counts every injected pod behind, not only the ten it names.
func TestCheckProxyCountsEveryPodBehind(t *testing.T) {
	f := newFixture(t)
	for i := range 12 {
		f.addPod("emojivoto", fmt.Sprintf("voting-7c9d8f6b5-p%02d", i), "voting", "", "stale", fmt.Sprintf("127.1.1.%d", i))
	}
	out, _, _ := f.run("check", "--proxy")
	if !strings.Contains(out, "12 of 15 injected pod(s) (meshed, control plane apart) run with another trust bundle") || !strings.Contains(out, "... and 2 more") {
		t.Errorf("check --proxy:\n%s", out)
	}
}
