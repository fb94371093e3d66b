// inspect --watch: the loop that observes the rotation every interval, and the live view it
// redraws on a terminal (or the summary line it prints when the output is not one).

package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// watchRotation observes the rotation every interval and redraws until it is Synced and
// converged, or ctx ends (Ctrl-C), which is not a failure.
func watchRotation(ctx context.Context, env *Env, cl *Clients, kf *KubeFlags, pf *probeFlags, interval time.Duration) error {
	tty := env.isTerminal()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	last := ""
	for {
		var progress func(done, total int)
		if tty {
			progress = func(done, total int) {
				// One line, redrawn in place, while the probes of this round run.
				fmt.Fprintf(env.Out, "\r\x1b[Kprobing live certificates %s", bar(done, total, 20))
			}
		}
		in, err := inspect(ctx, env, cl, kf, pf, progress)
		if ctx.Err() != nil {
			if tty {
				fmt.Fprintln(env.Out)
			}
			return nil
		}
		if err != nil {
			// A failed round (an apiserver hiccup) is reported and retried at the next tick.
			if tty {
				fmt.Fprintf(env.Out, "\r\x1b[K%s: %v\n", env.now().UTC().Format(time.RFC3339), err)
			} else {
				fmt.Fprintf(env.Err, "%s: %v\n", env.now().UTC().Format(time.RFC3339), err)
			}
		} else if tty {
			drawLive(env.Out, in, env.now())
		} else if line := summaryLine(in); line != last {
			fmt.Fprintf(env.Out, "%s %s\n", env.now().UTC().Format(time.RFC3339), line)
			last = line
		}
		if err == nil && in.converged() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// drawLive clears the terminal and draws the view with progress bars.
func drawLive(w io.Writer, in *inspection, now time.Time) {
	fmt.Fprint(w, "\x1b[H\x1b[2J")
	phase := in.Phase
	if !in.Found {
		phase = "TrustAnchorRotation " + in.Rotation + " not found"
	} else if in.Step != "" {
		phase += " (step " + in.Step + ")"
	}
	fmt.Fprintf(w, "%s  %s\n\n", now.UTC().Format(time.RFC3339), phase)
	fmt.Fprintf(w, "Trust bundle           %s\n", bar(in.Live.TrustBundle.Converged, in.Live.TrustBundle.Target, 40))
	fmt.Fprintf(w, "Workload certificates  %s\n\n", bar(in.Live.WorkloadCertificates.Converged, in.Live.WorkloadCertificates.Target, 40))
	if in.BlockingMessage != "" {
		fmt.Fprintf(w, "Blocking: %s\n\n", in.BlockingMessage)
	}
	if len(in.Pods) > 0 {
		fmt.Fprintf(w, "Pods that have not converged (%d):\n", len(in.Pods))
		_ = renderPods(w, in.Pods, 15)
	}
	fmt.Fprintf(w, "\nPress Ctrl-C to stop watching.\n")
}

// bar renders "[#######-------]  7/14".
func bar(done, total, width int) string {
	filled := width
	if total > 0 {
		filled = min(done*width/total, width)
	}
	return fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat("-", width-filled), done, total)
}

// summaryLine is the plain-text view of one observation, printed when it changes.
func summaryLine(in *inspection) string {
	phase := in.Phase
	if !in.Found {
		phase = "(no TrustAnchorRotation)"
	}
	line := fmt.Sprintf("phase=%s trust-bundle=%d/%d certificates=%d/%d not-converged=%d", phase,
		in.Live.TrustBundle.Converged, in.Live.TrustBundle.Target,
		in.Live.WorkloadCertificates.Converged, in.Live.WorkloadCertificates.Target, len(in.Pods))
	if in.BlockingMessage != "" {
		line += fmt.Sprintf(" blocking=%q", in.BlockingMessage)
	}
	return line
}
