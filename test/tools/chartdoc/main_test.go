package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func chart(t *testing.T, values string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"Chart.yaml":     "apiVersion: v2\nname: demo\ndescription: A demo.\nversion: 1.0.0\nappVersion: v1\n",
		"values.yaml":    values,
		"README.tmpl.md": "# {{ .Name }}\n\n{{ .Values }}",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEveryValueMustBeDescribed(t *testing.T) {
	for name, values := range map[string]string{
		"a key without a comment":        "# Replicas.\nreplicas: 1\nimage: x\n",
		"a nested key without a comment": "# The image.\nimage:\n  repository: x\n",
		"a comment of directives only":   "# +docs:minimum=1\nreplicas: 1\n",
		"a null without a type":          "# Something.\nthing: null\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Generate(chart(t, values)); err == nil {
				t.Fatal("generated; want an error")
			}
		})
	}
}

func TestSchemaAndReadme(t *testing.T) {
	files, err := Generate(chart(t, `# Header of the file.

# Section

# Number of replicas.
# +docs:minimum=1
replicas: 2
# The image.
image:
  # Pull policy.
  # +docs:enum=Always,IfNotPresent
  pullPolicy: IfNotPresent
# Labels, as in <key>: <value>.
# +docs:values=string
labels: {}
# Resources.
# +docs:free
resources:
  requests:
    cpu: 10m
`))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(files["values.schema.json"], &s); err != nil {
		t.Fatal(err)
	}
	props := s["properties"].(map[string]any)
	if s["additionalProperties"] != false || props["image"].(map[string]any)["additionalProperties"] != false {
		t.Errorf("closed objects must reject unknown keys: %s", files["values.schema.json"])
	}
	if props["replicas"].(map[string]any)["minimum"] != 1.0 || props["replicas"].(map[string]any)["type"] != "integer" {
		t.Errorf("replicas: %v", props["replicas"])
	}
	if _, ok := props["resources"].(map[string]any)["properties"]; ok {
		t.Error("a free object must not be closed")
	}
	if _, ok := props["global"]; !ok {
		t.Error("the schema must allow Helm's global")
	}
	readme := string(files["README.md"])
	for _, want := range []string{"| `replicas` | integer | `2` | Number of replicas. |", "| `image.pullPolicy` | string |", "&lt;key&gt;", "# demo"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README lacks %q:\n%s", want, readme)
		}
	}
	if strings.Contains(readme, "Section") || strings.Contains(readme, "Header") {
		t.Errorf("section headers leaked into descriptions:\n%s", readme)
	}
}
