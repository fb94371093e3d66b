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
