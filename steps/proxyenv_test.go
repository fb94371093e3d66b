package steps

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

func TestParseProxyDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, " 5m ": 5 * time.Minute, "250ms": 250 * time.Millisecond,
		"24h": 24 * time.Hour, "2d": 48 * time.Hour, "0": 0} {
		if got, ok := ParseProxyDuration(in); !ok || got != want {
			t.Errorf("ParseProxyDuration(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "5", "1m30s", "-5s", "5 s", "s", "99999999999999999999h", "9999999999999d"} {
		if got, ok := ParseProxyDuration(in); ok {
			t.Errorf("ParseProxyDuration(%q) = %v, want not a duration", in, got)
		}
	}
}

func TestProxyRefreshBounds(t *testing.T) {
	c := &corev1.Container{}
	if lo, hi, ok := ProxyRefreshBounds(c); !ok || lo != DefaultMinRefresh || hi != DefaultMaxRefresh {
		t.Errorf("no env: %v, %v, %v; want the proxy's defaults", lo, hi, ok)
	}
	c.Env = []corev1.EnvVar{{Name: "OTHER", Value: "x"}, {Name: MaxRefreshEnv, Value: "5m"}, {Name: MinRefreshEnv, Value: "1s"}}
	if lo, hi, ok := ProxyRefreshBounds(c); !ok || lo != time.Second || hi != 5*time.Minute {
		t.Errorf("env 1s..5m: %v, %v, %v", lo, hi, ok)
	}
	c.Env[1] = corev1.EnvVar{Name: MaxRefreshEnv, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k"}}}
	if _, _, ok := ProxyRefreshBounds(c); ok {
		t.Error("MAX_REFRESH from a ConfigMap: known, want unknown")
	}
	c.Env[1] = corev1.EnvVar{Name: MaxRefreshEnv, Value: "soon"}
	if _, _, ok := ProxyRefreshBounds(c); ok {
		t.Error("MAX_REFRESH=soon: known, want unknown")
	}
}

// TestNextRefresh follows the proxy's rule from the moment it received the certificate, its
// NotBefore plus the identity service's clock-skew allowance.
func TestNextRefresh(t *testing.T) {
	issued := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	notBefore, notAfter := issued.Add(-DefaultClockSkew), issued.Add(24*time.Hour+DefaultClockSkew)
	for _, c := range []struct {
		name     string
		min, max time.Duration
		want     time.Time
	}{
		{"defaults: 70 % of the lifetime", DefaultMinRefresh, DefaultMaxRefresh, issued.Add((24*time.Hour + DefaultClockSkew) * 7 / 10)},
		{"an accelerated MAX_REFRESH", DefaultMinRefresh, 5 * time.Minute, issued.Add(5 * time.Minute)},
		{"a MIN_REFRESH above 70 %", 30 * time.Hour, 40 * time.Hour, issued.Add(30 * time.Hour)},
	} {
		if got := NextRefresh(notBefore, notAfter, c.min, c.max); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
