package steps

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestChainsTo(t *testing.T) {
	p := newPKI(t)
	hour := time.Now().Add(time.Hour)
	renewed := newCert(t, "new-issuer-renewed", p.newAnchor, true, hour)
	intermediate := newCert(t, "intermediate", p.newAnchor, true, hour)
	underIntermediate := newCert(t, "issuer-under-intermediate", intermediate, true, hour)
	leafNew := newCert(t, "leaf", p.newIssuer, false, hour)
	leafOld := newCert(t, "leaf", p.oldIssuer, false, hour)
	chain := func(cs ...*testCA) []*x509.Certificate {
		var out []*x509.Certificate
		for _, c := range cs {
			out = append(out, c.cert)
		}
		return out
	}
	for name, tc := range map[string]struct {
		chain []*x509.Certificate
		root  *testCA
		want  bool
	}{
		"the new issuer":                           {chain(p.newIssuer), p.newAnchor, true},
		"a renewal of the new issuer":              {chain(renewed), p.newAnchor, true},
		"the old issuer, to the new anchor":        {chain(p.oldIssuer), p.newAnchor, false},
		"the old issuer, to the old anchor":        {chain(p.oldIssuer), p.oldAnchor, true},
		"a full chain, leaf first":                 {chain(leafNew, p.newIssuer), p.newAnchor, true},
		"a full chain on the old anchor":           {chain(leafOld, p.oldIssuer), p.newAnchor, false},
		"through an intermediate":                  {chain(underIntermediate, intermediate), p.newAnchor, true},
		"an intermediate missing":                  {chain(underIntermediate), p.newAnchor, false},
		"the anchor itself signs":                  {chain(p.newAnchor), p.newAnchor, true},
		"the new anchor presented but not linked":  {chain(p.oldIssuer, p.newAnchor), p.newAnchor, false},
		"the old anchor presented besides the new": {chain(p.newIssuer, p.oldAnchor), p.newAnchor, true},
		"an unrelated anchor":                      {chain(p.newIssuer), p.stranger, false},
		"no chain":                                 {nil, p.newAnchor, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := ChainsTo(tc.chain, tc.root.cert); got != tc.want {
				t.Errorf("ChainsTo = %v, want %v", got, tc.want)
			}
		})
	}
	if ChainsTo(chain(p.newIssuer), nil) {
		t.Error("a chain verifies to no root")
	}
}

func TestCertificateRootIsTheActiveIssuersAnchor(t *testing.T) {
	p := newPKI(t)
	hour := time.Now().Add(time.Hour)
	renewed := newCert(t, "new-issuer-renewed", p.newAnchor, true, hour)
	inFlight := anchorCA(t, "in-flight")
	onInFlight := newCert(t, "in-flight-issuer", inFlight, true, hour)
	withInFlight := func(s *State) { s.InFlight = []*x509.Certificate{inFlight.cert} }
	for name, tc := range map[string]struct {
		state *State
		want  *testCA
	}{
		"the issuer still on the old anchor":          {rotatingState(p), p.oldAnchor},
		"the issuer renewed onto the new anchor":      {rotatingState(p, issuer(p.newIssuer)), p.newAnchor},
		"the issuer renewed again on the new one":     {rotatingState(p, issuer(renewed)), p.newAnchor},
		"the issuer on an in-flight anchor":           {rotatingState(p, issuer(onInFlight), withInFlight), inFlight},
		"synced after the rotation":                   {rotatingState(p, previous(p.newAnchor), issuer(renewed), bundleOf(p.newAnchor)), p.newAnchor},
		"an issuer from an unrelated CA: itself":      {rotatingState(p, issuer(p.stranger)), p.stranger},
		"an issuer signed by an anchor of the bundle": {rotatingState(p, anchor(p.stranger), previous(p.stranger)), p.oldAnchor},
	} {
		t.Run(name, func(t *testing.T) {
			got := tc.state.CertificateRoot()
			if got == nil || Fingerprint(got) != Fingerprint(tc.want.cert) {
				t.Errorf("CertificateRoot = %v, want %s", got, tc.want.cert.Subject.CommonName)
			}
		})
	}
	if got := rotatingState(p, issuer(nil)).CertificateRoot(); got != nil {
		t.Errorf("with no issuer Secret: CertificateRoot = %s, want nil", got.Subject.CommonName)
	}
}
