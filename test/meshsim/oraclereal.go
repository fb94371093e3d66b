package meshsim

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// Disagreement is a verdict on which the oracle's model of rustls-webpki (webpki.go) and the real
// verifier parted: the chain (a pod's live chain, leaf first), the roots, the time, and both
// answers. Any is a defect of the model, and fails CheckNoViolationsSince.
type Disagreement struct {
	Time  time.Time
	Pod   PodRef // whose chain
	Roots []string
	Chain []string
	Usage string
	Real  Verdict
	Model string // "accepted" or the model's error
}

func (d Disagreement) String() string {
	real := d.Real.String()
	if d.Real.Error != "" {
		real += " (" + d.Real.Error + ")"
	}
	return fmt.Sprintf("at %s, %s's chain %s against roots %s (%s): the verifier %s, the model %s",
		d.Time.Format(time.RFC3339), d.Pod, shortFingerprints(d.Chain), shortFingerprints(d.Roots), d.Usage, real, d.Model)
}

// SetVerifier makes the real verifier give every chain verdict from now on, the model checked
// beside it (reallinkerd.EnvVerifier). The oracle's cache keeps one verdict per root class and
// chain class until a certificate involved crosses a validity boundary, so the verifier is asked
// about as often as classes change, not once per pod pair.
func (o *Oracle) SetVerifier(v *RealVerifier) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.real = v
	o.cache = map[string]pairResult{}
}

// Disagreements returns the verdicts on which the model and the real verifier parted.
func (o *Oracle) Disagreements() []Disagreement {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Disagreement(nil), o.disagreements...)
}

func describeDisagreements(ds []Disagreement) string {
	msg := fmt.Sprintf("the oracle's model of rustls-webpki and the real verifier disagreed %d time(s):", len(ds))
	for i, d := range ds {
		if i == 10 {
			return msg + fmt.Sprintf("\n  … and %d more", len(ds)-10)
		}
		msg += "\n  " + d.String()
	}
	return msg
}

// judge verifies a chain class against a root class: with the model alone, or, with a real
// verifier, by asking it about the live chain of one pod of the class whose leaf is valid now
// (the leaf's own validity the oracle follows per pod, checkLeaf) in both directions a proxy
// verifies, the model judging the same chain beside it. Called with o.mu held.
func (o *Oracle) judge(rc *rootClass, cc *chainClass, now time.Time) error {
	model := cc.verify(rc.rs, now)
	if o.real == nil {
		return model
	}
	var rep *member
	for _, m := range cc.members {
		if len(m.chain) > 0 && m.leafErr == "" && !now.Before(m.chain[0].NotBefore) && !now.After(m.chain[0].NotAfter) {
			rep = m
			break
		}
	}
	if rep == nil {
		return model // no leaf to present: every pod of the class is reported by checkLeaf
	}
	for _, usage := range []webpkiUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		verdict, err := o.real.Verify(NewVerifyRequest(rc.rs.certs, rep.chain, now, usage))
		if errors.Is(err, ErrVerifierClosed) {
			return model // the mesh has stopped
		}
		if err != nil {
			// A verifier that cannot answer is a failed test, not a verdict.
			o.disagree(rep, rc, now, usage, Verdict{Kind: "VerifierFailed", Error: err.Error()}, model)
			return model
		}
		full := webpkiVerify(webpkiLeaf{cert: rep.chain[0], issuer: rep.chain[0].RawIssuer}, rep.chain[1:], rc.rs.certs, now, usage)
		if (full == nil) != verdict.OK || modelKind(full) != normalKind(verdict.Kind) {
			o.disagree(rep, rc, now, usage, verdict, full)
		}
		if !verdict.OK {
			return fmt.Errorf("%s (rustls-webpki, %s): %s", verdict.Kind, usageName(usage), verdict.Error)
		}
	}
	return nil
}

func (o *Oracle) disagree(m *member, rc *rootClass, now time.Time, usage webpkiUsage, real Verdict, model error) {
	d := Disagreement{Time: now, Pod: m.pod, Roots: rc.rs.fingerprints, Chain: fingerprints(m.chain), Usage: usageName(usage), Real: real, Model: "accepted"}
	if model != nil {
		d.Model = model.Error()
	}
	o.disagreements = append(o.disagreements, d)
}

func usageName(u webpkiUsage) string {
	if u == x509.ExtKeyUsageClientAuth {
		return "client auth"
	}
	return "server auth"
}

// normalKind maps rustls-webpki's error variants to the names the model gives: its *Context
// variants carry details the model does not, and the model gives one name to both budgets.
func normalKind(kind string) string {
	kind = strings.TrimSuffix(kind, "Context")
	switch kind {
	case "MaximumSignatureChecksExceeded", "MaximumPathBuildCallsExceeded":
		return "MaximumSignatureChecksExceeded"
	}
	return kind
}

// EquipOracle gives an oracle the caller runs — one shared by linked clusters' meshes — the real
// verifier when bins names one, as a mesh does for the oracle it makes itself; stop closes it,
// once the oracle has stopped. Without a verifier it does nothing.
func EquipOracle(o *Oracle, bins reallinkerd.Binaries) (stop func(), err error) {
	if bins.Verifier == "" {
		return func() {}, nil
	}
	v, err := StartVerifier(bins.Verifier)
	if err != nil {
		return nil, err
	}
	o.SetVerifier(v)
	return func() { _ = v.Close() }, nil
}

// VerifierReport says, when the oracle asks a real verifier, which one, how many verdicts it
// gave and on how many the model disagreed, e.g. "rustls-webpki 0.103.13: 212 verdicts, 0
// disagreements with the model"; "" without one.
func (o *Oracle) VerifierReport() string {
	o.mu.Lock()
	v, ds := o.real, len(o.disagreements)
	o.mu.Unlock()
	if v == nil {
		return ""
	}
	return fmt.Sprintf("%s: %d verdicts, %d disagreements with the model", v.Version(), v.Calls(), ds)
}
