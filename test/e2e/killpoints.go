package e2e

import "github.com/linkerd/trust-rotation/steps"

// StepKillPoints are the points of the given steps, in their order, at which the fault suite
// (test/e2e/faults) and the killed takeover (TestTakeoverKilledAtEveryStep) have the operator
// die, each named as app.CrashEnv reads it:
//   - save:<step>  it SIGKILLs itself right after saving the checkpoint, before the act;
//   - write:<step> right after the act's first write, at the steps whose act makes more than one;
//   - acted:<step> right after the act returned, before the status is projected;
//
// at every step whose act runs in every rotation (neither idle, nor the user's part, nor acting
// only in some rotations: ActsOnlyWhen); then
// enter:<step> at every step that waits on the user: the test SIGKILLs the operator as soon as
// the status shows the checkpoint there.
func StepKillPoints(rotation []steps.Step) []string {
	var out, enter []string
	for _, st := range rotation {
		switch {
		case st.Idle(), st.ActsOnlyWhen != "":
		case st.Manual != nil:
			enter = append(enter, "enter:"+st.Name)
		case st.Act != nil:
			out = append(out, "save:"+st.Name)
			if st.WritesMany {
				out = append(out, "write:"+st.Name)
			}
			out = append(out, "acted:"+st.Name)
		}
	}
	return append(out, enter...)
}
