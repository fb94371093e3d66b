package steps

import (
	"strings"
	"testing"
	"time"
)

func TestRefreshOverrideRoundTrip(t *testing.T) {
	cases := map[string]struct{ before, during, after string }{
		"no annotation": {"", `[{"name":"LINKERD2_PROXY_IDENTITY_MAX_REFRESH","value":"300s"}]`, "<removed>"},
		"other variables are kept": {`[{"name":"A","value":"1"}]`,
			`[{"name":"A","value":"1"},{"name":"LINKERD2_PROXY_IDENTITY_MAX_REFRESH","value":"300s"}]`, `[{"name":"A","value":"1"}]`},
		"a user's own interval is restored": {`[{"name":"LINKERD2_PROXY_IDENTITY_MAX_REFRESH","value":"1h"}]`,
			`[{"name":"LINKERD2_PROXY_IDENTITY_MAX_REFRESH","value":"300s"}]`, `[{"name":"LINKERD2_PROXY_IDENTITY_MAX_REFRESH","value":"1h"}]`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env, marker, ok := AddRefreshOverride(tc.before, 5*time.Minute)
			if !ok || env != tc.during {
				t.Fatalf("added: %s, want %s", env, tc.during)
			}
			got := "<removed>"
			if v := RemoveRefreshOverride(env, marker); v != nil {
				got = *v
			}
			if got != tc.after {
				t.Fatalf("removed: %s, want %s", got, tc.after)
			}
		})
	}
	// A variable the user added meanwhile stays.
	env, marker, _ := AddRefreshOverride("", time.Minute)
	env = strings.TrimSuffix(env, "]") + `,{"name":"B","value":"2"}]`
	if v := RemoveRefreshOverride(env, marker); v == nil || *v != `[{"name":"B","value":"2"}]` {
		t.Fatalf("removed too much: %v", v)
	}
	if _, _, ok := AddRefreshOverride("not json", time.Minute); ok {
		t.Fatal("an unparsable annotation must be left alone")
	}
}
