package meshsim

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Defaults of linkerd2-proxy's identity client (LINKERD2_PROXY_IDENTITY_MIN_REFRESH / MAX_REFRESH).
const (
	DefaultMinRefresh = 10 * time.Second
	DefaultMaxRefresh = 24 * time.Hour
)

// RefreshIn is when a proxy asks identity for a new certificate, given the expiry of its CURRENT
// certificate: 70 % of the remaining lifetime, never below minRefresh nor above maxRefresh
// (linkerd2-proxy identity-client certify.rs refresh_in). A zero expiry (no certificate yet) or
// one in the past gives minRefresh.
//
// Note that after a failed certification the proxy calls this again with the expiry of the
// certificate it still holds, so the retry comes at 70 % of what is left of the OLD certificate
// (clamped), which equals minRefresh only when there is no certificate or little life left.
func RefreshIn(now, expiry time.Time, minRefresh, maxRefresh time.Duration) time.Duration {
	if expiry.IsZero() || !expiry.After(now) {
		return minRefresh
	}
	d := expiry.Sub(now) * 7 / 10
	switch {
	case d < minRefresh:
		return minRefresh
	case d > maxRefresh:
		return maxRefresh
	default:
		return d
	}
}

var proxyDuration = regexp.MustCompile(`^\s*(\d+)(ms|s|m|h|d)\s*$`)

// ParseProxyDuration parses a duration the way linkerd2-proxy parses its env (an integer and a
// unit among ms, s, m, h, d). Go duration syntax ("1m30s") is accepted as well for convenience.
func ParseProxyDuration(s string) (time.Duration, error) {
	if m := proxyDuration.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: %w", s, err)
		}
		unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[m[2]]
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", s, err)
	}
	return d, nil
}

// FormatProxyDuration renders a duration in the proxy's env syntax (milliseconds when needed).
func FormatProxyDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
