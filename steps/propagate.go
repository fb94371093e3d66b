package steps

import (
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// propagateTrustRootsStep waits for the data plane to be injected with the expanded bundle.
func propagateTrustRootsStep(w Writer) Step {
	step := bundleRestartsStep(w, StepPropagateTrustRoots, v1alpha1.PhasePropagatingTrustRoots, propagate, "expanded",
		"Wait until every meshed pod was injected with the expanded bundle (restart your workloads).")
	step.Observe = warnSchemeSwitch(step.Observe)
	return Step{
		Step:           step,
		ReliesOnBundle: true, ReloadsBundle: true,
		CrossSignedSkips: "no pod needs the new anchor in its roots before the issuer switch: the bridge in the issuer's chain leads its certificates to the previous anchor",
		Manual:           restartYourWorkloads, Automated: restartsBehind, WaitsOnTrustBundle: true, Assumes: AssumeWorkloadsRestarted,
	}
}

// removeOldTrustRootsStep waits for the data plane to be injected with the reduced bundle.
func removeOldTrustRootsStep(w Writer) Step {
	return Step{
		Step: bundleRestartsStep(w, StepRemoveOldTrustRoots, v1alpha1.PhaseRemovingOldTrustRoots, reduce, "reduced",
			"Wait until every meshed pod was injected with the reduced bundle (restart your workloads)."),
		ReliesOnBundle: true, ReloadsBundle: true,
		Manual: restartYourWorkloads, Automated: restartsBehind, WaitsOnTrustBundle: true, Assumes: AssumeWorkloadsRestarted,
	}
}

// waitsOnReducedBundle reports whether step is remove-old-trust-roots, the last of a rotation,
// which waits for the data plane on the reduced bundle: a renewal of the anchor meanwhile ends
// the round there rather than restarting it (superseded).
func waitsOnReducedBundle(step string) bool { return step == StepRemoveOldTrustRoots }

func bundleRestartsStep(w Writer, name string, ph v1alpha1.Phase, p restartPurpose, which, doc string) workflow.Step[*State] {
	return workflow.Step[*State]{
		Name: name, Phase: string(ph), Doc: doc,
		Observe: observeBundleRestarts(p, which), Act: actRestarts(w, p), Describe: describeRestarts(p),
	}
}

// warnSchemeSwitch completes the wait of a takeover's propagate-trust-roots: switching identity's
// issuer scheme now is the one misstep the mesh cannot absorb (docs/design/takeover.md, "7
// before 6"). Identity would restart onto the expanded roots with cert-manager's issuer and
// sign certificates that the pods not yet restarted, which trust the hand-made anchor alone,
// reject.
func warnSchemeSwitch(observe func(*State, string) workflow.Decision) func(*State, string) workflow.Decision {
	return func(s *State, token string) workflow.Decision {
		d := observe(s, token)
		if d.Outcome == workflow.Wait && s.SchemeSwitch() != "" {
			d.Message += "; do not switch identity's issuer scheme (helm upgrade --set identity.issuer.scheme=" + SchemeKubernetes +
				") before every pod trusts the new anchor: identity would sign certificates that the pods not yet restarted reject"
		}
		return d
	}
}

func restartYourWorkloads(*State) string { return "restart your workloads" }

func restartsBehind(s *State) string {
	return automatedRestarts(s.Spec, "restarts the workloads whose pods are behind")
}

func observePropagated(which string) func(*State, string) workflow.Decision {
	return func(s *State, _ string) workflow.Decision {
		c := s.TrustBundle
		if c.Done() {
			return workflow.Completed("TrustBundleConverged", fmt.Sprintf("%d of %d meshed pod(s) run with the %s trust bundle", c.Converged, c.Target, which))
		}
		msg := fmt.Sprintf("Waiting for %d pod(s) to converge on the %s trust bundle", c.Target-c.Converged, which)
		if len(c.Behind) > 0 {
			msg += "; restart: " + c.describeBehind(5)
		}
		return workflow.Waiting("TrustBundleConverging", msg)
	}
}

// observeBundleRestarts is the Observe of the steps that wait for the data plane to be injected
// with the desired bundle (propagate-trust-roots, remove-old-trust-roots): the user restarts
// workloads (Manual), or the operator does (Automatic).
func observeBundleRestarts(p restartPurpose, which string) func(*State, string) workflow.Decision {
	manual := observePropagated(which)
	return func(s *State, token string) workflow.Decision {
		d := manual(s, token)
		if !s.automaticRestarts() {
			return d
		}
		c := s.TrustBundle
		behind := fmt.Sprintf("Waiting for %d pod(s) to converge on the %s trust bundle", c.Target-c.Converged, which)
		if d.Outcome == workflow.Done {
			if p != reduce || s.Workloads != nil && s.RefreshOverrides() == 0 {
				return d
			}
			behind = fmt.Sprintf("%d workload(s) still carry the accelerated refresh interval", s.RefreshOverrides())
		}
		return s.observeRestarts(p, token, behind)
	}
}
