package steps

import (
	"sync"

	"github.com/linkerd/trust-rotation/workflow"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Step is one step of the rotation: the engine's step (its name, phase, Doc, Observe, Act,
// Describe and Token) with what the operator, the CLI and the tests need to know of it besides.
// Each step's file declares all of it but its Position, which the stages it is in hold, and
// Rotation lists the steps in order, in their stages: nothing else keeps a list of steps by name,
// so a new step is an entry in a stage and a file of its own.
type Step struct {
	workflow.Step[*State]
	// Position is what holds at the step because of where it sits in the order: its stages say
	// it (stage.go), the step never does.
	Position

	// Manual says what the user must do for the step to pass, for plans: set on the steps that
	// wait on the user (restarts, the issuer renewal) unless the spec automates their part; nil
	// on the others.
	Manual func(*State) string
	// Automated says what the operator does instead of the user when the spec automates the
	// user's part (spec.dataPlaneRestart, spec.identityIssuerRenewal) and the state lets it;
	// "" when the user does it.
	// Optional, with Manual.
	Automated func(*State) string
	// Assumes is what a plan that looks ahead takes to have happened when the step waits, to
	// show the steps after it (see Assumption).
	Assumes Assumption
	// WaitsOnTrustBundle: the step waits for meshed pods to be injected with the trust bundle, so
	// a plan names the workloads whose pods are behind.
	WaitsOnTrustBundle bool

	// ReliesOnBundle: the step comes after the trust bundle is written and relies on the
	// ConfigMap holding it: the step checks it first, and waits while the operator rewrites a
	// drifted one (see CheckBundle).
	ReliesOnBundle bool
	// ReloadsBundle: the step's act restarts pods that load the trust bundle when they start, so
	// the step starts over once a drifted bundle is rewritten (BundleDrift.StartOver).
	ReloadsBundle bool
	// Gate is the remote gate the step is, 0 when it is none.
	Gate RemoteGate
	// WritesMany: the step's act makes more than one write, so an operator may stop between them
	// (the fault suite kills it there too).
	WritesMany bool

	// ActsOnlyWhen says when the step has anything to do, for a step that passes at once in most
	// rotations (the recovery's steps: "the previous trust anchor has expired"); "" for the steps
	// every rotation runs. The fault suite kills the operator only at steps that always act.
	ActsOnlyWhen string

	// CrossSignedSkips says why a cross-signed rotation (spec.strategy CrossSigned) has nothing
	// to do at the step, which is then done at once; "" for the steps both strategies run.
	CrossSignedSkips string
	// RunsInBridgedRecovery: a step the cross-signed strategy passes over runs all the same in a
	// cross-signed rotation away from an expired anchor (State.BridgedRecovery): the expansion
	// of the bundle, which linkerd-identity must read before it can sign again.
	RunsInBridgedRecovery bool

	// ahead is the step's Observe without the trust-bundle check (see ObserveAhead).
	ahead func(*State, string) workflow.Decision
}

// Idle reports whether no rotation is under way at the step: its phase is Synced.
func (st Step) Idle() bool { return st.Phase == string(v1alpha1.PhaseSynced) }

// ObserveAhead is the step's observation for a plan's view of the steps after the next one: the
// rotation reaches them only once the steps before are done, and the trust-bundle check then
// applies to the bundle those leave (expand-trust-bundle writes it), not to the bundle of
// today's state, so it is left out; so is the jump of a superseded rotation, which only the
// checkpoint's step takes.
func (st Step) ObserveAhead(s *State) workflow.Decision {
	if st.ahead != nil {
		return st.ahead(s, "")
	}
	return st.Observe(s, "")
}

// guarded returns the steps with the guards in their Observe: the trust-bundle check in each
// step that relies on the bundle (see guardBundle), then, before anything else, the jump of a
// rotation superseded by a newer anchor in each step of a rotation (see guardSupersede). The
// step's own Observe stays for ObserveAhead.
func guarded(list []Step) []Step {
	out := append([]Step(nil), list...)
	for i, st := range out {
		if st.ahead != nil {
			continue // guarded already
		}
		observe := st.Observe
		if st.CrossSignedSkips != "" {
			observe = skipCrossSigned(st, observe)
			st.Observe = observe
		}
		if st.ReliesOnBundle {
			observe = guardBundle(st, observe)
		}
		if !st.Idle() {
			observe = guardSupersede(st, observe)
		}
		out[i].ahead, out[i].Observe = st.Observe, observe
	}
	return out
}

// NewWorkflow returns the engine that runs the steps in order.
func NewWorkflow(list []Step) (*workflow.Workflow[*State], error) {
	engine := make([]workflow.Step[*State], len(list))
	for i, st := range list {
		engine[i] = st.Step
	}
	return workflow.New(engine...)
}

// Ordered is a rotation's steps in order, with the engine that runs them, whose index gives
// their positions by name: what the status projection, the saved checkpoints, the operator and
// the CLI look a checkpoint's step up in. Whoever runs a list of steps passes it: the operator
// and the CLI the list they advance or plan, a test that runs another list that one.
type Ordered struct {
	list []Step
	wf   *workflow.Workflow[*State]
}

// NewOrdered builds the engine that runs the steps in the order given (Workflow). It panics on a
// list the engine refuses (a name not kebab-case or listed twice, a step without Observe): the
// lists are written in code, and the package's tests build the rotation's (rotationSteps).
func NewOrdered(list []Step) *Ordered {
	wf, err := NewWorkflow(list)
	if err != nil {
		panic("steps: " + err.Error())
	}
	return &Ordered{list: list, wf: wf}
}

// Workflow is the engine that runs the steps.
func (o *Ordered) Workflow() *workflow.Workflow[*State] { return o.wf }

// Steps returns the steps in order.
func (o *Ordered) Steps() []Step { return o.list }

// Named returns the step of that name; ok is false, and the Step zero (none of its facts
// holds), for a name the list does not have.
func (o *Ordered) Named(name string) (st Step, ok bool) {
	i, ok := o.wf.Position(name)
	if !ok {
		return Step{}, false
	}
	return o.list[i], true
}

// named is Named without ok.
func (o *Ordered) named(name string) Step {
	st, _ := o.Named(name)
	return st
}

// position is the step's position in the list, 0 for a name it does not have.
func (o *Ordered) position(name string) int {
	i, _ := o.wf.Position(name)
	return i
}

// Facts is the single-cluster rotation's steps with no Writer, built once: for looking up what a
// step is (its phase, its place in the order, its facts) where nothing runs, as the CLI and the
// readers of a status do. Their acts must not run.
var Facts = sync.OnceValue(func() *Ordered { return NewOrdered(Rotation(nil)) })
