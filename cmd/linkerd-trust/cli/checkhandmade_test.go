package cli

import (
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// handMadeMesh is a mesh installed as Linkerd's guide installs it, before the operator: the
// trust bundle holds an anchor made by hand (anchor-soon stands in for it: self-signed, CN
// root.linkerd.cluster.local, expiring 2026-06-20), written by Helm, and identity reads
// its issuer in Linkerd's own layout. cert-manager's PKI (anchor-old) is installed beside it.
func handMadeMesh(t *testing.T) *fixture {
	f := newFixture(t)
	delete(f.rotations, "cluster")
	f.remove(&corev1.Secret{}, "linkerd", "linkerd-previous-anchor")
	cm := bundleConfigMap(string(certPEM(t, "anchor-soon")))
	cm.ManagedFields = []metav1.ManagedFieldsEntry{owner("helm", "Update", `{"f:data":{"f:ca-bundle.crt":{}}}`)}
	f.replace(cm)
	id := available(deployment("linkerd", "linkerd-identity", nil))
	id.Spec.Template.Spec.Containers = []corev1.Container{{Name: "identity", Args: []string{"identity", "-identity-scheme=linkerd.io/tls"}}}
	f.replace(id)
	// The issuer Secret as Linkerd's chart renders it (issuer-old stands in for the hand-made
	// issuer), with cert-manager's keys beside: the identity-issuer Certificate writes into it.
	iss := secret("linkerd", "linkerd-identity-issuer", certPEM(t, "issuer-old"))
	iss.Data["crt.pem"], iss.Data["key.pem"] = certPEM(t, "issuer-old"), []byte("not a key")
	f.replace(iss)
	return f
}

// On a mesh that runs on Linkerd's own certificates, check --pre fails the bundle check as
// before, and says what it found — the anchor, its expiry, who writes the ConfigMap, the
// issuer's layout — and that moving onto cert-manager is a takeover, with or without
// cert-manager's PKI installed yet.
func TestCheckPreDescribesAHandMadePKI(t *testing.T) {
	f := handMadeMesh(t)
	found := []string{
		"CN=root.linkerd.cluster.local (", "self-signed, expires 2026-06-20, in 18d12h)",
		"written by helm", "identity runs with -identity-scheme=linkerd.io/tls", "not cert-manager's: CN=" + cert(t, "issuer-old").Subject.CommonName + " (",
		"is a takeover, not an adoption", binary + " takeover", TakeoverDoc,
	}
	out, _, code := f.run("check", "--pre")
	t.Logf("check --pre:\n%s", out)
	for _, want := range append([]string{"× ConfigMap linkerd-identity-trust-roots contains the current trust anchor",
		"does not contain the trust anchor", "the mesh trusts anchors cert-manager does not issue: "}, found...) {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("check --pre on a hand-made PKI beside cert-manager's: exit %d, want a failure saying %q:\n%s", code, want, out)
		}
	}

	// Before cert-manager's PKI is installed.
	f.remove(&cmapi.Certificate{}, "cert-manager", "linkerd-trust-anchor")
	f.remove(&corev1.Secret{}, "cert-manager", "linkerd-trust-anchor")
	out, _, code = f.run("check", "--pre")
	for _, want := range append([]string{"the mesh trusts anchors: "}, found...) {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("check --pre on a hand-made PKI without cert-manager's: exit %d, want a failure saying %q:\n%s", code, want, out)
		}
	}
}

// cert-manager's previous anchor in the bundle, co-written by Helm, is no hand-made PKI: the
// note names only anchors cert-manager did not issue, and nothing when there are none.
func TestHandMadeNoteSparesCertManagersAnchors(t *testing.T) {
	f := handMadeMesh(t)
	f.replace(secret("linkerd", "linkerd-previous-anchor", certPEM(t, "anchor-soon")))
	out, _, _ := f.run("check", "--pre")
	if strings.Contains(out, "takeover") || strings.Contains(out, "the mesh trusts") {
		t.Errorf("check --pre with cert-manager's previous anchor in the bundle speaks of a hand-made PKI:\n%s", out)
	}
}
