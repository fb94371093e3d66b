package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// KeyMaterial finds a Secret's key in each form a component could print it in — the Secret as
// JSON, the key decoded, a protobuf body as client-go's hex dump, indented as klog writes it — and
// nothing in text without it.
func TestKeyMaterialFindsKeysInEveryForm(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "pki", Name: "anchor"}, Data: map[string][]byte{corev1.TLSPrivateKeyKey: key}}
	var keys KeyMaterial
	if err := keys.Collect(context.Background(), fake.NewClientset(sec)); err != nil {
		t.Fatal(err)
	}
	asJSON, _ := json.Marshal(sec)
	body := strings.SplitN(string(key), "\n", 2)[1] // the PEM body, without its header
	protobuf := append([]byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x80\x02"), key...)
	klogDump := "I1122 \"Response Body\" body=<\n\t" + strings.ReplaceAll(strings.TrimSpace(hex.Dump(protobuf)), "\n", "\n\t") + "\n >\n"
	for name, tc := range map[string]struct {
		data, want string
	}{
		"the Secret as JSON":          {string(asJSON), "holds private-key material of Secret pki/anchor"},
		"the PEM body alone":          {"key: " + body, "holds private-key material of Secret pki/anchor"},
		"a protobuf body, hex-dumped": {klogDump, "holds private-key material of Secret pki/anchor (in a hex dump)"},
		"the PEM header":              {"-----BEGIN EC PRIVATE KEY-----", "holds a PEM PRIVATE KEY header"},
	} {
		found := keys.Find(name, []byte(tc.data))
		if !strings.Contains(strings.Join(found, "\n"), name+" "+tc.want) {
			t.Errorf("%s: found %q, want %q", name, found, tc.want)
		}
	}
	clean := klogDump[:strings.Index(klogDump, "\t")] + "\t" + strings.ReplaceAll(hex.Dump([]byte("a Lease, no key")), "\n", "\n\t")
	if found := keys.Find("a log without keys", []byte(clean+string(asJSON[:40]))); len(found) > 0 {
		t.Errorf("found %q in text without a key", found)
	}
}
