package steps

import "fmt"

// Position is what holds at a step because of where it sits in the rotation's order. A step does
// not declare it: the stages it is in do (Stage.Holds), as kubeadm's phases pass what they set up
// to the phases nested in them, so a step added to a stage holds what its neighbours hold.
type Position struct {
	// BeforeIssuerSwitch: identity has not yet been restarted onto the expanded bundle, so an
	// identity issuer already signed by the new anchor is ahead of the trust bundle (condition
	// OutOfOrderIssuerRotation).
	BeforeIssuerSwitch bool
	// IdentityMustWait: the bundle is expanding and the data plane has not converged on it, so
	// identity must not restart onto the expanded roots; an identity pod restarted meanwhile by
	// someone else is reported (IdentityRestartedEarly).
	IdentityMustWait bool
	// NeedsExpandedPods: every meshed pod must still run with the expanded bundle (identity is
	// restarted onto it, then the issuer switches, until the previous anchor is retired). Pods
	// injected with a drifted bundle count as behind again.
	NeedsExpandedPods bool
	// UrgentProbes: pods must move onto the new issuer, so the live certificates of those that
	// have not are probed often (UrgentCertificates).
	UrgentProbes bool
	// Retiring: the rotation's anchor is in linkerd-previous-anchor (RetiringTo).
	Retiring bool
}

// with is p with what q holds besides.
func (p Position) with(q Position) Position {
	return Position{
		BeforeIssuerSwitch: p.BeforeIssuerSwitch || q.BeforeIssuerSwitch,
		IdentityMustWait:   p.IdentityMustWait || q.IdentityMustWait,
		NeedsExpandedPods:  p.NeedsExpandedPods || q.NeedsExpandedPods,
		UrgentProbes:       p.UrgentProbes || q.UrgentProbes,
		Retiring:           p.Retiring || q.Retiring,
	}
}

// A Stage is a run of consecutive steps, or of nested stages, over which the same things hold.
// The rotation is a tree of them (rotationStages); its steps are the tree's leaves in order
// (Stage.Steps).
type Stage struct {
	// Name says what the stage does, for the reader of the tree: stages are not shown to users
	// and not saved, so it may change.
	Name string
	// Holds is what holds at every step of the stage, nested stages' included.
	Holds Position
	// Parts are the stage's steps and nested stages, in order: each a Step, a Stage or a
	// recovery move (outOfOrder).
	Parts []part
}

// A part of a stage: a step, a stage or a recovery move.
type part interface {
	// leaves appends the part's steps to list, each holding what its stages hold (held).
	leaves(list []Step, held Position) []Step
}

func (st Step) leaves(list []Step, held Position) []Step {
	if st.Position != (Position{}) {
		// Rotation is written in code: a step that says where it sits would disagree with its
		// stage the day it moves.
		panic(fmt.Sprintf("steps: step %s declares its Position; its stages hold it", st.Name))
	}
	st.Position = held
	return append(list, st)
}

func (sg Stage) leaves(list []Step, held Position) []Step {
	held = held.with(sg.Holds)
	for _, p := range sg.Parts {
		list = p.leaves(list, held)
	}
	return list
}

// Steps is the stage's steps in order, each holding what its stages hold.
func (sg Stage) Steps() []Step { return sg.leaves(nil, Position{}) }

// outOfOrder is a recovery move (recovery.go): a step that acts only in a rotation away from an
// expired anchor, where it breaks on purpose what its stage holds (the issuer is renewed before
// the bundle expands, identity restarts before the data plane converges). It stands in its
// place in the order and holds nothing.
type outOfOrder struct{ Step }

func (m outOfOrder) leaves(list []Step, _ Position) []Step { return m.Step.leaves(list, Position{}) }
