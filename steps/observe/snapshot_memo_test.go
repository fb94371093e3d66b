package observe

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// TestMemoConvertsEachObjectOnce: the same informer object is parsed once, a replaced one again,
// and a Secret that went away reads as not found.
func TestMemoConvertsEachObjectOnce(t *testing.T) {
	var m sourceMemo
	first := &corev1.Secret{Data: map[string][]byte{steps.CertificateKey: []byte("not PEM")}}
	a := m.source("ns", "anchor", first)
	b := m.source("ns", "anchor", first)
	if a.Err == nil || !a.Found || a.Err != b.Err {
		t.Fatalf("the same Secret read %+v, then %+v: want one parse, kept", a, b)
	}
	replaced := &corev1.Secret{}
	if c := m.source("ns", "anchor", replaced); c.Err == a.Err || !c.Found {
		t.Fatalf("the replaced Secret read %+v: want it parsed anew", c)
	}
	if d := m.source("ns", "anchor", nil); d.Found || d.Err != nil {
		t.Fatalf("no Secret read %+v: want not found", d)
	}
}
