// Package cli implements the linkerd-trust commands: a Linkerd CLI extension (`linkerd trust …`
// runs `linkerd-trust …`) that renders the trust bundle, checks the installation, inspects and
// plans a trust-anchor rotation. Every command reads the cluster through the same converters
// and rotation steps as the operator (packages steps, steps/observe, workflow), so the CLI never
// holds a second copy of the rotation's logic.
//
// Commands are plain values with their own pflag FlagSet; Main dispatches on the first argument.
// Human output goes to the command's streams; nothing is logged.
//
// The files by job:
//
//   - the frame: cli.go (Env, the command type, Main), help.go, kube.go (the flags and clients
//     every command that reads the cluster shares), version.go (version, metadata);
//   - one file per command: bundle.go (with adopt.go, bundle --adopt), plan.go (a dry run of the
//     steps through Workflow.Plan), rotate.go (with suspend.go, --suspend and --resume), wait.go;
//   - check: checks.go (the command, its flags, the categories in order), checkrunner.go
//     (running and rendering checks), then one file per category: checkcertmanager.go and
//     checkpki.go (the prerequisites, check --pre), checkoperator.go (the rotation),
//     checkdataplane.go (check --proxy), remote.go (linked clusters), and the deadline's and the
//     strategy's checks in deadline.go and strategy.go;
//   - inspect: inspect.go (the command and its reading), inspectrender.go (the table),
//     inspectwatch.go (--watch);
//   - what several commands share: probe.go (the live-certificate probes of inspect and plan),
//     deadline.go (the next rotation's deadline and the history, as check, inspect and plan show
//     them), remote.go (reading the linked clusters, for check and plan).
package cli
