package steps

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestActTokenRoundTrip: every token grammar, written as checkpoints in clusters hold it today,
// parses to what it records and encodes back to the very same string.
func TestActTokenRoundTrip(t *testing.T) {
	const stamp = "2026-05-14T09:31:07.123456789Z"
	for _, tc := range []struct {
		token string
		want  ActToken
		// stamped: the stamp is the operator's time.
		stamped bool
	}{
		{"2026-05-14T09:31:07.123456789Z", ActToken{Stamp: stamp}, true},
		{"2026-05-14T09:31:07Z", ActToken{Stamp: "2026-05-14T09:31:07Z"}, true}, // RFC3339Nano drops a zero fraction
		{"2026-05-14T09:31:07.123456789Z revision 3", ActToken{Stamp: stamp, Verb: TokenRevision, Args: []string{"3"}}, true},
		{"2026-05-14T09:31:07.123456789Z scale 3", ActToken{Stamp: stamp, Verb: TokenScale, Args: []string{"3"}}, true},
		{"2026-05-14T09:31:07.123456789Z scale 3 up", ActToken{Stamp: stamp, Verb: TokenScale, Args: []string{"3", "up"}}, true},
		{"2026-05-14T09:31:07.123456789Z scale 0", ActToken{Stamp: stamp, Verb: TokenScale, Args: []string{"0"}}, true},
		{"2026-05-14T09:31:07.123456789Z replace linkerd-identity-5d8f9c7b6-aaaaa,linkerd-identity-5d8f9c7b6-bbbbb",
			ActToken{Stamp: stamp, Verb: TokenReplace, Args: []string{"linkerd-identity-5d8f9c7b6-aaaaa", "linkerd-identity-5d8f9c7b6-bbbbb"}}, true},
		// An operator that found no identity pod to replace wrote an empty list.
		{"2026-05-14T09:31:07.123456789Z replace ", ActToken{Stamp: stamp, Verb: TokenReplace}, true},
		// linkerd trust plan's placeholder stamp, bare and extended.
		{"<new token>", ActToken{Stamp: "<new token>"}, false},
		{"<new token> scale 1", ActToken{Stamp: "<new token>", Verb: TokenScale, Args: []string{"1"}}, false},
		{"<new token> revision 7", ActToken{Stamp: "<new token>", Verb: TokenRevision, Args: []string{"7"}}, false},
	} {
		t.Run(tc.token, func(t *testing.T) {
			got, err := ParseActToken(tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("parsed %#v, want %#v", got, tc.want)
			}
			if s := got.String(); s != tc.token {
				t.Fatalf("encoded back as %q", s)
			}
			if _, err := stampTime(tc.token); (err == nil) != tc.stamped {
				t.Fatalf("stamp time: %v, want a time %v", err, tc.stamped)
			}
		})
	}
}

// TestActTokenVerbs: each verb's reader reads its own tokens only, and the tokens the steps
// build are those operators saved.
func TestActTokenVerbs(t *testing.T) {
	parse := func(s string) ActToken {
		t.Helper()
		tok, err := ParseActToken(s)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if n, ok := parse("T revision 3").Revision(); !ok || n != 3 {
		t.Errorf("revision: %d %v", n, ok)
	}
	if n, up, ok := parse("T scale 3").Scale(); !ok || n != 3 || up {
		t.Errorf("scale: %d %v %v", n, up, ok)
	}
	if n, up, ok := parse("T scale 3 up").Scale(); !ok || n != 3 || !up {
		t.Errorf("scale up: %d %v %v", n, up, ok)
	}
	if pods, ok := parse("T replace a,b").PodsToReplace(); !ok || strings.Join(pods, " ") != "a b" {
		t.Errorf("replace: %q %v", pods, ok)
	}
	if pods, ok := parse("T replace ").PodsToReplace(); !ok || pods != nil {
		t.Errorf("replace, empty list: %q %v", pods, ok)
	}
	for _, s := range []string{"T", "T scale 3", "T replace a"} {
		if _, ok := parse(s).Revision(); ok {
			t.Errorf("%q read as a revision token", s)
		}
	}
	for _, s := range []string{"T", "T revision 3", "T replace a"} {
		if _, _, ok := parse(s).Scale(); ok {
			t.Errorf("%q read as a scale token", s)
		}
	}
	for _, s := range []string{"T", "T revision 3", "T scale 3"} {
		if _, ok := parse(s).PodsToReplace(); ok {
			t.Errorf("%q read as a replace token", s)
		}
	}
	// Text that is no verb between spaces belongs to the stamp.
	if tok := parse("T scale"); tok.Stamp != "T scale" || tok.Verb != "" {
		t.Errorf("a verb at the end read as one: %#v", tok)
	}
	for got, want := range map[string]string{
		revisionToken("T", 3).String():               "T revision 3",
		scaleToken("T", 3, false).String():           "T scale 3",
		scaleToken("T", 3, true).String():            "T scale 3 up",
		scaleToken("<new token>", 0, false).String(): "<new token> scale 0",
	} {
		if got != want {
			t.Errorf("built %q, want %q", got, want)
		}
	}
	at := time.Date(2026, 5, 14, 11, 31, 7, 120000000, time.FixedZone("CEST", 2*3600))
	if s := NewActStamp(at); s != "2026-05-14T09:31:07.12Z" {
		t.Errorf("stamp %q", s)
	}
	if got, err := stampTime(NewActStamp(at) + " scale 3"); err != nil || !got.Equal(at) {
		t.Errorf("stamp time %v %v, want %v", got, err, at)
	}
	// kubectl rollout restart's mark: RFC 3339 in local time.
	if got, err := stampTime("2026-05-14T11:31:07+02:00"); err != nil || !got.Equal(at.Truncate(time.Second)) {
		t.Errorf("kubectl's mark: %v %v", got, err)
	}
}

// TestActTokenMalformed: a token that does not parse says what is wrong with it, and remembers
// nothing.
func TestActTokenMalformed(t *testing.T) {
	for token, want := range map[string]string{
		"":                   "empty act token",
		"T revision x":       `act token "T revision x": revision "x" is not a number`,
		"T revision ":        `act token "T revision ": revision "" is not a number`,
		"T revision 3 4":     `act token "T revision 3 4": revision takes one argument, the Certificate's revision; got ["3" "4"]`,
		"T scale -1":         `act token "T scale -1": scale "-1" is not a replica count`,
		"T scale 4294967296": `act token "T scale 4294967296": scale "4294967296" is not a replica count`,
		"T scale up":         `act token "T scale up": scale "up" is not a replica count`,
		"T scale 3 down":     `act token "T scale 3 down": scale 3 is followed by "down", not "up"`,
		"T scale 3 up up":    `act token "T scale 3 up up": scale takes the replicas, then optionally "up"; got ["3" "up" "up"]`,
	} {
		t.Run(token, func(t *testing.T) {
			tok, err := ParseActToken(token)
			if err == nil || err.Error() != want {
				t.Fatalf("error %v, want %s", err, want)
			}
			if !reflect.DeepEqual(tok, ActToken{}) {
				t.Fatalf("a malformed token parsed as %#v", tok)
			}
			if _, _, ok := tok.Scale(); ok {
				t.Fatal("a malformed token read as a scale token")
			}
		})
	}
}
