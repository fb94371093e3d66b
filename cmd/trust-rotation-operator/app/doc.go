// Package app is the trust-rotation operator: it watches cert-manager's trust anchor and
// identity issuer, Linkerd's trust bundle, control plane and meshed pods, and advances the
// rotation workflow (package steps) one observed step at a time, keeping the workflow's
// checkpoint in the TrustAnchorRotation status.
//
// # The reconcile path
//
// Every reconcile goes through six stages, one function each in Controller.reconcile
// (reconcile.go): the event, the State read, the repairs, the engine, the checkpointed act and
// the status projection.
//
//  1. The event (controller.go). New wires the informers (informers.go: the anchor, previous
//     anchor and issuer Secrets, the trust bundle, the control plane; the meshed pods, held in
//     observe's PodIndex; the TrustAnchorRotations), the live-certificate probes
//     (probe.CertTracker), the automations' informers (automation.go) and the linked
//     clusters' watches (remote.go) to poke the controller. churn.go paces the pokes of pods
//     that only move counts; rotationUpdated drops the echo of the operator's own status write.
//     Run's loop is client-go's workqueue's, one key: processNext takes it, counts the
//     reconcile by its cause (reconcileCause, metrics.go), and queues it again for the moment
//     the reconcile named (recheckAfter) or, after a failure, for the limiter's back-off.
//  2. The State read (reconcile.go readState). driven (rotation.go) takes the driven
//     TrustAnchorRotation, as cached or as last written, marking any other one Ignored and any
//     one whose spec it cannot use SpecInvalid (then it holds every act, hold.go held).
//     observe.Snapshotter (steps/observe/snapshot.go) reads the caches through the getters of
//     informers.go with the converters `linkerd trust` uses for its reads (observe.Read), so
//     both see the cluster alike; the linked clusters' reports come from remote.go; what the
//     automations need is read by observe.FillAutomations (steps/observe/snapshot_automation.go)
//     through the getters of automation_caches.go, over the operator's own workload writes the
//     caches may not show yet (automation_writes.go).
//  3. The repairs (repair.go repairInputs), before the engine and outside any checkpoint: the
//     previous-anchor Secret recreated from the trust bundle, and a trust bundle another writer
//     changed rewritten (with a back-off). A repair that wrote ends the reconcile; its write
//     comes back as an event.
//  4. The engine (reconcile.go advanceEngine): workflow.Advance walks steps.Rotation from the
//     checkpoint, passing the steps that are done, up to one act or jump; announce records what
//     it did (Events, logs, the acts metric).
//  5. The checkpointed act (reconcile.go checkpoint.save): the engine saves the checkpoint, its
//     act's token included, in the status (rotation.go write) before it runs the act, so a
//     killed operator resumes there without repeating a destructive act. The act writes through
//     the steps.Writer New builds: apply.KubeWriter, wrapped by automation_writes.go's
//     rememberingWriter and crash.go's fault hook, which only a -tags crashpoints build of the
//     operator (the end-to-end tests') sets.
//  6. The status projection (reconcile.go projectStatus): steps.Project makes the status from
//     the State and the engine's result; it is written unless only progress moved and that is
//     held back (progress.go holdProgress); report then sets the metrics (metrics.go,
//     history.go) and emits the Events that follow the status (hold.go suspendEvents among
//     them). An act that failed is projected at once instead (hold.go publishActFailure).
//
// Around the path: steps/kube's leader election (lease.go) elects the one leader that runs it
// and its event recorder (events.go) writes its Events; lazyinformer.go starts an informer on
// its first use; apicount.go counts the API requests.
//
// # What a failover forgets
//
// Everything a decision rests on is in the cluster: the checkpoint (its step, its act's token and
// count, the rotation's anchors) in the TrustAnchorRotation status, the restarts in the
// workloads' annotations, the rest in the objects the informers read. A new leader reads them
// and goes on. The Controller's own memory is pacing and reporting, each lost safely:
//
//   - the queue, its back-off and recheck moment (retryAt, recheckAt, poked): the new leader
//     starts with a reconcile, which names its own moments again;
//   - latest and replaced, the status as last written until the cache shows it, and echo: a
//     new leader reads the status from its cache, which starts synced;
//   - the automations' written and evicted marks (automation.go), the restarts not yet in the
//     cache: the new leader's cache lists the workloads with their marks;
//   - churn, reconcileBegan, lastWriteBegan and controlPlaneChanged, the progress write pacing:
//     the first reconcile writes what it sees;
//   - bundleRewrites and bundleRewriteAt, the back-off against a writer that keeps reverting the
//     bundle: it starts over, one rewrite sooner than it would have;
//   - lastDrift, lastIdentityEarly, lastUndecodable, the Events already emitted: one may be
//     emitted again (the conditions-based ones, IdentityIssuerStale among them, read the
//     status and are not);
//   - specInvalidSeries, the metric series to clear: a new process has none;
//   - writes, the act writes of the running reconcile: a reconcile does not outlive its leader.
package app
