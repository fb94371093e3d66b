package cli

import (
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// anchorCertificate is the fixture's trust-anchor Certificate.
func anchorCertificate(f *fixture) *cmapi.Certificate {
	for _, o := range f.cm {
		if c, ok := o.(*cmapi.Certificate); ok && c.Name == "linkerd-trust-anchor" {
			return c
		}
	}
	f.t.Fatal("the fixture has no trust-anchor Certificate")
	return nil
}

// TestCheckCrossSignedPrerequisites: under spec.strategy CrossSigned, check fails while the
// anchor's Certificate is self-signed or keeps its key, naming the Certificate and its issuer,
// and passes once it is issued by the CA issuer over its own Secret.
func TestCheckCrossSignedPrerequisites(t *testing.T) {
	const line = "the trust anchor is issued as spec.strategy needs"
	cases := map[string]struct {
		setup    func(*fixture)
		wantCode int
		want     string
	}{
		"standard needs nothing more": {setup: func(*fixture) {}, want: "√ " + line},
		"a self-signed anchor": {setup: crossSigned, wantCode: 1,
			want: "Certificate cert-manager/linkerd-trust-anchor is issued by Issuer linkerd-trust-root-issuer, which is not a CA issuer, not with the anchor's own Secret linkerd-trust-anchor"},
		"an anchor that keeps its key": {setup: func(f *fixture) {
			crossSigned(f)
			anchorCertificate(f).Spec.PrivateKey.RotationPolicy = cmapi.RotationPolicyNever
		}, wantCode: 1, want: "Certificate cert-manager/linkerd-trust-anchor has spec.privateKey.rotationPolicy: Never"},
		"an anchor issued by the CA over its own Secret": {setup: func(f *fixture) {
			crossSigned(f)
			anchorCertificate(f).Spec.IssuerRef.Name, anchorCertificate(f).Spec.IssuerRef.Kind = "linkerd-identity-issuer", cmapi.ClusterIssuerKind
		}, want: "√ " + line},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			out, errOut, code := f.run("check")
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Errorf("exit code %d (want %d), output lacks %q:\n%s%s", code, tc.wantCode, tc.want, out, errOut)
			}
			if f.rotations["cluster"].Spec.Strategy == v1alpha1.StrategyCrossSigned && tc.wantCode == 0 && strings.Contains(out, "× "+line) {
				t.Errorf("the strategy check failed:\n%s", out)
			}
		})
	}
}
