package steps

import (
	"bytes"
	"crypto/x509"
	"fmt"

	"github.com/linkerd/trust-rotation/workflow"
)

// A trust bundle the rotation writes is rendered from the current anchor, the in-flight anchors
// and linkerd-previous-anchor. When that Secret no longer holds the anchor the rotation moves
// from — a script that copies the trust-anchor Secret into it, as the blog's CronJob does at
// the end of its own rotation, run in the middle of this one — the rendered bundle lacks the
// anchor the identity issuer and the live certificates still chain to: identity, restarted onto
// it, would not load its issuer, and a pod injected with it would reject every certificate of
// the mesh. So before writing a bundle (the expansion, the reduction, a rewrite of a drifted
// bundle) the steps check that it keeps every anchor of the current bundle that the issuer or a
// probed live certificate chains to, and wait instead, naming the anchor and what holds on to it.

// ReasonWouldDropAnchor is the waiting reason of a bundle write refused by KeptAnchorProblem.
const ReasonWouldDropAnchor = "TrustBundleWouldDropAnchor"

// AnchorDrop is an anchor of the current trust bundle that a bundle about to be written lacks,
// although the identity issuer or live certificates chain to it and to nothing that bundle holds.
type AnchorDrop struct {
	Anchor *x509.Certificate
	// Issuer is true when the identity issuer chains to it.
	Issuer bool
	// Pods is how many probed pods present a chain that verifies to it, Example one of them.
	Pods    int
	Example string
}

// droppedAnchor returns the anchor that writing next would drop, or nil.
func droppedAnchor(s *State, next []*x509.Certificate) *AnchorDrop {
	// lost returns the anchor of the current bundle chain verifies to, when next has none.
	lost := func(chain []*x509.Certificate) *x509.Certificate {
		for _, a := range next {
			if ChainsTo(chain, a) {
				return nil
			}
		}
		for _, a := range s.Bundle.Certs {
			if ChainsTo(chain, a) {
				return a
			}
		}
		return nil
	}
	var d *AnchorDrop
	if s.Issuer.Usable() {
		if a := lost([]*x509.Certificate{s.Issuer.Cert}); a != nil {
			d = &AnchorDrop{Anchor: a, Issuer: true}
		}
	}
	for _, lc := range s.liveChains() {
		a := lost(lc.Certs)
		if a == nil {
			continue
		}
		if d == nil {
			d = &AnchorDrop{Anchor: a}
		}
		if bytes.Equal(a.Raw, d.Anchor.Raw) {
			d.Pods += lc.Pods
			if d.Example == "" || lc.Example < d.Example {
				d.Example = lc.Example
			}
		}
	}
	return d
}

// KeptAnchorProblem is a Wait decision when writing bundle to the trust-roots ConfigMap would
// drop an anchor the identity issuer or a probed live certificate chains to (AnchorDrop), or
// nil. The message names the anchor, what chains to it, and, when linkerd-previous-anchor was
// overwritten, that Secret and what to put back in it.
func KeptAnchorProblem(s *State, bundle string) *workflow.Decision {
	next, err := ParseCertificates([]byte(bundle))
	if err != nil || !s.Bundle.Found {
		return nil
	}
	d := droppedAnchor(s, next)
	if d == nil {
		return nil
	}
	fp := ShortFingerprint(Fingerprint(d.Anchor))
	cm := fmt.Sprintf("ConfigMap %s/%s", s.Config.LinkerdNamespace, s.Config.TrustRootsConfigMap)
	var holders string
	if d.Issuer {
		holders = fmt.Sprintf("the identity issuer in Secret %s chains to", s.Issuer.Ref())
	}
	if d.Pods > 0 {
		if holders != "" {
			holders += " and "
		}
		holders += fmt.Sprintf("%d meshed %s present live certificates chaining to (%s among them)", d.Pods, Plural(d.Pods, "pod", "pods"), d.Example)
	}
	msg := fmt.Sprintf("refusing to write %s to %s: it would drop anchor %s, which %s", fingerprints(next), cm, fp, holders)
	switch {
	case previousOverwritten(s) && s.Previous.Fingerprint() == s.Anchor.Fingerprint():
		msg += fmt.Sprintf("; Secret %s holds %s, the current trust anchor, instead of the anchor the rotation moves from: it was overwritten (a script that copies Secret %s into it does that); put anchor %s's certificate, which %s holds, back into its %s and the rotation goes on",
			s.Previous.Ref(), ShortFingerprint(s.Previous.Fingerprint()), s.Anchor.Ref(), fp, cm, CertificateKey)
	case previousOverwritten(s):
		msg += fmt.Sprintf("; Secret %s holds %s, an anchor %s does not hold, instead of the anchor the rotation moves from: it was overwritten; put anchor %s's certificate back into its %s and the rotation goes on",
			s.Previous.Ref(), ShortFingerprint(s.Previous.Fingerprint()), cm, fp, CertificateKey)
	case d.Pods > 0:
		msg += "; restart those pods (or let their proxies refresh their certificates) so that they present certificates from the identity issuer in Secret " + s.Issuer.Ref()
	default:
		msg += fmt.Sprintf("; renew the identity issuer from Secret %s", s.Anchor.Ref())
	}
	w := workflow.Waiting(ReasonWouldDropAnchor, msg)
	return &w
}

// previousOverwritten reports whether linkerd-previous-anchor no longer holds an anchor the
// rotation moves from, before that anchor is retired: it holds the current anchor while the
// trust bundle holds others, or an anchor the trust bundle does not hold.
func previousOverwritten(s *State) bool {
	if s.Retiring != "" || !s.Previous.Usable() || !s.Anchor.Usable() || !s.Bundle.Found {
		return false
	}
	if s.Previous.Fingerprint() == s.Anchor.Fingerprint() {
		// A copy of the current anchor, while the bundle trusts another anchor.
		for _, c := range s.Bundle.Certs {
			if !bytes.Equal(c.Raw, s.Anchor.Cert.Raw) {
				return true
			}
		}
		return false
	}
	for _, c := range s.Bundle.Certs {
		if bytes.Equal(c.Raw, s.Previous.Cert.Raw) {
			return false
		}
	}
	return true
}
