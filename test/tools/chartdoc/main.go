// Command chartdoc generates a Helm chart's values.schema.json and README.md from its values.yaml,
// so that the comments in values.yaml are the one place values are documented (`make generate`
// runs it; `make verify` fails when its output is not committed).
//
//	chartdoc [-check] CHART_DIR...
//
// Every key of values.yaml must have a comment right above it: its description. chartdoc fails
// on a key without one, so no value goes undocumented. Lines of that comment starting with
// `+docs:` are directives for the schema, not description:
//
//	+docs:type=T       the JSON-schema type, when the default does not tell it (null, an empty
//	                   list); several types are separated by "|", e.g. string|null
//	+docs:enum=a,b,c   the allowed values
//	+docs:pattern=RE   a regular expression a string must match
//	+docs:minimum=N    the smallest allowed number (also +docs:maximum=N)
//	+docs:items=T      the type of a list's items
//	+docs:values=T     the type of a map's values (e.g. string for labels and annotations)
//	+docs:free         a map or list whose content is not described here (a Kubernetes object
//	                   such as resources or affinity): the schema checks its type only, and
//	                   its children need no comments
//
// A mapping that is neither empty nor free is closed: the schema rejects keys values.yaml does
// not have, so a misspelt value fails `helm install` instead of being ignored. An empty mapping
// is free unless +docs:values says otherwise.
//
// The README is README.tmpl.md in the chart directory, a text/template executed with the
// chart's name, description, version and appVersion and the values table (.Values).
//
// Why not cert-manager's helm-tool, which cert-manager and trust-manager use for the same
// `+docs:` idea: github.com/cert-manager/helm-tool is not served by the Go module proxy the
// build may reach (it answers 403), so it cannot be built into the tools cache. The directives
// here share its `+docs:` prefix and its +docs:type, so moving over (adding its +docs:section
// and +docs:property where needed) is a rewrite of some comments, not of their meaning.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

func main() {
	check := flag.Bool("check", false, "do not write: fail when a generated file differs from what is committed")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: chartdoc [-check] CHART_DIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, dir := range flag.Args() {
		if err := run(dir, *check); err != nil {
			fmt.Fprintf(os.Stderr, "chartdoc: %s: %v\n", dir, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// run generates (or, with check, compares) the files of one chart.
func run(dir string, check bool) error {
	files, err := Generate(dir)
	if err != nil {
		return err
	}
	for name, want := range files {
		path := filepath.Join(dir, name)
		if check {
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, want) {
				return fmt.Errorf("%s is stale: run make generate", path)
			}
			continue
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Generate returns the generated files of the chart in dir, by name.
func Generate(dir string) (map[string][]byte, error) {
	chart, err := readChart(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml: want a mapping at the top level")
	}
	var rows []row
	root, err := objectSchema(doc.Content[0], "", &rows)
	if err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	root.Schema = "http://json-schema.org/draft-07/schema#"
	root.Title = "Values of the " + chart.Name + " chart"
	// Helm passes `global` to every chart's schema validation, even a chart without dependencies.
	root.Properties.set("global", &schema{Type: types{"object"}, Description: "Values shared with subcharts (Helm's own key)."})
	schemaJSON, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, err
	}
	// encoding/json escapes <, > and & for HTML; the schema is read by people too.
	schemaJSON = []byte(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(schemaJSON)))

	tmplText, err := os.ReadFile(filepath.Join(dir, "README.tmpl.md"))
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("README.tmpl.md").Option("missingkey=error").Parse(string(tmplText))
	if err != nil {
		return nil, err
	}
	var readme bytes.Buffer
	readme.WriteString("<!-- Generated by test/tools/chartdoc from README.tmpl.md and values.yaml: edit those, then run make generate. -->\n\n")
	if err := tmpl.Execute(&readme, map[string]any{
		"Name": chart.Name, "Description": chart.Description, "Version": chart.Version,
		"AppVersion": chart.AppVersion, "Values": table(rows),
	}); err != nil {
		return nil, err
	}
	return map[string][]byte{
		"values.schema.json": append(schemaJSON, '\n'),
		"README.md":          readme.Bytes(),
	}, nil
}

type chartMeta struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Version     string `yaml:"version"`
	AppVersion  string `yaml:"appVersion"`
}

func readChart(path string) (chartMeta, error) {
	var c chartMeta
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// schema is the subset of JSON schema (draft 7) chartdoc writes, in a stable field order.
type schema struct {
	Schema               string   `json:"$schema,omitempty"`
	Title                string   `json:"title,omitempty"`
	Description          string   `json:"description,omitempty"`
	Type                 types    `json:"type,omitempty"`
	Enum                 []any    `json:"enum,omitempty"`
	Pattern              string   `json:"pattern,omitempty"`
	Minimum              *float64 `json:"minimum,omitempty"`
	Maximum              *float64 `json:"maximum,omitempty"`
	Items                *schema  `json:"items,omitempty"`
	Properties           *props   `json:"properties,omitempty"`
	AdditionalProperties any      `json:"additionalProperties,omitempty"`
	Default              any      `json:"default,omitempty"`
}

// types marshals as a string when there is one type, as a list otherwise.
type types []string

func (t types) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

// props keeps properties in values.yaml's order.
type props struct {
	keys []string
	m    map[string]*schema
}

func (p *props) set(k string, s *schema) {
	if p.m == nil {
		p.m = map[string]*schema{}
	}
	if _, ok := p.m[k]; !ok {
		p.keys = append(p.keys, k)
	}
	p.m[k] = s
}

func (p *props) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range p.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		vj, err := json.Marshal(p.m[k])
		if err != nil {
			return nil, err
		}
		b.Write(kj)
		b.WriteByte(':')
		b.Write(vj)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// row is one line of the README's values table.
type row struct {
	key, typ, def, desc string
}

// comment is a key's parsed comment.
type comment struct {
	desc       string
	directives map[string]string
}

func parseComment(text string) comment {
	c := comment{directives: map[string]string{}}
	var desc []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if d, ok := strings.CutPrefix(line, "+docs:"); ok {
			name, value, _ := strings.Cut(d, "=")
			c.directives[name] = value
			continue
		}
		desc = append(desc, line)
	}
	// Paragraphs (separated by an empty comment line) become one line each.
	c.desc = strings.TrimSpace(strings.Join(desc, " "))
	for strings.Contains(c.desc, "  ") {
		c.desc = strings.ReplaceAll(c.desc, "  ", " ")
	}
	return c
}

// objectSchema describes a closed mapping, recursing into its keys.
func objectSchema(n *yaml.Node, path string, rows *[]row) (*schema, error) {
	s := &schema{Type: types{"object"}, Properties: &props{}, AdditionalProperties: false}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		full := key
		if path != "" {
			full = path + "." + key
		}
		text := k.HeadComment
		if text == "" {
			return nil, fmt.Errorf("line %d: %s has no comment: describe every value", k.Line, full)
		}
		// A blank line inside a head comment separates a section header from the key's own comment.
		if idx := strings.LastIndex(text, "\n\n"); idx >= 0 {
			text = text[idx+2:]
		}
		c := parseComment(text)
		if c.desc == "" {
			return nil, fmt.Errorf("line %d: %s has only directives: describe it", k.Line, full)
		}
		prop, err := valueSchema(v, full, c, rows)
		if err != nil {
			return nil, err
		}
		s.Properties.set(key, prop)
	}
	return s, nil
}

// valueSchema describes one value and appends its table rows (its own, then its children's).
func valueSchema(v *yaml.Node, full string, c comment, rows *[]row) (*schema, error) {
	var def any
	if err := v.Decode(&def); err != nil {
		return nil, fmt.Errorf("line %d: %s: %w", v.Line, full, err)
	}
	_, free := c.directives["free"]
	typ, err := inferType(v, c)
	if err != nil {
		return nil, fmt.Errorf("line %d: %s: %w", v.Line, full, err)
	}
	idx := len(*rows)
	*rows = append(*rows, row{key: full, typ: strings.Join(typ, " or "), desc: c.desc})

	var s *schema
	switch {
	case typ[0] == "object" && len(v.Content) > 0 && !free && c.directives["values"] == "":
		s, err = objectSchema(v, full, rows)
		if err != nil {
			return nil, err
		}
		// A closed object's default is the sum of its children's: show those instead.
		(*rows)[idx].def = ""
	case typ[0] == "object":
		s = &schema{Type: typ}
		if vt := c.directives["values"]; vt != "" {
			s.AdditionalProperties = &schema{Type: splitTypes(vt)}
		}
		(*rows)[idx].def = inline(def)
	case typ[0] == "array":
		s = &schema{Type: typ}
		if it := c.directives["items"]; it != "" {
			s.Items = &schema{Type: splitTypes(it)}
		}
		(*rows)[idx].def = inline(def)
	default:
		s = &schema{Type: typ}
		(*rows)[idx].def = inline(def)
	}
	s.Description = c.desc
	if def != nil && !(typ[0] == "object" && s.Properties != nil) {
		s.Default = def
	}
	if e := c.directives["enum"]; e != "" {
		for _, item := range strings.Split(e, ",") {
			s.Enum = append(s.Enum, scalar(strings.TrimSpace(item), typ))
		}
	}
	s.Pattern = c.directives["pattern"]
	for name, dst := range map[string]**float64{"minimum": &s.Minimum, "maximum": &s.Maximum} {
		if m := c.directives[name]; m != "" {
			f, err := strconv.ParseFloat(m, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: +docs:%s=%s: %w", full, name, m, err)
			}
			*dst = &f
		}
	}
	return s, nil
}

// inferType returns the value's JSON-schema types: +docs:type, or what its default is.
func inferType(v *yaml.Node, c comment) (types, error) {
	if t := c.directives["type"]; t != "" {
		return splitTypes(t), nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return types{"object"}, nil
	case yaml.SequenceNode:
		return types{"array"}, nil
	case yaml.ScalarNode:
		switch v.Tag {
		case "!!str":
			return types{"string"}, nil
		case "!!int":
			return types{"integer"}, nil
		case "!!float":
			return types{"number"}, nil
		case "!!bool":
			return types{"boolean"}, nil
		case "!!null":
			return nil, errors.New("a null default needs +docs:type")
		}
	}
	return nil, fmt.Errorf("cannot infer the type of a %s value: add +docs:type", v.Tag)
}

func splitTypes(t string) types {
	return types(strings.Split(t, "|"))
}

// scalar converts an enum item to the value's type.
func scalar(item string, t types) any {
	switch t[0] {
	case "integer":
		if i, err := strconv.Atoi(item); err == nil {
			return i
		}
	case "boolean":
		if b, err := strconv.ParseBool(item); err == nil {
			return b
		}
	}
	return item
}

// inline renders a default for the README: compact JSON.
func inline(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// table renders the values table in Markdown.
func table(rows []row) string {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	// Outside code spans, < and > would read as HTML tags.
	prose := func(s string) string {
		parts := strings.Split(s, "`")
		for i := 0; i < len(parts); i += 2 {
			parts[i] = strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(parts[i])
		}
		return esc(strings.Join(parts, "`"))
	}
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n")
	for _, r := range rows {
		def := ""
		if r.def != "" {
			def = "`" + esc(r.def) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, def, prose(r.desc))
	}
	return b.String()
}
