// How the CLI reaches the proxies' admin ports: straight to each pod's IP when the pod network
// is reachable from where it runs, through the apiserver's port-forward when it is not (a
// laptop outside the cluster network), decided once per run from the first pod it probes.

package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
)

// reachMode is how probes reach the pods.
type reachMode int

const (
	reachAuto    reachMode = iota // decide from the first pod (no --port-forward)
	reachDirect                   // the pod's IP (--port-forward=false, or the decision)
	reachForward                  // the apiserver's port-forward (--port-forward, or the decision)
)

// directProbeTimeout bounds the connect that tells whether the pod network is reachable: inside
// the cluster network it takes milliseconds; outside it, a pod IP routes nowhere and the
// connect hangs until this.
const directProbeTimeout = 3 * time.Second

// reach is the decision of one run, kept across the rounds of inspect --watch.
type reach struct {
	mu      sync.Mutex
	mode    reachMode
	direct  error // why the pod's IP was not reachable, when the decision tried it
	forward error // why the port-forward failed, when the decision tried it
}

// decide, on the first probeable pod of a run, connects to its admin port directly and, failing
// that, through the apiserver's port-forward, and settles the mode: port-forward only when the
// direct connect failed and the port-forward connected. It says so in one line on note. A pod
// that answers neither leaves the mode direct, and the probes report each pod's failure.
func (r *reach) decide(ctx context.Context, p *podindex.Pod, timeout time.Duration, direct, forward probe.DialFunc, note io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode != reachAuto {
		return
	}
	addr := net.JoinHostPort(p.IP, strconv.Itoa(int(p.AdminPort)))
	dctx, cancel := context.WithTimeout(ctx, min(timeout, directProbeTimeout))
	c, err := direct(dctx, "tcp", addr)
	cancel()
	if err == nil {
		c.Close()
		r.mode = reachDirect
		return
	}
	if ctx.Err() != nil {
		return // the run ended: nothing was learnt
	}
	r.direct = err
	fctx, cancel := context.WithTimeout(ctx, timeout)
	c, ferr := forward(fctx, "tcp", addr)
	cancel()
	if ferr != nil {
		r.forward = ferr
		r.mode = reachDirect
		fmt.Fprintf(note, "linkerd-trust: pod %s is not reachable at %s (%v), nor through the apiserver's port-forward (%v)\n", p.Key(), addr, err, ferr)
		return
	}
	c.Close()
	r.mode = reachForward
	fmt.Fprintf(note, "linkerd-trust: the pod network is not reachable from here (%v): reaching the pods through the apiserver's port-forward\n", err)
}

// current returns the mode decided (or forced).
func (r *reach) current() reachMode {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mode
}

// probeTrouble says why, when every pod probed failed, and what to do; "" when any answered
// or none was probed. mode is how the probes reached the pods.
func probeTrouble(results map[string]probe.ProbeResult, mode reachMode) string {
	var first error
	var firstPod string
	for key, r := range results {
		if r.Err == nil {
			return ""
		}
		if first == nil || key < firstPod {
			first, firstPod = r.Err, key
		}
	}
	if first == nil {
		return ""
	}
	how := "at its IP"
	todo := "from outside the cluster network, pass --port-forward (it needs create on pods/portforward); inside it, " +
		"let this host reach the proxies' linkerd-admin port in your NetworkPolicies"
	if mode == reachForward {
		how = "through the apiserver's port-forward"
		todo = "check that you may create pods/portforward (kubectl auth can-i create pods/portforward), and that the apiserver reaches the kubelets"
	}
	return fmt.Sprintf("no meshed pod answered the live-certificate probe on its linkerd-admin port, reached %s (%d probed; %s: %s): %s; see docs/troubleshooting.md#the-cli-probes-no-pod",
		how, len(results), firstPod, oneLine(first.Error()), todo)
}

// oneLine folds an error's lines into one.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
