// Package workflow is a small engine that runs an ordered list of idempotent, resumable steps
// over a state: plain data read from the cluster at one moment, of any type S. It knows nothing
// of Linkerd: the steps package gives it the rotation and its state (steps.State), the operator
// gives it states and a place to keep its checkpoint, and the CLI runs the same steps in a dry
// run to print a plan.
//
// A step is a plain value (see Step): a stable kebab-case name, which is a public API — the
// checkpoint key in the TrustAnchorRotation status, the line in a plan, the label of an event —
// an Observe that decides from the state, without side effects, whether the step is done, must
// wait, or must act; and an idempotent Act. A decision the passing of time alone can change (a
// certificate expiring, a window opening) names that moment (Decision.RecheckAt), and Advance's
// Result the earliest of its observations: the caller observes again then, and otherwise only
// when the state changes.
//
// Advance walks the steps from the checkpoint. Done steps are passed; the first step that must
// wait stops the walk and says why; a step that must act first gets an idempotency token, which
// is saved in the checkpoint BEFORE the act runs, so that an operator killed in the middle of an
// act runs it again with the same token after a restart and changes nothing that had already
// happened. After an act the caller reads a fresh state and advances again: an act is never
// assumed to have worked until its effect is observed.
//
// A step may also decide that the workflow jumps: starts again at another step, when what the
// checkpoint was working towards changed under it. The engine saves the checkpoint at that step
// (the SaveFunc sees the jump, and may record more with it) before anything else runs, stops
// there as after an act, and reports the jump in the Result and in plans: only the engine moves
// the checkpoint.
//
// Plan walks the same steps without acting, for a dry run. Given a Simulation, it looks past
// the step where the workflow stops: the acts run in the simulation and the waits are assumed
// satisfied, so each later step is observed on the state the steps before it leave; a jump is
// landed where Advance would save it. It is Advance's walk: suspended up to the step where the
// workflow stops, then over the simulation's state, each observation a line of the plan;
// TestPlanAndOperatorWalkAlike holds a plan to the operator's loop of Advance.
package workflow
