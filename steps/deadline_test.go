package steps

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func TestNextRotationDeadline(t *testing.T) {
	notAfter := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
	anchorCert := &x509.Certificate{NotBefore: notAfter.AddDate(-1, 0, 0), NotAfter: notAfter}
	issuerFor := func(lifetime time.Duration) Source {
		nb := notAfter.AddDate(0, -1, 0)
		return Source{Found: true, Cert: &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(lifetime)}}
	}
	completed := func(d time.Duration) v1alpha1.RotationRecord {
		start := metav1.NewTime(notAfter.AddDate(-1, 0, 0))
		end := metav1.NewTime(start.Add(d))
		return v1alpha1.RotationRecord{Rotation: "aa", StartTime: start, FinishTime: &end, Outcome: v1alpha1.RotationCompleted}
	}
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	auto := v1alpha1.TrustAnchorRotationSpec{IdentityIssuerRenewal: v1alpha1.Automatic}

	for _, tc := range []struct {
		name      string
		state     func(*State)
		spec      v1alpha1.TrustAnchorRotationSpec
		history   []v1alpha1.RotationRecord
		want      time.Duration // notAfter - deadline
		wantBasis string
	}{{
		name: "no history: the spec's expected duration and margin, defaulted",
		spec: auto, want: DefaultRotationDeadlineMargin + DefaultExpectedRotationDuration,
		wantBasis: "spec.expectedRotationDuration 24h0m0s",
	}, {
		name: "the spec's expected duration and margin",
		spec: v1alpha1.TrustAnchorRotationSpec{IdentityIssuerRenewal: v1alpha1.Automatic, ExpectedRotationDuration: dur(72 * time.Hour), RotationDeadlineMargin: dur(168 * time.Hour)},
		want: 240 * time.Hour,
	}, {
		name:    "a completed rotation replaces the spec's estimate, the longest one counts",
		spec:    auto,
		history: []v1alpha1.RotationRecord{completed(30 * time.Hour), completed(50 * time.Hour), completed(40 * time.Hour)},
		want:    DefaultRotationDeadlineMargin + 50*time.Hour, wantBasis: "longest completed rotation 50h0m0s",
	}, {
		name: "superseded and unfinished rotations do not count",
		spec: auto,
		history: []v1alpha1.RotationRecord{
			{Rotation: "bb", StartTime: metav1.NewTime(notAfter.AddDate(-1, 0, 0)), Outcome: v1alpha1.RotationInProgress},
			func() v1alpha1.RotationRecord {
				r := completed(90 * time.Hour)
				r.Outcome = v1alpha1.RotationSuperseded
				return r
			}(),
		},
		want: DefaultRotationDeadlineMargin + DefaultExpectedRotationDuration,
	}, {
		name: "a short measured rotation is raised to the workload certificates' lifetime",
		spec: auto, history: []v1alpha1.RotationRecord{completed(time.Hour)},
		want: DefaultRotationDeadlineMargin + DefaultWorkloadCertificateLifetime, wantBasis: "less than the least a rotation takes",
	}, {
		name:  "an observed workload certificate lifetime replaces Linkerd's default",
		spec:  auto,
		state: func(s *State) { s.Deadline.WorkloadCertificateLifetime = 48 * time.Hour },
		want:  DefaultRotationDeadlineMargin + 48*time.Hour, wantBasis: "(observed)",
	}, {
		name:  "a manually renewed issuer adds its lifetime",
		state: func(s *State) { s.Issuer = issuerFor(96 * time.Hour) },
		want:  DefaultRotationDeadlineMargin + DefaultWorkloadCertificateLifetime + 96*time.Hour, wantBasis: "identity issuer lifetime 96h0m0s",
	}, {
		name:  "an automatically renewed issuer adds nothing",
		spec:  auto,
		state: func(s *State) { s.Issuer = issuerFor(96 * time.Hour) },
		want:  DefaultRotationDeadlineMargin + DefaultExpectedRotationDuration,
	}, {
		name:  "the oldest meshed pod is named under manual restarts, not added",
		spec:  auto,
		state: func(s *State) { s.Deadline.OldestMeshedPod = notAfter.AddDate(0, -7, 0) },
		want:  DefaultRotationDeadlineMargin + DefaultExpectedRotationDuration, wantBasis: "the oldest was created on 2026-11-01",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &State{Anchor: Source{Found: true, Cert: anchorCert}}
			if tc.state != nil {
				tc.state(s)
			}
			n := NextRotationDeadline(s, tc.spec, tc.history)
			if n == nil {
				t.Fatal("no deadline")
			}
			if got := notAfter.Sub(n.Deadline.Time); got != tc.want {
				t.Errorf("deadline %s before the anchor's expiry, want %s (basis: %s)", got, tc.want, n.Basis)
			}
			if n.AnchorNotAfter.Time != notAfter || n.Margin.Duration+n.RotationDuration.Duration != tc.want {
				t.Errorf("parts: %+v", n)
			}
			if !strings.Contains(n.Basis, tc.wantBasis) {
				t.Errorf("basis %q lacks %q", n.Basis, tc.wantBasis)
			}
		})
	}
}

func TestNextRotationDeadlineNeedsAnAnchor(t *testing.T) {
	if n := NextRotationDeadline(&State{Anchor: Source{Found: true, Err: errCrash}}, v1alpha1.TrustAnchorRotationSpec{}, nil); n != nil {
		t.Errorf("deadline from an unusable anchor: %+v", n)
	}
}

func TestDeadlineWithin(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	n := &v1alpha1.NextRotation{Deadline: metav1.NewTime(now.Add(36 * time.Hour)), AnchorNotAfter: metav1.NewTime(now.Add(72 * time.Hour))}
	if got := DeadlineWithin(n, now); got != "in 36h" {
		t.Errorf("ahead: %q", got)
	}
	if got := DeadlineWithin(n, now.Add(40*time.Hour)); !strings.HasPrefix(got, "passed 4h ago") {
		t.Errorf("passed: %q", got)
	}
}

// TestNextRotationDeadlineCountsFromTheFirstBridge: after cross-signed rotations the anchor's
// chain carries older bridges, and Linkerd identity caps every workload certificate at the
// earliest expiry of its issuer's chain. The deadline counts from the first bridge to expire
// when that comes before the anchor, says so, and asks for a Standard rotation; a bridge that
// outlives the anchor, or the anchor itself, changes nothing.
func TestNextRotationDeadlineCountsFromTheFirstBridge(t *testing.T) {
	now := time.Now()
	spec := v1alpha1.TrustAnchorRotationSpec{IdentityIssuerRenewal: v1alpha1.Automatic, Strategy: v1alpha1.StrategyCrossSigned}
	a := anchorCA(t, "anchor")
	b := newCert(t, "anchor", a, true, now.Add(10*time.Hour))
	c := newCert(t, "anchor", b, true, now.Add(48*time.Hour))
	issuerC := newCert(t, "issuer", c, true, now.Add(time.Hour))
	synced := func(opts ...stateOpt) *State {
		s := &State{Config: DefaultConfig(), Now: now}
		for _, o := range opts {
			o(s)
		}
		return s
	}
	margin, duration := DefaultRotationDeadlineMargin, DefaultExpectedRotationDuration

	for _, tc := range []struct {
		name  string
		state *State
	}{
		{"in the anchor's and the issuer's Secrets", synced(anchorWith(c, b), issuedWith(issuerC, c, b))},
		{"in the anchor's Secret alone, which hands it to the issuer's next renewal", synced(anchorWith(c, b), issuedWith(issuerC, c))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NextRotationDeadline(tc.state, spec, nil)
			if n == nil {
				t.Fatal("no deadline")
			}
			bridgeEnd := b.cert.NotAfter.Truncate(time.Second)
			if n.BridgeNotAfter == nil || !n.BridgeNotAfter.Time.Equal(bridgeEnd) {
				t.Errorf("bridgeNotAfter %v, want the older bridge's NotAfter %s", n.BridgeNotAfter, bridgeEnd)
			}
			if !n.AnchorNotAfter.Time.Equal(c.cert.NotAfter.Truncate(time.Second)) {
				t.Errorf("anchorNotAfter %s, want the anchor's %s", n.AnchorNotAfter, c.cert.NotAfter)
			}
			if want := b.cert.NotAfter.Add(-margin - duration).Truncate(time.Second); !n.Deadline.Time.Equal(want) {
				t.Errorf("deadline %s, want the bridge's NotAfter less margin and duration, %s", n.Deadline, want)
			}
			wantBasis := "the bridge certificate " + ShortFingerprint(Fingerprint(b.cert)) + " (certificate 2 of the trust anchor Secret cert-manager/linkerd-trust-anchor's tls.crt"
			if !strings.HasPrefix(n.Basis, wantBasis) || !strings.Contains(n.Basis, "strategy Standard") {
				t.Errorf("basis %q does not start with %q and ask for a Standard rotation", n.Basis, wantBasis)
			}
			if got := DeadlineWithin(n, b.cert.NotAfter); !strings.Contains(got, "a bridge certificate of the trust anchor's chain expires at") {
				t.Errorf("past the deadline: %q", got)
			}
		})
	}

	for _, tc := range []struct {
		name  string
		state *State
	}{
		{"the anchor signed by the previous one, its only bridge", synced(anchorWith(c), issuedWith(issuerC, c))},
		{"a self-signed anchor", synced(anchorWith(a), issuedWith(newCert(t, "issuer", a, true, now.Add(time.Hour)), a))},
		{"an older bridge that outlives the anchor", synced(anchorWith(newCert(t, "anchor", c, true, now.Add(5*time.Hour)), c), issuedWith(issuerC, c))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NextRotationDeadline(tc.state, spec, nil)
			if n == nil {
				t.Fatal("no deadline")
			}
			if n.BridgeNotAfter != nil || strings.Contains(n.Basis, "bridge") {
				t.Errorf("bridgeNotAfter %v, basis %q: no bridge expires before the anchor", n.BridgeNotAfter, n.Basis)
			}
			if want := tc.state.Anchor.Cert.NotAfter.Add(-margin - duration).Truncate(time.Second); !n.Deadline.Time.Equal(want) {
				t.Errorf("deadline %s, want the anchor's NotAfter less margin and duration, %s", n.Deadline, want)
			}
		})
	}
}
