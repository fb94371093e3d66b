package steps

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// FuzzParseActToken holds the token grammar to what token.go promises: a token that parses
// encodes back to the very same string, and its readers never panic on what parsed.
func FuzzParseActToken(f *testing.F) {
	for _, s := range []string{"2026-06-01T12:00:00.123456789Z", "2026-06-01T12:00:00Z revision 3", "2026-06-01T12:00:00Z scale 2",
		"2026-06-01T12:00:00Z scale 2 up", "2026-06-01T12:00:00Z replace a,b", "2026-06-01T12:00:00Z replace ", "plan stamp",
		"x revision y", "x scale 1 2 3", " scale  up", "x replace a revision 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseActToken(s)
		if err != nil {
			return
		}
		if got := tok.String(); got != s {
			t.Fatalf("ParseActToken(%q).String() = %q", s, got)
		}
		tok.Revision()
		tok.Scale()
		tok.PodsToReplace()
		_, _ = stampTime(tok.Stamp)
	})
}

// FuzzParseCertificates holds the PEM reader of the Secrets, the bundle and the in-flight
// anchors to encoding/pem and crypto/x509: it returns exactly the CERTIFICATE blocks pem.Decode
// finds, each as x509.ParseCertificate parses it, or an error when one does not parse or there
// is none; and what it returns encodes back (EncodePEM) to what parses the same.
func FuzzParseCertificates(f *testing.F) {
	p := newPKI(f)
	f.Add(EncodePEM(p.oldAnchor.cert))
	f.Add(EncodePEM(p.newIssuer.cert, p.newAnchor.cert))
	f.Add([]byte(RenderBundle(p.oldAnchor.cert, p.newAnchor.cert)))
	f.Add(append(EncodePEM(p.oldAnchor.cert), []byte("-----BEGIN EC PRIVATE KEY-----\nMAA=\n-----END EC PRIVATE KEY-----\n")...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("not pem"))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := ParseCertificates(data)
		var want [][]byte
		parseErr := false
		for rest := data; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			if _, perr := x509.ParseCertificate(block.Bytes); perr != nil {
				parseErr = true
				break
			}
			want = append(want, block.Bytes)
		}
		switch {
		case parseErr || len(want) == 0:
			if err == nil {
				t.Fatalf("no error, want one (a block that does not parse: %t, certificates: %d)", parseErr, len(want))
			}
			return
		case err != nil:
			t.Fatalf("error %v, want the %d certificates encoding/pem finds", err, len(want))
		}
		got := make([][]byte, len(certs))
		for i, c := range certs {
			got[i] = c.Raw
		}
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("certificates differ from encoding/pem's blocks")
		}
		again, err := ParseCertificates(EncodePEM(certs...))
		if err != nil || len(again) != len(certs) {
			t.Fatalf("EncodePEM of what parsed does not parse back: %v", err)
		}
	})
}

// FuzzCheckpointFromStatus reads a status as the apiserver may hold it (JSON) into the State
// and the workflow's checkpoint, as every reconcile does first: no panic, and the checkpoint
// the workflow is given is the one stored.
func FuzzCheckpointFromStatus(f *testing.F) {
	p := newPKI(f)
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, st := range []v1alpha1.TrustAnchorRotationStatus{
		{},
		{Checkpoint: &v1alpha1.Checkpoint{Step: StepDetectAnchorRotation}},
		{Phase: v1alpha1.PhasePropagatingTrustRoots, InFlightAnchors: []string{string(EncodePEM(p.oldAnchor.cert))},
			Checkpoint: &v1alpha1.Checkpoint{Step: StepPropagateTrustRoots, Token: "2026-06-01T12:00:00Z", Acts: 2, Rotation: Fingerprint(p.newAnchor.cert)}},
		{Checkpoint: &v1alpha1.Checkpoint{Step: StepRestartIdentity, Token: "2026-06-01T12:00:00Z scale 2 up", Strategy: v1alpha1.StrategyCrossSigned}},
		{Checkpoint: &v1alpha1.Checkpoint{Step: "no-such-step", Acts: -1}, InFlightAnchors: []string{"garbage"}},
	} {
		if st.Checkpoint != nil && st.Checkpoint.Step == StepPropagateTrustRoots {
			st.Checkpoint.StartTime = nil
		}
		data, err := json.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var st v1alpha1.TrustAnchorRotationStatus
		if json.Unmarshal(data, &st) != nil {
			return
		}
		cp := WorkflowCheckpoint(st.Checkpoint)
		if c := st.Checkpoint; c != nil && (cp.Step != c.Step || cp.Token != c.Token || cp.Acts != c.Acts) {
			t.Fatalf("workflow checkpoint %+v from %+v", cp, c)
		}
		s := &State{Now: start}
		if err := s.FromStatus(rotationSteps, &st); err != nil {
			return
		}
		if c := st.Checkpoint; c != nil && (s.Rotation != c.Rotation || s.Strategy != c.Strategy) {
			t.Fatalf("state's rotation %q %q from %+v", s.Rotation, s.Strategy, c)
		}
		_, _ = ParseActToken(cp.Token)
	})
}

// FuzzMaintenanceWindow holds the window parser to ValidateSpec and to itself: a window
// ValidateSpec accepts never fails to evaluate; a closed window names a next opening after now,
// at which it is open.
func FuzzMaintenanceWindow(f *testing.F) {
	f.Add("22:00", "02:00", "Europe/Paris", "Sat,Sun", int64(1780000000))
	f.Add("01:00", "01:00", "", "", int64(0))
	f.Add("23:59", "00:00", "America/St_Johns", "Mon", int64(1775000000))
	f.Add("02:30", "03:30", "America/New_York", "Sun", int64(1772953200)) // a DST change
	f.Add("25:00", "1:00", "Mars/Olympus", "Funday", int64(-1))
	f.Fuzz(func(t *testing.T, start, end, zone, days string, unix int64) {
		if unix < -1<<40 || unix > 1<<40 {
			return
		}
		mw := v1alpha1.MaintenanceWindow{Start: start, End: end, TimeZone: zone}
		for _, d := range bytes.Split([]byte(days), []byte(",")) {
			if len(d) > 0 {
				mw.Days = append(mw.Days, v1alpha1.Weekday(d))
			}
		}
		now := time.Unix(unix, 0).UTC()
		open, next, err := windowOpen(mw, now)
		valid := len(validateWindow(mw, nil)) == 0
		switch {
		case valid && err != nil:
			t.Fatalf("ValidateSpec accepts %+v, windowOpen fails: %v", mw, err)
		case !valid && err == nil:
			t.Fatalf("ValidateSpec refuses %+v, windowOpen evaluates it", mw)
		case err != nil || open:
			return
		case next.IsZero() && len(mw.Days) > 0:
			return
		case !next.After(now):
			t.Fatalf("%+v closed at %s, next opening %s is not after it", mw, now, next)
		}
		if again, _, _ := windowOpen(mw, next); !again {
			t.Fatalf("%+v: closed at %s, the opening it named", mw, next)
		}
	})
}

// FuzzParseProxyDuration holds the reader of the proxy's refresh env to its writer: a duration
// that parses renders (ProxyDuration) to text that parses to the same duration, and what
// ProxyDuration writes always parses.
func FuzzParseProxyDuration(f *testing.F) {
	for _, s := range []string{"5m", "10s", "0", "1d", "250ms", " 24h ", "9223372036854775807ms", "1.5h", "-1s", "0s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseProxyDuration(s)
		if !ok {
			return
		}
		if d < 0 {
			t.Fatalf("ParseProxyDuration(%q) = %s, a negative duration", s, d)
		}
		again, ok := ParseProxyDuration(ProxyDuration(d))
		if !ok || again != d {
			t.Fatalf("ParseProxyDuration(%q) = %s, rendered %q, read back %s %t", s, d, ProxyDuration(d), again, ok)
		}
	})
}
