package topics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// packageConsts returns the constants this package declares (non-test files) whose names begin with prefix,
// with their literal values as written (strings unquoted).
func packageConsts(t *testing.T, prefix string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: %s is not a literal", e.Name(), name.Name)
					}
					v := lit.Value
					if lit.Kind == token.STRING {
						if v, err = strconv.Unquote(v); err != nil {
							t.Fatal(err)
						}
					}
					out[name.Name] = v
				}
			}
		}
	}
	return out
}

// TestAllNamesEveryTopic: All holds every topic this package names (each Topic* constant), once; Retained and
// Compacted split it; and a caller that changes a returned slice changes nothing for the next caller.
func TestAllNamesEveryTopic(t *testing.T) {
	declared := packageConsts(t, "Topic")
	if len(declared) < 5 {
		t.Fatalf("found only %d Topic* constants: %v", len(declared), declared)
	}
	all := All()
	for name, topic := range declared {
		if !slices.Contains(all, topic) {
			t.Errorf("All() leaves out %s (%q)", name, topic)
		}
	}
	if len(all) != len(declared) {
		t.Errorf("All() = %v: %d topics, the package declares %d", all, len(all), len(declared))
	}
	if want := append(Retained(), Compacted()...); !slices.Equal(all, want) {
		t.Errorf("All() = %v, want Retained() then Compacted() = %v", all, want)
	}
	for _, c := range Compacted() {
		if slices.Contains(Retained(), c) {
			t.Errorf("%q is both retained and compacted", c)
		}
	}
	for _, c := range []string{TopicShards, TopicShardFiles} {
		if !slices.Contains(Compacted(), c) {
			t.Errorf("Compacted() leaves out %q", c)
		}
	}
	r := Retained()
	r[0] = "changed"
	all[0] = "changed"
	if Retained()[0] != TopicPrompts || All()[0] != TopicPrompts {
		t.Error("a caller's change to a returned slice reached the next call")
	}
}

// TestWireFormatDocNamesEveryKind: the wire format comment of codec.go lists every record kind with its byte.
func TestWireFormatDocNamesEveryKind(t *testing.T) {
	kinds := packageConsts(t, "Kind")
	if len(kinds) < 8 {
		t.Fatalf("found only %d Kind* constants: %v", len(kinds), kinds)
	}
	src, err := os.ReadFile("codec.go")
	if err != nil {
		t.Fatal(err)
	}
	// The comment's lines, without their "//" and indentation, joined into one text.
	var doc []string
	for _, line := range strings.Split(string(src), "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "//"); ok {
			doc = append(doc, strings.TrimSpace(c))
		}
	}
	text := strings.Join(doc, " ")
	for name, value := range kinds {
		entry := value + " " + strings.TrimPrefix(name, "Kind")
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(entry) + `\b`).MatchString(text) {
			t.Errorf("codec.go's wire format comment does not list kind %q (%s)", entry, name)
		}
	}
}
