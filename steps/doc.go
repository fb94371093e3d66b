// Package steps is the trust-anchor rotation: its steps, in order, over a snapshot of the
// cluster. The operator runs them and `linkerd trust plan` walks them, both through package
// workflow's engine, which knows nothing of Linkerd.
//
// # A step
//
// A Step (step.go) is the engine's step — a stable kebab-case name (public: the checkpoint key,
// a plan's line, an Event's label), a phase, an Observe that decides from a State alone whether
// the step is done, must wait (and why, in a reason and a message), must act or must jump, and an
// idempotent Act run under a token the engine checkpoints first (token.go) — with the facts the
// operator, plans and the fault suite need besides: what the user must do (Manual), what the
// operator does instead when the spec automates it (Automated), what a plan assumes to look
// ahead (Assumes), whether the step relies on the trust bundle, and so on. Each step declares
// all of it in a file of its own, or in one file per family of steps sharing a constructor.
//
// # The order
//
// Rotation (rotation.go) lists the steps in the order the rotation takes them; its comment says
// the safety rule behind that order. The list is a tree of stages (stage.go: at rest, then expand,
// switch the issuer, retire, some nested), as kubeadm's phases nest: what holds at a step because
// of where it sits (the issuer has not switched yet, every pod must keep the expanded bundle, the
// anchor is retiring, ...) is its stages' Position, not the step's own declaration, and the
// recovery's two moves stand out of that order (outOfOrder). Whoever runs the steps is given the
// list: nothing else keeps one, so a new step is an entry in a stage and a file of its own.
// Rotation wraps each step's Observe in the guards every step shares: the trust-bundle check of
// the steps that rely on the bundle (drift.go), a rotation superseded by a newer anchor
// (supersede.go), the steps a cross-signed rotation skips (strategy.go).
//
// # The state
//
// A State (state.go) is plain data read at one moment: the anchor, the previous anchor, the
// identity issuer, the trust bundle, the control plane, the meshed pods' convergence and the
// workloads, with the TrustAnchorRotation's spec and checkpoint. Package steps/observe reads it,
// one reader for both: the operator from its informers' snapshot, the CLI from one round of GETs.
// Steps never read the cluster themselves; they write only through a Writer (rotation.go), which
// package steps/apply implements for real and for dry runs. Simulated (simulated.go) is the one
// simulated Writer: it makes each write in a State as the apiserver shows it once accepted; a
// plan's look ahead (apply.Ahead) builds on it, and this package's tests run the rotation over it.
//
// # The files by job
//
//   - the steps: bootstrap.go, detect.go, bundle.go (the bundle writes), controlplane.go (the
//     control-plane restarts), propagate.go (the data plane on a new bundle), identity.go,
//     issuer.go, renewcertificates.go, retire.go, remote.go (the gates of linked clusters);
//   - what they share: step.go, rotation.go, stage.go (what holds at a step by its place),
//     reasons.go (reasons others match on), token.go (the act-token grammar), assume.go (a
//     plan's assumptions), simulated.go (the writes made in a State);
//   - the state and what it derives: state.go, anchors.go (the wanted bundle), certificates.go
//     (certificate convergence), keep.go (anchors a bundle must keep), workload.go, proxy.go,
//     pki.go (certificate helpers), bridge.go (the path a proxy builds through a cross-signed
//     anchor, as rustls-webpki does), config.go (the object names and their flags);
//   - the guards: drift.go, supersede.go, strategy.go, validate.go (what the operator cannot use
//     in the spec: the fields that did not decode, time zones, selectors, the durations' bounds);
//   - between rotations and before one: staleissuer.go (identity signing with an issuer the
//     Secret no longer holds), leafexpiry.go (workload certificates their proxies did not
//     renew), expiredissuer.go (an expired identity issuer), expiredanchor.go
//     (an expired trust anchor), recovery.go (the two steps by which a rotation away from an
//     expired anchor starts with identity, and the bridged recovery: that rotation in the
//     cross-signed order, the renewed anchor signed by the expired one), takeover.go (a mesh on
//     Linkerd's hand-made PKI handed over to cert-manager);
//   - automatic restarts: restarts.go (planning), restartobserve.go (observing), restartact.go
//     (acting), window.go (maintenance windows), proxyenv.go (the proxy-env edits),
//     restartdeadline.go (a cross-signed rotation's restart left to churn);
//   - the status projection: status.go (phase, message, checkpoint), conditions.go, hold.go (a
//     failed act, spec.suspend, an invalid spec), history.go (status.history), deadline.go (status.nextRotation).
package steps
