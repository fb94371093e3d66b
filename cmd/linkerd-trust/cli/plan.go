package cli

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func planCommand(env *Env) *command {
	fs := newFlagSet("plan")
	out := addOutputFlag(fs, "table", "json", "yaml")
	assume := fs.Bool("assume-anchor-renewed", false, "plan the whole rotation as if the trust anchor had just been renewed (cmctl renew), with a throwaway anchor made in memory")
	kf := addKubeFlags(fs)
	pf := addProbeFlags(fs)
	c := &command{
		name:  "plan",
		short: "Show what the operator would do next, step by step, without changing anything",
		long: `Show, without changing anything, the operator's remaining steps from the TrustAnchorRotation's
checkpoint: what each observes, the writes and restarts it would make, and the manual actions
that are yours. Each later step assumes the ones before it done, and says what it assumes.
--assume-anchor-renewed plans the whole rotation before "cmctl renew", with a throwaway anchor.`,
		example: `  # What remains of the rotation under way
  linkerd trust plan

  # The whole rotation, before renewing the trust anchor
  linkerd trust plan --assume-anchor-renewed

  # As YAML, reaching pods through the apiserver
  linkerd trust plan -o yaml --port-forward`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("plan takes no arguments, got %q", args)
		}
		if err := kf.validate(); err != nil {
			return err
		}
		if err := pf.validate(); err != nil {
			return err
		}
		cl, err := env.clients(kf)
		if err != nil {
			return err
		}
		p, err := buildPlan(ctx, env, cl, kf, pf, planOptions{assumeRenewed: *assume})
		if err != nil {
			return err
		}
		return renderPlan(env.Out, p, out.value)
	}
	return c
}

// plan is the output of the plan command.
type plan struct {
	Rotation string `json:"rotation"`
	// Phase and Step are where the checkpoint stands.
	Phase               string   `json:"phase"`
	Step                string   `json:"step"`
	AssumeAnchorRenewed bool     `json:"assumeAnchorRenewed,omitempty"`
	Notes               []string `json:"notes,omitempty"`
	// Suspended is the TrustAnchorRotation's spec.suspend: the operator acts on nothing.
	Suspended bool `json:"suspended,omitempty"`

	TrustAnchor    certView   `json:"trustAnchor"`
	PreviousAnchor certView   `json:"previousAnchor"`
	IdentityIssuer certView   `json:"identityIssuer"`
	TrustBundle    bundleView `json:"trustBundle"`
	// NextRotation is the deadline of the rotation after this one, from the anchor planned on.
	NextRotation *v1alpha1.NextRotation `json:"nextRotation,omitempty"`
	now          time.Time

	// Recovery is what recover found and will do, before the steps.
	Recovery *recoveryView `json:"recovery,omitempty"`
	// Emergency is what rotate --emergency costs and sets, before the steps.
	Emergency *emergencyView `json:"emergency,omitempty"`
	// automations are what the spec recover or rotate --emergency sets needs of the operator's
	// RBAC; tar is the TrustAnchorRotation read (its Helm release).
	automations []automationAccess
	tar         *v1alpha1.TrustAnchorRotation

	Steps []planStep `json:"steps"`
	// ManualActions are the user's, in order.
	ManualActions []string `json:"manualActions,omitempty"`
}

type certView struct {
	Ref         string `json:"ref"`
	Fingerprint string `json:"fingerprint,omitempty"`
	NotAfter    string `json:"notAfter,omitempty"`
	Problem     string `json:"problem,omitempty"`
	// Synthetic marks the in-memory stand-in of --assume-anchor-renewed.
	Synthetic bool `json:"synthetic,omitempty"`
}

type bundleView struct {
	Ref     string   `json:"ref"`
	Found   bool     `json:"found"`
	SHA256  string   `json:"sha256,omitempty"`
	Anchors []string `json:"anchors,omitempty"`
}

// Step statuses in a plan.
const (
	stepDone    = "done"    // passed: before the checkpoint, or done at it
	stepNext    = "next"    // where the operator acts or waits now
	stepPending = "pending" // after that
)

type planStep struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	Phase   string `json:"phase"`
	Doc     string `json:"doc"`
	Status  string `json:"status"`
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Changes are what the step's act would change (its Describe).
	Changes []string `json:"changes,omitempty"`
	// Simulated: the step's observation is of the state the steps before it leave (their
	// recorded writes, and the waits assumed satisfied), not of today's cluster.
	Simulated bool `json:"simulated,omitempty"`
	// Writes are the exact writes of the step's acts, as recorded: of today's cluster for the
	// next step, of the simulated state after it.
	Writes []apply.Write `json:"writes,omitempty"`
	// JumpTo is the step the workflow starts again at when this one jumps; the steps listed
	// after it start from there.
	JumpTo string `json:"jumpTo,omitempty"`
	// Assumptions are what the plan took to have happened for the step's waits to pass, so
	// that the steps after it see it: assumed, never observed.
	Assumptions []string `json:"assumptions,omitempty"`
	// Manual is the user's part in a step the operator only waits on.
	Manual string `json:"manual,omitempty"`
	// Automated is what the operator does instead when the TrustAnchorRotation's spec
	// automates the user's part (spec.dataPlaneRestart, spec.identityIssuerRenewal).
	Automated string `json:"automated,omitempty"`
	// PodsToRestart are the workloads whose pods the next step waits on.
	PodsToRestart          []steps.WorkloadCount `json:"podsToRestart,omitempty"`
	MoreWorkloadsToRestart int                   `json:"moreWorkloadsToRestart,omitempty"`
}

// placeholderToken stands for the idempotency token the operator will choose when it acts.
const placeholderToken = "<new token>"

// planOptions are what a plan assumes besides the cluster it reads.
type planOptions struct {
	// assumeRenewed: the trust anchor was just renewed (plan --assume-anchor-renewed, rotate).
	assumeRenewed bool
	// takeover: spec.takeover is set (takeover, before it sets it).
	takeover bool
	// recover: the plan of a recovery from an expired PKI (recover, before it sets the spec
	// and renews the anchor): its facts first, then the steps under the spec it sets.
	recover *recoverOptions
	// emergency: the plan of rotate --emergency, under the spec it sets (assumeRenewed too).
	emergency bool
}

// buildPlan reads the cluster once and walks the operator's steps over it with the engine's
// walk (workflow.Plan), which planSimulation carries past the step the operator stops at.
func buildPlan(ctx context.Context, env *Env, cl *Clients, kf *KubeFlags, pf *probeFlags, opts planOptions) (*plan, error) {
	assumeRenewed := opts.assumeRenewed
	cfg := kf.Config
	recorder := &apply.DryRun{Config: cfg}
	newRotation := env.Rotation
	if newRotation == nil {
		newRotation = steps.Rotation
	}
	rotation := newRotation(recorder)
	wf, err := steps.NewWorkflow(rotation)
	if err != nil {
		return nil, err
	}
	p := &plan{Rotation: kf.RotationName, AssumeAnchorRenewed: assumeRenewed}

	cp := workflow.Checkpoint{}
	tar, err := cl.Rotations.Get(ctx, kf.RotationName)
	switch {
	case err == nil:
		cp = steps.WorkflowCheckpoint(tar.Status.Checkpoint)
		if note, on := suspendedNote(tar); on {
			p.Suspended = true
			p.Notes = append(p.Notes, note)
		}
	case apierrors.IsNotFound(err):
		tar = &v1alpha1.TrustAnchorRotation{} // the operator creates it with the defaults
		p.Notes = append(p.Notes, fmt.Sprintf("TrustAnchorRotation %s not found (is the operator installed?): planning from the first step", kf.RotationName))
	default:
		return nil, fmt.Errorf("reading TrustAnchorRotation %s: %w", kf.RotationName, err)
	}
	if cp.Step == "" {
		cp.Step = wf.Steps()[0].Name
	}
	at, ok := wf.Step(cp.Step)
	if !ok {
		return nil, fmt.Errorf("TrustAnchorRotation %s is at step %q, which this version of linkerd-trust does not know: upgrade it to the operator's version", kf.RotationName, cp.Step)
	}
	p.Step, p.Phase = at.Name, at.Phase

	probes, err := env.startProbes(ctx, cl, pf, nil)
	if err != nil {
		return nil, err
	}
	defer probes.stop()
	reading, err := observe.ReadFeeding(ctx, cl.pkiReader(cfg), &tar.Status, env.now(), probes.feed)
	if err != nil {
		return nil, err
	}
	if opts.takeover && !tar.Spec.Takeover {
		tar.Spec.Takeover = true
		p.Notes = append(p.Notes, fmt.Sprintf("assuming spec.takeover is set on TrustAnchorRotation %s, as %s takeover sets it", kf.RotationName, binary))
	}
	// The desired bundle, which the convergence counts against, depends on spec.strategy.
	reading.State.Spec = tar.Spec
	reading.Recount()
	for _, u := range reading.Unreadable() {
		p.Notes = append(p.Notes, u+": the steps below are observed without it")
	}
	if len(tar.Status.InFlightAnchors) > 0 {
		if err := reading.SetInFlight(tar.Status.InFlightAnchors); err != nil {
			return nil, fmt.Errorf("TrustAnchorRotation %s: %w", kf.RotationName, err)
		}
	}
	s := reading.State
	var rc recoveryCase
	if opts.recover != nil {
		if rc.name, rc.what = s.RecoveryCase(); rc.name == "" {
			return nil, fmt.Errorf("nothing to recover from: %s; nothing was changed", nothingToRecover(s))
		}
		// An expired anchor not renewed yet: recover renews it, and the plan assumes it.
		rc.renewAnchor = rc.name == steps.RecoveryTrustAnchorExpired && !s.Rotating()
		assumeRenewed = rc.renewAnchor
		p.AssumeAnchorRenewed = assumeRenewed
	}
	var anchorKey crypto.Signer
	if assumeRenewed {
		if at.Phase != string(v1alpha1.PhaseSynced) || s.Rotating() {
			return nil, fmt.Errorf("a rotation is already under way (TrustAnchorRotation %s is at step %s, phase %s): run plan without --assume-anchor-renewed", kf.RotationName, at.Name, at.Phase)
		}
		if !s.Anchor.Usable() {
			return nil, fmt.Errorf("cannot assume a renewal: %s", s.Anchor.Problem("trust-anchor Secret"))
		}
		synth := env.NewAnchor
		if synth == nil {
			synth = synthesiseAnchor
		}
		renewed, key, err := synth(s.Anchor.Cert, s.Now)
		if err != nil {
			return nil, fmt.Errorf("making a stand-in for the renewed trust anchor: %w", err)
		}
		s.Anchor.Cert, anchorKey = renewed, key
		s.StandInCrossSigned = true
		reading.Recount()
		p.Notes = append(p.Notes, fmt.Sprintf("assuming `cmctl renew -n %s %s` just happened: the renewed trust anchor %s is a stand-in made in memory, written nowhere",
			cfg.CertManagerNamespace, cfg.AnchorSecret, steps.ShortFingerprint(steps.Fingerprint(renewed))))
	}
	results := probes.wait(reading.Pods)
	if t := probes.trouble(results); t != "" {
		p.Notes = append(p.Notes, t)
	}
	s.Certificates = probe.NewCertificateCheck(s.CertificateRoot()).Convergence(reading.Pods, results)
	s.LiveChains = probe.LiveChains(reading.Pods, results)
	if opts.recover != nil {
		p.Recovery = recoveryFacts(rc, s, tar, reading.Pods, results, *opts.recover)
		tar.Spec = p.Recovery.applyTo(tar.Spec)
		s.Spec = tar.Spec
		p.Notes = append(p.Notes, fmt.Sprintf("assuming the spec %s recover sets on TrustAnchorRotation %s: %s", binary, kf.RotationName, strings.Join(p.Recovery.Sets, "; ")))
		p.automations, p.tar = specAutomations(p.Recovery.patch, cfg, reading.Pods), tar.DeepCopy()
	}
	if opts.emergency {
		p.Emergency = emergencyFacts(s, tar.Spec, reading.Pods, rotationInProgress(tar))
		p.automations, p.tar = specAutomations(p.Emergency.patch, cfg, reading.Pods), tar.DeepCopy()
		tar.Spec = p.Emergency.applyTo(tar.Spec)
		s.Spec = tar.Spec
		if len(p.Emergency.Sets) > 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("assuming the spec %s rotate --emergency sets on TrustAnchorRotation %s: %s", binary, kf.RotationName, strings.Join(p.Emergency.Sets, "; ")))
		}
	}
	// The linked clusters, read as the operator reads them, with its credentials: the remote
	// gates below wait on them.
	linked, err := linkedClusters(ctx, cl, kf, tar.Spec.RemoteClusters, s.Now)
	if err != nil {
		p.Notes = append(p.Notes, fmt.Sprintf("%v: the linked clusters below are spec.remoteClusters' alone", err))
	}
	for _, lc := range linked {
		s.Remotes = append(s.Remotes, lc.Remote)
		if lc.Remote.Problem != "" {
			p.Notes = append(p.Notes, fmt.Sprintf("linked cluster %s (%s): this command cannot read its TrustAnchorRotation: %s; the remote gates count it as not converged (the operator reads it with the same credentials; status.remoteClusters in inspect shows what it last read)",
				lc.Target.Name, lc.Target.Source, lc.Remote.Problem))
		}
	}

	p.TrustAnchor = viewCert(s.Anchor)
	p.TrustAnchor.Synthetic = assumeRenewed
	s.Deadline = deadlineInputs(reading.Pods)
	p.NextRotation, p.now = steps.NextRotationDeadline(s, tar.Spec, tar.Status.History), s.Now
	p.PreviousAnchor = viewCert(s.Previous)
	p.IdentityIssuer = viewCert(s.Issuer)
	p.TrustBundle = bundleView{Ref: cfg.LinkerdNamespace + "/" + cfg.TrustRootsConfigMap, Found: s.Bundle.Found}
	if s.Bundle.Found {
		p.TrustBundle.SHA256 = steps.BundleHash(s.Bundle.Data)
		for _, c := range s.Bundle.Certs {
			p.TrustBundle.Anchors = append(p.TrustBundle.Anchors, steps.Fingerprint(c))
		}
	}

	notes, err := readAutomation(ctx, cl, cfg, tar, s, reading, cp.Token, at.Phase == string(v1alpha1.PhaseSynced) && !assumeRenewed)
	if err != nil {
		return nil, err
	}
	p.Notes = append(p.Notes, notes...)
	if assumeRenewed && opts.recover == nil {
		p.ManualActions = append(p.ManualActions, fmt.Sprintf("cmctl renew -n %s %s (assumed done)", cfg.CertManagerNamespace, cfg.AnchorSecret))
	}

	// The walk: each step observes the state the steps before it leave. The steps passed already
	// and the next one observe today's cluster; from the next one on, each step's act is recorded
	// and made in a simulated copy of the state (apply.Ahead), and its waits are assumed
	// satisfied, saying so, so the later steps show what they would really do then.
	newAhead := func() *apply.Ahead {
		ahead := apply.NewAhead(recorder, reading, results)
		if assumeRenewed {
			newIssuer := env.NewIssuer
			if newIssuer == nil {
				newIssuer = synthesiseIssuer
			}
			ahead.RenewIssuer = func(sim *steps.State) (*x509.Certificate, error) {
				if !s.Issuer.Usable() {
					return nil, errors.New(s.Issuer.Problem("identity-issuer Secret"))
				}
				return newIssuer(s.Issuer.Cert, sim.Anchor.Cert, anchorKey, sim.Now)
			}
		}
		return ahead
	}
	if s.Rotating() && s.RotationStart.IsZero() {
		// The rotation starts in this walk: the operator records its start before the first
		// act (steps.SavedCheckpoint), and the steps tell what started after it by it.
		s.RotationStart = s.Now
	}
	sim := &planSimulation{ahead: newAhead(), newAhead: newAhead, recorder: recorder, status: &tar.Status, s: s, reading: reading}
	rotation = newRotation(sim.ahead)
	sim.steps = steps.NewOrdered(rotation)
	walk, err := sim.steps.Workflow().Plan(ctx, cp, s, sim)
	if err != nil {
		return nil, err
	}
	first := slices.IndexFunc(rotation, func(st steps.Step) bool { return st.Name == at.Name })
	for i, st := range rotation[:first] {
		p.Steps = append(p.Steps, planStep{Index: i + 1, Name: st.Name, Phase: st.Phase, Doc: st.Doc, Status: stepDone})
	}
	// The steps up to a jump were observed on the state before the jump landed.
	manualOn := s
	if sim.before != nil {
		manualOn = sim.before
	}
	next := false
	for _, ps := range walk {
		st, _ := sim.steps.Named(ps.Name)
		v := planStep{Index: ps.Index + 1, Name: st.Name, Phase: st.Phase, Doc: st.Doc, Status: stepPending, Simulated: ps.Simulated}
		switch {
		case ps.Next:
			v.Status, next = stepNext, true
			p.Step, p.Phase = st.Name, st.Phase
		case !next:
			v.Status = stepDone
		}
		d := ps.Decision
		v.Outcome, v.Reason, v.Message = d.Outcome.String(), d.Reason, d.Message
		if ps.Next && d.Outcome == workflow.Jump {
			// The workflow stops at the jump, and starts again where it lands: the steps from
			// there are planned over the state the jump's saved checkpoint leaves.
			v.JumpTo = d.To
			p.Steps = append(p.Steps, v)
			manualOn = s
			continue
		}
		if v.Status != stepDone && d.Outcome == workflow.Act {
			v.Changes = ps.Changes
		}
		if st.Manual != nil {
			v.Manual = st.Manual(manualOn)
			if st.Automated != nil {
				v.Automated = st.Automated(manualOn)
			}
			if v.Automated != "" {
				v.Manual = ""
			}
			if v.Manual != "" && v.Status != stepDone {
				p.ManualActions = append(p.ManualActions, fmt.Sprintf("%s (step %d, %s)", v.Manual, v.Index, v.Name))
			}
		}
		if v.Status == stepNext && steps.Watching(st.Name) && d.Outcome == workflow.Wait {
			p.ManualActions = append(p.ManualActions, fmt.Sprintf("cmctl renew -n %s %s, when you want to rotate the trust anchor (starts a rotation)", cfg.CertManagerNamespace, cfg.AnchorSecret))
		}
		if v.Status == stepNext && st.WaitsOnTrustBundle && !s.TrustBundle.Done() {
			v.PodsToRestart = s.TrustBundle.Behind
			v.MoreWorkloadsToRestart = max(s.TrustBundle.BehindWorkloads-len(s.TrustBundle.Behind), 0)
		}
		for _, ps := range ps.Passes {
			switch rec := ps.Record.(type) {
			case []apply.Write:
				v.Writes = append(v.Writes, rec...)
			case string:
				v.Assumptions = append(v.Assumptions, rec)
			}
		}
		if ps.Stopped != "" && !st.Idle() {
			p.Notes = append(p.Notes, fmt.Sprintf("the steps after %s are observed on today's cluster, not simulated: %s", st.Name, ps.Stopped))
		}
		p.Steps = append(p.Steps, v)
	}
	if !next {
		p.Notes = append(p.Notes, "every step is done: the operator is idle until the trust anchor is renewed")
	}
	return p, nil
}

// readAutomation adds to the State what the automations of the TrustAnchorRotation's spec read,
// as the operator's automation does: the spec itself, the identity issuer's Certificate
// (spec.identityIssuerRenewal Automatic), and the workloads, their namespaces and
// PodDisruptionBudgets (spec.dataPlaneRestart.policy Automatic), so the plan shows the restarts
// the operator would make. What the user may not read is a note, not a failure: the steps then
// wait for it, as the operator waits for its caches.
func readAutomation(ctx context.Context, cl *Clients, cfg steps.Config, tar *v1alpha1.TrustAnchorRotation, s *steps.State, reading *observe.Reading, token string, idle bool) ([]string, error) {
	var notes []string
	observe.FromRotation(s, tar)
	if tar.Spec.IdentityIssuerRenewal == v1alpha1.Automatic {
		ns, name := cfg.LinkerdNamespace, cfg.IssuerCertificate
		crt, err := cl.CertManager.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			s.IssuerCertificate = observe.IssuerCertificateFrom(ns, name, crt)
		case apierrors.IsNotFound(err):
			s.IssuerCertificate = observe.IssuerCertificateFrom(ns, name, nil)
		case apierrors.IsForbidden(err):
			s.IssuerCertificate = observe.IssuerCertificateFrom(ns, name, nil)
			s.IssuerCertificate.Err = err.Error()
			notes = append(notes, fmt.Sprintf("cannot read Certificate %s/%s (%v): the automatic renewal of the identity issuer below waits for it", ns, name, err))
		default:
			return nil, fmt.Errorf("reading Certificate %s/%s: %w", ns, name, err)
		}
	}
	if tar.Spec.DataPlaneRestart.Policy != v1alpha1.Automatic {
		return notes, nil
	}
	list, err := observe.ListWorkloads(ctx, clientset.Kube(cl.Kube))
	switch {
	case apierrors.IsForbidden(err):
		s.WorkloadsProblem = fmt.Sprintf("this user cannot list them: %v", err)
		return append(notes, fmt.Sprintf("spec.dataPlaneRestart.policy is Automatic, but %v: the operator's restarts are not planned below (it lists Deployments, StatefulSets, DaemonSets, PodDisruptionBudgets and namespaces with its own RBAC)", err)), nil
	case err != nil:
		return nil, err
	}
	list.Fill(s, observe.IndexOf(reading.Pods), !idle, token)
	return notes, nil
}
