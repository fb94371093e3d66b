package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
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
	interval := new(time.Duration)
	durationVar(fs, interval, "interval", 2*time.Second, "with --watch, time between two observations")
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
	var hashes []string
	if observe.Forbidden(s.Previous) {
		in.Live.Problems = append(in.Live.Problems, s.Previous.Problem("previous-anchor Secret")+": the desired trust bundle is unknown")
	} else if desired := s.DesiredBundle(); desired != "" {
		hashes = s.BundleHashes()
		in.Live.TrustBundleSHA256 = steps.BundleHash(desired)
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
	if t := probes.trouble(results); t != "" {
		in.Live.Problems = append(in.Live.Problems, t)
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
		if len(hashes) > 0 {
			if why := podindex.BundleProblem(p, hashes...); why != "" {
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
