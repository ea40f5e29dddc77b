package chattemplate

import (
	"testing"
)

// renderTemplateVars parses source and renders it with JSON-decoded variables.
func renderTemplateVars(source string, varsJSON []byte) (string, error) {
	tmpl, err := Parse(source, "", "")
	if err != nil {
		return "", err
	}
	pinClock(tmpl)
	vars := map[string]value{}
	if len(varsJSON) > 0 {
		v, err := decodeJSON(varsJSON)
		if err != nil {
			return "", err
		}
		for _, k := range v.AsDict().Keys {
			vars[k] = v.AsDict().Data[k]
		}
	}
	return tmpl.renderVars(tmpl.single, vars)
}

// TestJinjaSemanticsMatchTransformers renders small templates that exercise whitespace control,
// printing, tojson, string methods, filters, tests, operators, loops, macros and error cases, and
// compares each with Python Jinja2 in the environment transformers builds for chat templates.
func TestJinjaSemanticsMatchTransformers(t *testing.T) {
	cases := readJSONL[refCase](t, "testdata/jinja_cases.jsonl")
	refs := reference(t, refRequest{Mode: "jinja", Cases: cases})
	for _, c := range cases {
		t.Run(c.ID, func(t *testing.T) {
			ref, ok := refs[c.ID]
			if !ok {
				t.Fatal("no reference result")
			}
			got, err := renderTemplateVars(c.Template, c.Vars)
			if c.Unsupported {
				if err == nil {
					t.Fatalf("template %q is marked unsupported but rendered %q", c.Template, got)
				}
				return
			}
			if ref.Error != "" {
				if err == nil {
					t.Fatalf("template %q: Python raised %q but Go rendered %q", c.Template, shortErr(ref.Error), got)
				}
				return
			}
			if err != nil {
				t.Fatalf("template %q: Go error %v; Python rendered %q", c.Template, err, *ref.Text)
			}
			if got != *ref.Text {
				t.Fatalf("template %q: %s", c.Template, diffExcerpt(*ref.Text, got))
			}
		})
	}
}
