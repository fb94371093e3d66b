package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func inspectCommand(env *Env) *command {
	fs := newFlagSet("inspect")
	out := addOutputFlag(fs, "table", "json", "yaml")
	history := fs.Bool("history", false, "show the rotations the TrustAnchorRotation recorded (status.history) and the next rotation's deadline, without probing")
	watch := fs.BoolP("watch", "w", false, "redraw a live view until the rotation is Synced and converged, or until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "with --watch, time between two observations")
	kf := addKubeFlags(fs)
	pf := addProbeFlags(fs)
	c := &command{
		name:  "inspect",
		short: "Show where the rotation stands and which meshed pods have not converged",
		long: `Show the rotation's phase, convergence and blocking message from the TrustAnchorRotation status,
then every meshed pod that has not converged, and why: its linkerd.io/trust-root-sha256 differs
from the wanted bundle's, or its live certificate (read from its linkerd-admin port) is not signed
by the active issuer. --watch follows the rotation until it is Synced; --history shows the
rotations the operator recorded.`,
		example: `  linkerd trust inspect
  linkerd trust inspect --output json
  linkerd trust inspect --history
  linkerd trust inspect --concurrency 50 --timeout 10s

  # Follow a rotation from a laptop
  linkerd trust inspect --watch --port-forward`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("inspect takes no arguments, got %q", args)
		}
		if err := kf.validate(); err != nil {
			return err
		}
		if err := pf.validate(); err != nil {
			return err
		}
		if *history && *watch {
			return usagef("%v", errHistoryWatch)
		}
		if *watch && out.value != "table" {
			return usagef("--watch draws a live view: it cannot be combined with --output %s", out.value)
		}
		if *interval <= 0 {
			return usagef("--interval must be positive")
		}
		cl, err := env.clients(kf)
		if err != nil {
			return err
		}
		if *history {
			return showHistory(ctx, env, cl, kf.RotationName, out.value)
		}
		if *watch {
			return watchRotation(ctx, env, cl, kf, pf, *interval)
		}
		in, err := inspect(ctx, env, cl, kf, pf, nil)
		if err != nil {
			return err
		}
		if out.value != "table" {
			return writeStructured(env.Out, in, out.value)
		}
		return renderInspection(env.Out, in, env.now())
	}
	return c
}

// inspection is the output of inspect.
type inspection struct {
	Rotation string `json:"rotation"`
	// Found is false when the TrustAnchorRotation does not exist.
	Found bool   `json:"found"`
	Phase string `json:"phase,omitempty"`
	Step  string `json:"step,omitempty"`
	// Strategy is the strategy of the rotation in progress (status.checkpoint.strategy), or
	// the one the next rotation takes (spec.strategy) when Synced.
	Strategy                  v1alpha1.RotationStrategy   `json:"strategy,omitempty"`
	LastPhaseTransitionTime   *metav1.Time                `json:"lastPhaseTransitionTime,omitempty"`
	BlockingMessage           string                      `json:"blockingMessage,omitempty"`
	TrustBundle               *v1alpha1.ConvergenceStatus `json:"trustBundle,omitempty"`
	WorkloadCertificates      *v1alpha1.ConvergenceStatus `json:"workloadCertificates,omitempty"`
	ActiveIssuerFingerprint   string                      `json:"activeIssuerFingerprint,omitempty"`
	PreviousAnchorFingerprint string                      `json:"previousAnchorFingerprint,omitempty"`
	Conditions                []metav1.Condition          `json:"conditions,omitempty"`
	// RemoteClusters are the linked clusters as the operator last read them.
	RemoteClusters []v1alpha1.RemoteClusterStatus `json:"remoteClusters,omitempty"`
	NextRotation   *v1alpha1.NextRotation         `json:"nextRotation,omitempty"`
	// RestartDeadline is status.restartDeadline: a cross-signed rotation's restart left to churn.
	RestartDeadline *v1alpha1.RestartDeadline `json:"restartDeadline,omitempty"`
	Live            liveView                  `json:"live"`
	Pods            []podView                 `json:"pods"`
}

// liveView is what this command observed itself.
type liveView struct {
	// TrustBundleSHA256 is the hash of the bundle the rotation wants, which pods must carry.
	TrustBundleSHA256 string `json:"trustBundleSHA256,omitempty"`
	// ActiveIssuer is the fingerprint of the identity issuer live certificates must come from.
	ActiveIssuer string `json:"activeIssuer,omitempty"`
	// MeshedPods counts the alive meshed pods, control plane included, by proxy layout;
	// ControlPlanePods those of Linkerd's control plane: the others were injected by the proxy
	// injector, and only they carry the trust bundle's hash.
	MeshedPods           proxyLayouts `json:"meshedPods"`
	ControlPlanePods     int          `json:"controlPlanePods"`
	TrustBundle          count        `json:"trustBundle"`
	WorkloadCertificates count        `json:"workloadCertificates"`
	// RejectedCertificates are the pods, control plane included, whose address answered with a
	// certificate chain that is not theirs ("namespace/name: what was wrong"; the first few).
	RejectedCertificates []string `json:"rejectedCertificates,omitempty"`
	// Problems are what kept the command from observing everything (an unusable anchor...).
	Problems []string `json:"problems,omitempty"`
}

// proxyLayouts counts meshed pods by where their proxy is (steps.ProxyContainer).
type proxyLayouts struct {
	NativeSidecar int `json:"nativeSidecar"`
	Container     int `json:"proxyContainer"`
}

type count struct {
	Converged int `json:"convergedPods"`
	Target    int `json:"targetPods"`
	NotProbed int `json:"notProbedPods,omitempty"`
}

// podView is a meshed non-control-plane pod that has not converged.
type podView struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Workload  string   `json:"workload"`
	Problems  []string `json:"problems"`
}

// inspect reads the TrustAnchorRotation and the cluster, probes the meshed pods and lists those
// that have not converged. progress reports the probes.
func inspect(ctx context.Context, env *Env, cl *Clients, kf *KubeFlags, pf *probeFlags, progress func(done, total int)) (*inspection, error) {
	in := &inspection{Rotation: kf.RotationName, Pods: []podView{}}
	tar, err := cl.Rotations.Get(ctx, kf.RotationName)
	switch {
	case err == nil:
		st := tar.Status
		in.Found = true
		in.Phase = string(st.Phase)
		if in.Phase == "" {
			in.Phase = string(v1alpha1.PhaseSynced)
		}
		if st.Checkpoint != nil {
			in.Step = st.Checkpoint.Step
		}
		in.Strategy = steps.StrategyOf(tar.Spec)
		if cp := st.Checkpoint; cp != nil && cp.Rotation != "" {
			in.Strategy = steps.StrategyOf(v1alpha1.TrustAnchorRotationSpec{Strategy: cp.Strategy})
		}
		in.LastPhaseTransitionTime = st.LastPhaseTransitionTime
		in.BlockingMessage = st.BlockingMessage
		in.TrustBundle, in.WorkloadCertificates = st.TrustBundle, st.WorkloadCertificates
		in.ActiveIssuerFingerprint, in.PreviousAnchorFingerprint = st.ActiveIssuerFingerprint, st.PreviousAnchorFingerprint
		in.Conditions = st.Conditions
		in.RemoteClusters = st.RemoteClusters
		in.NextRotation = st.NextRotation
		in.RestartDeadline = st.RestartDeadline
	case apierrors.IsNotFound(err):
	default:
		return nil, fmt.Errorf("reading TrustAnchorRotation %s: %w", kf.RotationName, err)
	}

	var status *v1alpha1.TrustAnchorRotationStatus
	if in.Found {
		status = &tar.Status
	}
	probes, err := env.startProbes(ctx, cl, pf, progress)
	if err != nil {
		return nil, err
	}
	defer probes.stop()
	reading, err := observe.ReadFeeding(ctx, cl.pkiReader(kf.Config), status, env.now(), probes.feed)
	if err != nil {
		return nil, err
	}
	if in.Found {
		if err := reading.SetInFlight(tar.Status.InFlightAnchors); err != nil {
			return nil, fmt.Errorf("TrustAnchorRotation %s: %w", kf.RotationName, err)
		}
	}
	s := reading.State
	hash := ""
	if observe.Forbidden(s.Previous) {
		in.Live.Problems = append(in.Live.Problems, s.Previous.Problem("previous-anchor Secret")+": the desired trust bundle is unknown")
	} else if desired := s.DesiredBundle(); desired != "" {
		hash = steps.BundleHash(desired)
		in.Live.TrustBundleSHA256 = hash
	} else {
		in.Live.Problems = append(in.Live.Problems, s.Anchor.Problem("trust-anchor Secret")+": the desired trust bundle is unknown")
	}
	active := s.Issuer.Fingerprint()
	in.Live.ActiveIssuer = active
	if active == "" {
		in.Live.Problems = append(in.Live.Problems, s.Issuer.Problem("identity-issuer Secret")+": the active issuer is unknown")
	}
	results := probes.wait(reading.Pods)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	check := probe.NewCertificateCheck(s.CertificateRoot())
	certs := check.Convergence(reading.Pods, results)
	in.Live.WorkloadCertificates = count{certs.Converged, certs.Target, certs.NotProbed}
	for _, p := range certs.Pods[:min(certs.Rejected, len(certs.Pods))] {
		in.Live.RejectedCertificates = append(in.Live.RejectedCertificates, p.Namespace+"/"+p.Name+": "+p.Reason)
	}
	if more := certs.Rejected - len(in.Live.RejectedCertificates); more > 0 {
		in.Live.RejectedCertificates = append(in.Live.RejectedCertificates, fmt.Sprintf("and %d more", more))
	}
	in.Live.TrustBundle = count{Converged: s.TrustBundle.Converged, Target: s.TrustBundle.Target}

	for _, p := range reading.Pods {
		if !p.Meshed || !p.Alive {
			continue
		}
		if p.NativeSidecar {
			in.Live.MeshedPods.NativeSidecar++
		} else {
			in.Live.MeshedPods.Container++
		}
		if p.ControlPlane {
			in.Live.ControlPlanePods++
			continue
		}
		var problems []string
		if hash != "" {
			if why := podindex.BundleProblem(p, hash); why != "" {
				problems = append(problems, why)
			}
		}
		var r *probe.ProbeResult
		if got, ok := results[p.Key()]; ok {
			r = &got
		}
		if active != "" {
			if why := check.Problem(p, r); why != "" {
				problems = append(problems, why)
			}
		}
		if len(problems) > 0 {
			in.Pods = append(in.Pods, podView{Namespace: p.Namespace, Name: p.Name, Workload: workloadName(p), Problems: problems})
		}
	}
	sort.Slice(in.Pods, func(i, j int) bool {
		a, b := in.Pods[i], in.Pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return in, nil
}

// workloadName drops the namespace from the pod's "namespace/Kind/name" workload.
func workloadName(p *podindex.Pod) string {
	return strings.TrimPrefix(p.Workload, p.Namespace+"/")
}

// converged reports whether the rotation is at rest: Synced, not blocked, every pod converged.
func (in *inspection) converged() bool {
	return in.Found && in.Phase == string(v1alpha1.PhaseSynced) && in.BlockingMessage == "" && len(in.Pods) == 0 &&
		in.Live.TrustBundle.Converged >= in.Live.TrustBundle.Target &&
		in.Live.WorkloadCertificates.Converged >= in.Live.WorkloadCertificates.Target
}

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

// --- watch ------------------------------------------------------------------------------------

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
