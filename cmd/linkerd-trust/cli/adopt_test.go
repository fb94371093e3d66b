package cli

import (
	"strings"
	"testing"
)

// withoutDataKey drops only the trust bundle's key from a managedFields entry, and says when
// nothing is left for the entry to own.
func TestWithoutDataKey(t *testing.T) {
	for name, tc := range map[string]struct {
		in, want string
		empty    bool
	}{
		"helm update":   {in: `{"f:data":{".":{},"f:ca-bundle.crt":{}},"f:metadata":{"f:labels":{".":{},"f:a":{}}}}`, want: `{"f:metadata":{"f:labels":{".":{},"f:a":{}}}}`},
		"other key":     {in: `{"f:data":{".":{},"f:ca-bundle.crt":{},"f:other":{}}}`, want: `{"f:data":{".":{},"f:other":{}}}`},
		"only the key":  {in: `{"f:data":{"f:ca-bundle.crt":{}}}`, empty: true},
		"not the owner": {in: `{"f:metadata":{"f:annotations":{"f:x":{}}}}`, want: `{"f:metadata":{"f:annotations":{"f:x":{}}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			out, empty, err := withoutDataKey([]byte(tc.in), "ca-bundle.crt")
			if err != nil {
				t.Fatal(err)
			}
			if empty != tc.empty || !tc.empty && string(out) != tc.want {
				t.Errorf("got %s (empty %v), want %s (empty %v)", out, empty, tc.want, tc.empty)
			}
		})
	}
	if _, _, err := withoutDataKey([]byte(`not json`), "ca-bundle.crt"); err == nil {
		t.Error("a malformed entry was accepted")
	}
}

// sameAnchors compares certificates, not bytes: Helm's trimmed rendering of the same anchor is
// the same bundle; another anchor is not, and the error names both.
func TestSameAnchors(t *testing.T) {
	anchor := string(certPEM(t, "anchor-old"))
	if err := sameAnchors(strings.TrimSpace(anchor), anchor); err != nil {
		t.Errorf("trimmed bundle: %v", err)
	}
	other := string(certPEM(t, "anchor-new"))
	err := sameAnchors(other, anchor)
	if err == nil || !strings.Contains(err.Error(), "the operator would write") {
		t.Errorf("another anchor: %v", err)
	}
	if err := sameAnchors("garbage", anchor); err == nil {
		t.Error("a bundle that is not PEM was accepted")
	}
}
