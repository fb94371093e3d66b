package cluster

import (
	"strings"
	"testing"
)

// TestFailureSummary feeds the summary the output of a failed run, verbose and not, and checks
// that it repeats each failed test's messages (the file:line lines of _test.go files, not the
// log dumps after them), the first to fail last, and nothing of the tests that passed.
func TestFailureSummary(t *testing.T) {
	verbose := `=== RUN   TestGood
    good_test.go:10: fine
--- PASS: TestGood (0.01s)
=== RUN   TestLeader
    leader_test.go:98: seed 7
    leader_test.go:150: after the failover the checkpoint went back from a to b
    harness.go:107: operator log (/tmp/x/operator.log), last 80 lines:
        I1122 19:34:09.455229 main.go:135] "Starting trust-rotation-operator"
--- FAIL: TestLeader (14.20s)
=== RUN   TestKill
=== RUN   TestKill/save:a
    kill_test.go:93: the operator was never killed at save:a
    --- FAIL: TestKill/save:a (3.00s)
--- FAIL: TestKill (3.00s)
FAIL
`
	quiet := `--- FAIL: TestLeader (14.20s)
    leader_test.go:150: after the failover the checkpoint went back from a to b
    harness.go:107: operator log (/tmp/x/operator.log), last 80 lines:
        I1122 19:34:09.455229 main.go:135] "Starting trust-rotation-operator"
FAIL
`
	for name, tc := range map[string]struct{ out, want string }{
		"verbose": {verbose, `FAIL TestKill
FAIL TestKill/save:a
    kill_test.go:93: the operator was never killed at save:a
FAIL TestLeader
    leader_test.go:98: seed 7
    leader_test.go:150: after the failover the checkpoint went back from a to b
--- 2 tests failed; the first was TestLeader ---
`},
		"quiet": {quiet, `FAIL TestLeader
    leader_test.go:150: after the failover the checkpoint went back from a to b
`},
		"passed": {"=== RUN   TestGood\n    good_test.go:10: fine\n--- PASS: TestGood (0.01s)\nok\n", ""},
	} {
		s := &failureSummary{msgs: map[string][]string{}}
		test := ""
		for _, line := range strings.Split(strings.TrimSuffix(tc.out, "\n"), "\n") {
			test = s.note(test, line)
		}
		var got strings.Builder
		s.render(&got)
		want := tc.want
		if want != "" {
			want = "--- summary of the failed tests (their last messages; the full output is above), the first to fail last ---\n" + want
		}
		if got.String() != want {
			t.Errorf("%s: summary\n%s\nwant\n%s", name, got.String(), want)
		}
	}
}
