package steps

import (
	"context"
	"fmt"
	"strings"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// refreshControlPlaneStep restarts the injector onto the expanded bundle.
func refreshControlPlaneStep(w Writer) Step {
	return Step{
		Step: restartStep(w, StepRefreshControlPlane, v1alpha1.PhaseRefreshingControlPlane, destinationAndInjector,
			"Restart linkerd-destination and linkerd-proxy-injector so the injector stamps the expanded bundle on new pods (identity is left alone: see restart-identity)."),
		Assumes: AssumeControlPlaneRestarted, ReliesOnBundle: true, ReloadsBundle: true, WritesMany: true,
		CrossSignedSkips: "the trust bundle was not expanded, so the injector has nothing new to stamp",
	}
}

// restartIdentityOnNewIssuerStep restarts identity once the issuer was renewed. Still
// WaitingForIdentityRotation: RenewingWorkloadCerts tells users to restart their workloads,
// which is only useful once every identity replica signs with the new issuer (a replica may not
// have hot-reloaded it yet).
func restartIdentityOnNewIssuerStep(w Writer) Step {
	return Step{
		Step: restartStep(w, StepRestartIdentityOnNewIssuer, v1alpha1.PhaseWaitingForIdentityRotation, identityOnly,
			"Restart linkerd-identity so that every identity replica signs with the new issuer, its own proxy included."),
		Assumes: AssumeControlPlaneRestarted, ReliesOnBundle: true, ReloadsBundle: true,
	}
}

// refreshControlPlaneCertsStep moves the control plane's own proxies onto the new issuer.
func refreshControlPlaneCertsStep(w Writer) Step {
	return Step{
		Step: restartStep(w, StepRefreshControlPlaneCerts, v1alpha1.PhaseRenewingWorkloadCerts, destinationAndInjector,
			"Restart linkerd-destination and linkerd-proxy-injector so their proxies hold certificates from the new issuer."),
		Assumes: AssumeControlPlaneRestarted, ReliesOnBundle: true, ReloadsBundle: true, WritesMany: true,
	}
}

// refreshControlPlaneReducedStep restarts the control plane onto the reduced bundle.
func refreshControlPlaneReducedStep(w Writer) Step {
	return Step{
		Step: restartStep(w, StepRefreshControlPlaneReduced, v1alpha1.PhaseRefreshingControlPlane, wholeControlPlane,
			"Restart the whole control plane onto the reduced bundle, identity first."),
		Assumes: AssumeControlPlaneRestarted, ReliesOnBundle: true, ReloadsBundle: true, WritesMany: true,
	}
}

// restartStep restarts the control-plane Deployments of the set, in order.
func restartStep(w Writer, name string, ph v1alpha1.Phase, set restartSet, doc string) workflow.Step[*State] {
	return workflow.Step[*State]{
		Name: name, Phase: string(ph), Doc: doc,
		Observe: observeRestart(set), Act: actRestart(w, set), Describe: describeRestart(set),
	}
}

// A restart set picks control-plane Deployments from the config, in restart order.
type restartSet func(Config) []string

func identityOnly(c Config) []string { return []string{c.IdentityDeployment} }

func destinationAndInjector(c Config) []string {
	return []string{c.DestinationDeploy, c.ProxyInjectorDeploy}
}

func wholeControlPlane(c Config) []string { return c.ControlPlane() }

// observeRestart is done when every Deployment of the set carries this pass's token in its
// restartedAt annotation and is rolled out. The token tells this pass's restart from any older
// one, so an operator restarted mid-step never restarts the control plane twice.
func observeRestart(set restartSet) func(*State, string) workflow.Decision {
	return func(s *State, token string) workflow.Decision {
		names := set(s.Config)
		for _, n := range names {
			if d, ok := s.ControlPlane[n]; !ok || !d.Found {
				return workflow.Waiting("ControlPlaneMissing", fmt.Sprintf("Deployment %s/%s not found", s.Config.LinkerdNamespace, n))
			}
		}
		var pending []string
		for _, n := range names {
			if token == "" || s.ControlPlane[n].RestartedAt != token {
				pending = append(pending, n)
			}
		}
		if len(pending) > 0 {
			return workflow.ActNeeded("RestartNeeded", "restart Deployment(s) "+strings.Join(pending, ", "))
		}
		for _, n := range names {
			if d := s.ControlPlane[n]; !d.RolledOut {
				return workflow.Waiting("ControlPlaneRollingOut", fmt.Sprintf("Waiting for the rollout of Deployment %s/%s: %s", d.Namespace, d.Name, d.Progress))
			}
		}
		return workflow.Completed("ControlPlaneRestarted", "restarted and rolled out: "+strings.Join(names, ", "))
	}
}

func actRestart(w Writer, set restartSet) func(context.Context, *State, string) error {
	return func(ctx context.Context, s *State, token string) error {
		for _, n := range set(s.Config) {
			if s.ControlPlane[n].RestartedAt == token {
				continue
			}
			if err := w.RestartDeployment(ctx, s.Config.LinkerdNamespace, n, token); err != nil {
				return err
			}
		}
		return nil
	}
}

func describeRestart(set restartSet) func(*State) []string {
	return func(s *State) []string {
		var out []string
		for _, n := range set(s.Config) {
			out = append(out, fmt.Sprintf("restart Deployment %s/%s", s.Config.LinkerdNamespace, n))
		}
		return out
	}
}
