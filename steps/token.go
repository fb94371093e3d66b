package steps

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// --- act tokens ---------------------------------------------------------------------------------
//
// A step's act runs under an idempotency token that the checkpoint saves before the act
// (status.checkpoint.token): a fresh stamp at the step's first act, which the step's Token may
// extend with what its later acts must remember. Checkpoints saved by every earlier operator
// must still parse, so the grammar only grows, and a token that parses encodes back to the very
// same string:
//
//	<stamp>               any step
//	<stamp> revision N    wait-for-identity-issuer: the issuer Certificate's revision when the
//	                      operator first triggered its renewal
//	<stamp> scale N       restart-identity: identity is scaled to 0, and back to N replicas after
//	<stamp> scale N up    restart-identity: no identity pod was left; identity is scaled back to N
//	<stamp> replace a,b   restart-identity, as earlier operators wrote it: the identity pods to
//	                      delete (the list may be empty)
//	<stamp> stale-issuer F  detect-anchor-rotation: identity restarted because it signed with
//	                      the stale issuer of short fingerprint F (spec.staleIssuerRestart)
//
// The operator's stamps are times (NewActStamp); a plan's is a placeholder, which may hold a
// space but never a verb between spaces. An act that restarts a workload marks it with its
// token (kubectl.kubernetes.io/restartedAt, trust.linkerd.io/evicted-for), so a mark is a token
// too, unless someone else wrote it: kubectl writes an RFC 3339 time.

// TokenVerb names what an act token remembers besides its stamp.
type TokenVerb string

const (
	// TokenRevision: the issuer Certificate's revision (one argument).
	TokenRevision TokenVerb = "revision"
	// TokenScale: identity's replicas to scale back to, then "up" once it is scaled back.
	TokenScale TokenVerb = "scale"
	// TokenReplace: the identity pods to delete, separated by commas.
	TokenReplace TokenVerb = "replace"
	// TokenStaleIssuer: the short fingerprint of the stale issuer identity was restarted off.
	TokenStaleIssuer TokenVerb = "stale-issuer"
)

// tokenVerbs are the verbs a token may hold, each between spaces.
var tokenVerbs = []TokenVerb{TokenRevision, TokenScale, TokenReplace, TokenStaleIssuer}

// scaledUp is the second argument of a scale token written once identity is scaled back up.
const scaledUp = "up"

// ActToken is a step's act token, parsed.
type ActToken struct {
	// Stamp is the stamp the step's first act was given: a string, not a time, for a plan's
	// placeholder is none (stampTime reads the operator's).
	Stamp string
	// Verb is what the token remembers besides the stamp: "" for a bare stamp.
	Verb TokenVerb
	// Args are the verb's arguments as written, so that the token encodes back byte for byte.
	Args []string
}

// NewActStamp is the stamp of a step's first act at now: RFC 3339 with nanoseconds, in UTC, so
// that it is unique and stampTime reads it back.
func NewActStamp(now time.Time) string { return now.UTC().Format(time.RFC3339Nano) }

// ParseActToken parses a token the checkpoint saved. Text with no verb between spaces is a bare
// stamp, whatever it holds. The error names what is wrong; the ActToken returned with it is the
// zero one, which records no verb: a step that only looks for its verb may ignore the error,
// and reads a malformed token as one that records nothing.
func ParseActToken(token string) (ActToken, error) {
	if token == "" {
		return ActToken{}, errors.New("empty act token")
	}
	at, verb := -1, TokenVerb("")
	for _, v := range tokenVerbs {
		if i := strings.Index(token, " "+string(v)+" "); i >= 0 && (at < 0 || i < at) {
			at, verb = i, v
		}
	}
	if at < 0 {
		return ActToken{Stamp: token}, nil
	}
	t := ActToken{Stamp: token[:at], Verb: verb}
	switch rest := token[at+len(verb)+2:]; {
	case verb != TokenReplace:
		t.Args = strings.Split(rest, " ")
	case rest != "":
		t.Args = strings.Split(rest, ",")
	}
	if err := t.check(); err != nil {
		return ActToken{}, fmt.Errorf("act token %q: %w", token, err)
	}
	return t, nil
}

// String encodes the token as the checkpoint saves it.
func (t ActToken) String() string {
	switch t.Verb {
	case "":
		return t.Stamp
	case TokenReplace:
		return t.Stamp + " " + string(t.Verb) + " " + strings.Join(t.Args, ",")
	}
	return t.Stamp + " " + string(t.Verb) + " " + strings.Join(t.Args, " ")
}

// check reports what is wrong with the verb's arguments: a replace token's are any pod names.
func (t ActToken) check() error {
	var err error
	switch t.Verb {
	case TokenRevision:
		_, err = t.revision()
	case TokenScale:
		_, _, err = t.scale()
	case TokenStaleIssuer:
		if len(t.Args) != 1 || t.Args[0] == "" {
			err = fmt.Errorf("%s takes one argument, the stale issuer's short fingerprint; got %q", t.Verb, t.Args)
		}
	}
	return err
}

func (t ActToken) revision() (int, error) {
	if len(t.Args) != 1 {
		return 0, fmt.Errorf("%s takes one argument, the Certificate's revision; got %q", t.Verb, t.Args)
	}
	n, err := strconv.Atoi(t.Args[0])
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a number", t.Verb, t.Args[0])
	}
	return n, nil
}

func (t ActToken) scale() (replicas int32, up bool, err error) {
	if len(t.Args) != 1 && len(t.Args) != 2 {
		return 0, false, fmt.Errorf("%s takes the replicas, then optionally %q; got %q", t.Verb, scaledUp, t.Args)
	}
	n, err := strconv.ParseInt(t.Args[0], 10, 32)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s %q is not a replica count", t.Verb, t.Args[0])
	}
	if len(t.Args) == 2 && t.Args[1] != scaledUp {
		return 0, false, fmt.Errorf("%s %s is followed by %q, not %q", t.Verb, t.Args[0], t.Args[1], scaledUp)
	}
	return int32(n), len(t.Args) == 2, nil
}

// Revision is the issuer Certificate's revision a revision token records.
func (t ActToken) Revision() (int, bool) {
	if t.Verb != TokenRevision {
		return 0, false
	}
	n, err := t.revision()
	return n, err == nil
}

// Scale is what a scale token records: the replicas to scale identity back to, and whether it is
// scaled back already.
func (t ActToken) Scale() (replicas int32, up, ok bool) {
	if t.Verb != TokenScale {
		return 0, false, false
	}
	replicas, up, err := t.scale()
	return replicas, up, err == nil
}

// PodsToReplace are the identity pods a replace token names.
func (t ActToken) PodsToReplace() ([]string, bool) {
	if t.Verb != TokenReplace {
		return nil, false
	}
	return t.Args, true
}

// revisionToken extends a stamp with the issuer Certificate's revision.
func revisionToken(stamp string, revision int) ActToken {
	return ActToken{Stamp: stamp, Verb: TokenRevision, Args: []string{strconv.Itoa(revision)}}
}

// scaleToken extends a stamp with identity's replicas to scale back to, and whether it is scaled
// back already.
func scaleToken(stamp string, replicas int32, up bool) ActToken {
	t := ActToken{Stamp: stamp, Verb: TokenScale, Args: []string{strconv.Itoa(int(replicas))}}
	if up {
		t.Args = append(t.Args, scaledUp)
	}
	return t
}

// stampTime is when a token or a restart mark was made: its leading RFC 3339 time, up to the
// first space. Only the stamp is read, so a mark kubectl wrote has its time too.
func stampTime(mark string) (time.Time, error) {
	stamp, _, _ := strings.Cut(mark, " ")
	return time.Parse(time.RFC3339Nano, stamp)
}
