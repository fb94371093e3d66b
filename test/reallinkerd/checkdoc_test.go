package reallinkerd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// checkDoc is one `check -o json` document, Linkerd's schema (linkerd2 pkg/healthcheck:
// CheckOutput, CheckCategory, Check), parsed strictly.
type checkDoc struct {
	Success    bool `json:"success"`
	Categories []struct {
		Name   string `json:"categoryName"`
		Checks []struct {
			Description string `json:"description"`
			Hint        string `json:"hint,omitempty"`
			Error       string `json:"error,omitempty"`
			Result      string `json:"result"`
		} `json:"checks"`
	} `json:"categories"`
}

func parseCheckDoc(b []byte) (*checkDoc, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d checkDoc
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("not a check document in Linkerd's schema: %w\n%s", err, b)
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON document:\n%s", b)
	}
	return &d, nil
}

// diffCheckDocs lists, field by field, where got differs from want: each difference names the
// category and the check it is in.
func diffCheckDocs(got, want *checkDoc) []string {
	var diffs []string
	differ := func(field string, g, w any) {
		if fmt.Sprint(g) != fmt.Sprint(w) {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, recorded %q", field, fmt.Sprint(g), fmt.Sprint(w)))
		}
	}
	differ("success", got.Success, want.Success)
	differ("number of categories", len(got.Categories), len(want.Categories))
	for i := 0; i < min(len(got.Categories), len(want.Categories)); i++ {
		gc, wc := got.Categories[i], want.Categories[i]
		cat := fmt.Sprintf("categories[%d]", i)
		differ(cat+".categoryName", gc.Name, wc.Name)
		differ(cat+": number of checks", len(gc.Checks), len(wc.Checks))
		for j := 0; j < min(len(gc.Checks), len(wc.Checks)); j++ {
			g, w := gc.Checks[j], wc.Checks[j]
			at := fmt.Sprintf("%s %q, checks[%d] %q", cat, wc.Name, j, w.Description)
			differ(at+": description", g.Description, w.Description)
			differ(at+": result", g.Result, w.Result)
			differ(at+": hint", g.Hint, w.Hint)
			differ(at+": error", g.Error, w.Error)
		}
	}
	return diffs
}

// TestDiffCheckDocsNamesTheField pins that a replay failure names the check and the field that
// differ.
func TestDiffCheckDocsNamesTheField(t *testing.T) {
	doc := func(result, errText string) *checkDoc {
		d, err := parseCheckDoc([]byte(`{"success":true,"categories":[{"categoryName":"linkerd-trust-rotation","checks":[` +
			`{"description":"trust-rotation operator is available","result":"` + result + `"` + errText + `}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := diffCheckDocs(doc("success", ""), doc("success", "")); len(d) != 0 {
		t.Errorf("equal documents differ: %v", d)
	}
	d := diffCheckDocs(doc("success", ""), doc("error", `,"error":"gone","hint":"https://x"`))
	want := []string{
		`categories[0] "linkerd-trust-rotation", checks[0] "trust-rotation operator is available": result: got "success", recorded "error"`,
		`categories[0] "linkerd-trust-rotation", checks[0] "trust-rotation operator is available": hint: got "", recorded "https://x"`,
		`categories[0] "linkerd-trust-rotation", checks[0] "trust-rotation operator is available": error: got "", recorded "gone"`,
	}
	if strings.Join(d, "\n") != strings.Join(want, "\n") {
		t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
	if _, err := parseCheckDoc([]byte(`{"success":true,"categories":[],"extra":1}`)); err == nil {
		t.Error("a document with a field Linkerd's schema lacks parsed")
	}
}
