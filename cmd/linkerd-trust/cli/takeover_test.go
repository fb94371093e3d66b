package cli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// handMade makes the fixture a mesh installed as Linkerd's documentation installs it, moved onto
// cert-manager's anchor-new: the ConfigMap rendered by Helm from the hand-made anchor-old, the
// issuer Secret holding the chart's issuer-old in crt.pem beside cert-manager's issuer-new,
// identity run on the chart's scheme, and no previous anchor recorded.
func (f *fixture) handMade() {
	f.remove(&corev1.Secret{}, "linkerd", "linkerd-previous-anchor")
	f.replace(secret("cert-manager", "linkerd-trust-anchor", certPEM(f.t, "anchor-new")))
	f.issue("cert-manager", "linkerd-trust-anchor", certPEM(f.t, "anchor-new"))
	issuer := secret("linkerd", "linkerd-identity-issuer", certPEM(f.t, "issuer-new"))
	issuer.Data[steps.ChartIssuerKey], issuer.Data["key.pem"] = certPEM(f.t, "issuer-old"), []byte("not a key")
	issuer.Annotations = map[string]string{steps.HelmReleaseNameAnnotation: "linkerd-control-plane", steps.HelmReleaseNamespaceAnnotation: "linkerd"}
	f.replace(issuer)
	cm := bundleConfigMap(steps.RenderBundle(cert(f.t, "anchor-old")))
	cm.Annotations = issuer.Annotations
	f.replace(cm)
	identity := available(deployment("linkerd", "linkerd-identity", nil))
	identity.Spec.Template.Spec.Containers = []corev1.Container{{Name: "identity", Args: []string{"identity", steps.IdentitySchemeArg + steps.SchemeLinkerd}}}
	f.replace(identity)
	f.rotations["cluster"].Status.PreviousAnchorFingerprint = ""
}

// takeover refuses, changing nothing, where there is nothing to take over and where the
// hand-made issuer expires before a takeover could finish, naming what it found.
func TestTakeoverRefuses(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := f.run("takeover", "--yes")
	if code == ExitOK || !strings.Contains(errOut, "nothing to take over: the operator already records a previous anchor (Secret linkerd/linkerd-previous-anchor)") {
		t.Fatalf("takeover on a mesh on cert-manager's anchor: exit %d\n%s%s", code, out, errOut)
	}

	f = newFixture(t)
	f.handMade()
	out, errOut, code = f.run("takeover", "--yes")
	// issuer-old, the chart's issuer identity signs with, expires 2026-06-03, 36 hours after
	// the fixture's now.
	for _, want := range []string{"identity.linkerd.cluster.local", "2026-06-03T00:00:00Z", "within 72h0m0s", "nothing was changed"} {
		if code == ExitOK || !strings.Contains(errOut, want) {
			t.Errorf("takeover with the hand-made issuer about to expire: exit %d, want the refusal to say %q\n%s%s", code, want, out, errOut)
		}
	}
	if f.rotations["cluster"].Spec.Takeover {
		t.Error("spec.takeover was set")
	}
}
