package steps

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The proxy environment of automatic data-plane restarts: while pods move onto the new issuer,
// restarted workloads get an accelerated certificate refresh interval, removed at the end.
const (
	// AdditionalEnvAnnotation is Linkerd's pod-template annotation: a JSON list of EnvVar added
	// to the proxy at injection.
	AdditionalEnvAnnotation = "config.linkerd.io/proxy-additional-env"
	// MaxRefreshEnv bounds the proxy's certificate refresh interval.
	MaxRefreshEnv = "LINKERD2_PROXY_IDENTITY_MAX_REFRESH"
	// MinRefreshEnv is the shortest refresh interval.
	MinRefreshEnv = "LINKERD2_PROXY_IDENTITY_MIN_REFRESH"
	// RefreshOverrideAnnotation marks a pod template whose proxy-additional-env the operator
	// changed, with what it set and what was there before, so that the final restart removes
	// exactly what it added.
	RefreshOverrideAnnotation = "trust.linkerd.io/refresh-override"
)

// refreshOverride is the value of the refresh-override annotation.
type refreshOverride struct {
	// Value is the MAX_REFRESH value the operator set.
	Value string `json:"value"`
	// Previous is the variable's value before, when it had one.
	Previous *string `json:"previous,omitempty"`
	// Created is true when the operator created the proxy-additional-env annotation.
	Created bool `json:"created,omitempty"`
}

// ProxyDuration renders a duration as linkerd2-proxy parses its env: an integer and a unit.
func ProxyDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// The proxy's refresh bounds when its env does not set them (linkerd2-proxy app/src/env.rs,
// DEFAULT_IDENTITY_MIN_REFRESH and DEFAULT_IDENTITY_MAX_REFRESH).
const (
	DefaultMinRefresh = 10 * time.Second
	DefaultMaxRefresh = 24 * time.Hour
)

// ParseProxyDuration parses a duration the way linkerd2-proxy parses its env (app/src/env.rs
// parse_duration): an integer and a unit among ms, s, m, h and d, or a bare 0.
func ParseProxyDuration(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, false
	}
	unit, ok := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[s[i:]]
	switch {
	case s[i:] == "" && n == 0:
		return 0, true
	case !ok || n > int64(1<<62)/int64(unit):
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// ProxyRefreshBounds returns the refresh interval bounds a proxy container runs with, from its
// env (LINKERD2_PROXY_IDENTITY_MIN_REFRESH, LINKERD2_PROXY_IDENTITY_MAX_REFRESH, as injected
// from proxy-additional-env or Helm's proxy.additionalEnv), else the proxy's defaults. ok is
// false when a bound is set in a way the pod spec does not show (valueFrom) or cannot be parsed.
func ProxyRefreshBounds(c *corev1.Container) (minRefresh, maxRefresh time.Duration, ok bool) {
	minRefresh, maxRefresh = DefaultMinRefresh, DefaultMaxRefresh
	for _, v := range c.Env {
		var into *time.Duration
		switch v.Name {
		case MinRefreshEnv:
			into = &minRefresh
		case MaxRefreshEnv:
			into = &maxRefresh
		default:
			continue
		}
		d, parsed := ParseProxyDuration(v.Value)
		if v.ValueFrom != nil || !parsed {
			return 0, 0, false
		}
		*into = d
	}
	return minRefresh, maxRefresh, true
}

// NextRefresh is when a proxy that received a certificate valid from notBefore to notAfter
// refreshes it: at 70 % of the remaining lifetime, clamped to [minRefresh, maxRefresh]
// (linkerd2-proxy identity-client certify.rs refresh_in). Linkerd's identity service backdates
// NotBefore by its clock-skew allowance (identity.issuer.clockSkewAllowance, 20s by default),
// so the proxy received the certificate that much after notBefore; with a smaller allowance it
// refreshes up to the difference earlier than this, with a larger one later.
func NextRefresh(notBefore, notAfter time.Time, minRefresh, maxRefresh time.Duration) time.Time {
	received := notBefore.Add(DefaultClockSkew)
	d := notAfter.Sub(received) * 7 / 10
	return received.Add(min(max(d, minRefresh), maxRefresh))
}

// DefaultClockSkew is Linkerd's identity.issuer.clockSkewAllowance default.
const DefaultClockSkew = 20 * time.Second

// AddRefreshOverride merges LINKERD2_PROXY_IDENTITY_MAX_REFRESH=interval into a
// proxy-additional-env value and returns the new value with the marker that records what
// changed. ok is false when the current value does not parse.
func AddRefreshOverride(current string, interval time.Duration) (env, marker string, ok bool) {
	vars, ok := parseEnv(current)
	if !ok {
		return "", "", false
	}
	o := refreshOverride{Value: ProxyDuration(interval), Created: strings.TrimSpace(current) == ""}
	replaced := false
	for i := range vars {
		if vars[i].Name == MaxRefreshEnv {
			prev := vars[i].Value
			o.Previous, vars[i].Value, replaced = &prev, o.Value, true
		}
	}
	if !replaced {
		vars = append(vars, corev1.EnvVar{Name: MaxRefreshEnv, Value: o.Value})
	}
	e, _ := json.Marshal(vars)
	m, _ := json.Marshal(o)
	return string(e), string(m), true
}

// RemoveRefreshOverride undoes AddRefreshOverride on the current proxy-additional-env value: it
// restores (or removes) the variable when it still holds the operator's value, and keeps every
// other change made since. nil means remove the annotation.
func RemoveRefreshOverride(current, marker string) *string {
	var o refreshOverride
	vars, ok := parseEnv(current)
	if json.Unmarshal([]byte(marker), &o) != nil || !ok {
		return &current
	}
	out := vars[:0]
	for _, v := range vars {
		if v.Name == MaxRefreshEnv && v.Value == o.Value && v.ValueFrom == nil {
			if o.Previous == nil {
				continue
			}
			v.Value = *o.Previous
		}
		out = append(out, v)
	}
	if len(out) == 0 && o.Created {
		return nil
	}
	e, _ := json.Marshal(out)
	s := string(e)
	return &s
}

func parseEnv(s string) ([]corev1.EnvVar, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, true
	}
	var vars []corev1.EnvVar
	if err := json.Unmarshal([]byte(s), &vars); err != nil {
		return nil, false
	}
	return vars, true
}
