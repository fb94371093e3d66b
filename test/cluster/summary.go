package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
)

// A failing test of these packages prints its messages first and then, at cleanup, the logs of
// the operators and components it ran: hundreds of lines. Whoever reads only the end of the
// output (a CI page shows its tail) sees logs and not why the test failed. failureSummary tees
// the test binary's standard output, keeps the file:line messages of each test, and prints
// those of the failed tests once more at the very end.

// Limits of the summary: messages per failed test, and characters per message.
const (
	summaryMessages = 6
	summaryWidth    = 400
)

var (
	// header is a line of the testing package that says which test the following lines belong
	// to: === RUN / NAME / CONT in -v mode, --- FAIL / PASS / SKIP (followed by the test's
	// buffered output) in both.
	header = regexp.MustCompile(`^\s*(?:=== (?:RUN|NAME|CONT|PAUSE)|--- (FAIL|PASS|SKIP)):?\s+(\S+)`)
	// message is a line a test logged: its file and line, then the text.
	message = regexp.MustCompile(`^\s+([\w./-]+_test\.go:\d+: .*)`)
)

type failureSummary struct {
	orig   *os.File
	w      *os.File
	done   chan struct{}
	mu     sync.Mutex
	msgs   map[string][]string // test -> its messages, in order
	failed []string
}

// teeStdout replaces os.Stdout with a pipe whose every line still reaches the original standard
// output at once. It returns nil (and changes nothing) if the pipe cannot be made.
func teeStdout() *failureSummary {
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	s := &failureSummary{orig: os.Stdout, w: w, done: make(chan struct{}), msgs: map[string][]string{}}
	os.Stdout = w
	go s.copy(r)
	return s
}

func (s *failureSummary) copy(r io.Reader) {
	defer close(s.done)
	br := bufio.NewReader(r)
	test := ""
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			_, _ = s.orig.WriteString(line)
			test = s.note(test, strings.TrimRight(line, "\n"))
		}
		if err != nil {
			return
		}
	}
}

// note records line under test, and returns the test the next line belongs to.
func (s *failureSummary) note(test, line string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := header.FindStringSubmatch(line); m != nil {
		if m[1] == "FAIL" {
			s.failed = append(s.failed, m[2])
		}
		return m[2]
	}
	if m := message.FindStringSubmatch(line); m != nil && test != "" {
		msg := m[1]
		if len(msg) > summaryWidth {
			msg = msg[:summaryWidth] + "…"
		}
		s.msgs[test] = append(s.msgs[test], msg)
	}
	return test
}

// finish restores os.Stdout, waits until every line was copied, and prints the messages of the
// failed tests (the last ones of each, which say how it ended).
func (s *failureSummary) finish() {
	if s == nil {
		return
	}
	os.Stdout = s.orig
	_ = s.w.Close()
	<-s.done
	s.render(s.orig)
}

// render writes the summary of the failed tests to w; nothing when none failed. The tests come
// in the reverse of the order they failed in, so that the first failure, whose consequences the
// later ones on the shared cluster often are, ends the output, where a CI page shows it.
func (s *failureSummary) render(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) == 0 {
		return
	}
	fmt.Fprintln(w, "--- summary of the failed tests (their last messages; the full output is above), the first to fail last ---")
	seen := map[string]bool{}
	var order []string
	for _, test := range s.failed {
		if !seen[test] {
			seen[test] = true
			order = append(order, test)
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		test := order[i]
		msgs := s.msgs[test]
		if len(msgs) > summaryMessages {
			msgs = msgs[len(msgs)-summaryMessages:]
		}
		fmt.Fprintf(w, "FAIL %s\n", test)
		for _, m := range msgs {
			fmt.Fprintf(w, "    %s\n", m)
		}
	}
	tops := map[string]bool{}
	for _, test := range order {
		tops[strings.SplitN(test, "/", 2)[0]] = true
	}
	if len(tops) > 1 {
		fmt.Fprintf(w, "--- %d tests failed; the first was %s ---\n", len(tops), order[0])
	}
}
