// inspect's table: an inspection (read in inspect.go) rendered for a person, the operator's
// status first, then what the command observed itself, then the pods that have not converged.

package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func renderInspection(w io.Writer, in *inspection, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !in.Found {
		fmt.Fprintf(tw, "TrustAnchorRotation %s not found: is the trust-rotation operator installed?\n", in.Rotation)
	} else {
		fmt.Fprintf(tw, "TrustAnchorRotation %s\n", in.Rotation)
		phase := in.Phase
		if in.Step != "" {
			phase += " (step " + in.Step + ")"
		}
		fmt.Fprintf(tw, "  Phase:\t%s\n", phase)
		if t := in.LastPhaseTransitionTime; t != nil {
			fmt.Fprintf(tw, "  Last transition:\t%s (%s ago)\n", t.UTC().Format(time.RFC3339), age(now.Sub(t.Time)))
		}
		if in.Strategy == v1alpha1.StrategyCrossSigned {
			fmt.Fprintf(tw, "  Strategy:\t%s\n", strategyLine(in))
		}
		blocking := in.BlockingMessage
		if blocking == "" {
			blocking = "none"
		}
		fmt.Fprintf(tw, "  Blocking:\t%s\n", blocking)
		fmt.Fprintf(tw, "  Trust bundle:\t%s\n", convergenceLine(in.TrustBundle, "injected pods"))
		fmt.Fprintf(tw, "  Workload certificates:\t%s\n", convergenceLine(in.WorkloadCertificates, "meshed pods"))
		fmt.Fprintf(tw, "  Active issuer:\t%s\n", orNone(steps.ShortFingerprint(in.ActiveIssuerFingerprint)))
		fmt.Fprintf(tw, "  Previous anchor:\t%s\n", orNone(steps.ShortFingerprint(in.PreviousAnchorFingerprint)))
		fmt.Fprintf(tw, "  Next rotation:\t%s\n", nextRotationLine(in.NextRotation, now))
		if d := in.RestartDeadline; d != nil {
			fmt.Fprintf(tw, "  Restart deadline:\t%s\n", restartDeadlineLine(d, now))
		}
		if len(in.Conditions) == 0 {
			fmt.Fprintf(tw, "  Conditions:\tnone\n")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(in.Conditions) > 0 {
			fmt.Fprintf(w, "  Conditions:\n")
			for _, c := range in.Conditions {
				fmt.Fprintf(w, "    %s=%s %s: %s (since %s)\n", c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime.UTC().Format(time.RFC3339))
			}
		}
	}
	if len(in.RemoteClusters) > 0 {
		if err := renderRemotes(w, in.RemoteClusters, now); err != nil {
			return err
		}
	}
	fmt.Fprintf(tw, "\nObserved now\n")
	layouts := in.Live.MeshedPods
	meshed := layouts.NativeSidecar + layouts.Container
	fmt.Fprintf(tw, "  Meshed pods:\t%d (%d injected by the proxy injector, %d control plane; proxy as native sidecar: %d, as container: %d)\n",
		meshed, meshed-in.Live.ControlPlanePods, in.Live.ControlPlanePods, layouts.NativeSidecar, layouts.Container)
	fmt.Fprintf(tw, "  Trust bundle:\t%d/%d injected pods on sha256 %s\n", in.Live.TrustBundle.Converged, in.Live.TrustBundle.Target, orNone(steps.ShortFingerprint(in.Live.TrustBundleSHA256)))
	fmt.Fprintf(tw, "  Workload certificates:\t%d/%d meshed pods on issuer %s%s\n", in.Live.WorkloadCertificates.Converged, in.Live.WorkloadCertificates.Target,
		orNone(steps.ShortFingerprint(in.Live.ActiveIssuer)), notProbedSuffix(in.Live.WorkloadCertificates.NotProbed))
	for _, r := range in.Live.RejectedCertificates {
		fmt.Fprintf(tw, "  Rejected certificate:\t%s\n", r)
	}
	for _, p := range in.Live.Problems {
		fmt.Fprintf(tw, "  Problem:\t%s\n", p)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(in.Pods) == 0 {
		_, err := fmt.Fprintf(w, "\nEvery meshed pod has converged.\n")
		return err
	}
	fmt.Fprintf(w, "\nPods that have not converged (%d):\n", len(in.Pods))
	return renderPods(w, in.Pods, 0)
}

// renderRemotes prints the linked clusters as the operator last read them (status.remoteClusters).
func renderRemotes(w io.Writer, rs []v1alpha1.RemoteClusterStatus, now time.Time) error {
	fmt.Fprintf(w, "\nLinked clusters (as the operator last read them):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLUSTER\tSOURCE\tPHASE\tANCHORS\tTRUST BUNDLE\tCERTIFICATES\tLAST READ\tBLOCKING")
	for _, r := range rs {
		var anchors []string
		for _, a := range r.Anchors {
			anchors = append(anchors, steps.ShortFingerprint(a))
		}
		read := "never"
		if r.LastObserved != nil {
			read = age(now.Sub(r.LastObserved.Time)) + " ago"
		}
		blocking := "none"
		if r.BlockingReason != "" {
			blocking = r.BlockingReason + ": " + r.BlockingMessage
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Source, orNone(string(r.Phase)), orNone(strings.Join(anchors, ",")),
			remoteCount(r.TrustBundle), remoteCount(r.WorkloadCertificates), read, blocking)
	}
	return tw.Flush()
}

func remoteCount(c *v1alpha1.ConvergenceStatus) string {
	if c == nil {
		return "unknown"
	}
	return fmt.Sprintf("%d/%d %s", c.ConvergedPods, c.TargetPods, c.Status)
}

// renderPods prints the pods as a table; limit > 0 prints that many at most.
func renderPods(w io.Writer, pods []podView, limit int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tWORKLOAD\tPROBLEM")
	for i, p := range pods {
		if limit > 0 && i == limit {
			fmt.Fprintf(tw, "... and %d more\t\t\t\n", len(pods)-limit)
			break
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Workload, strings.Join(p.Problems, "; "))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
