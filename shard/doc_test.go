package shard

import (
	"os"
	"strings"
	"testing"
)

// TestDocListsTheSchema: the package documentation's schema table names every column of Columns, in order,
// with its type, and nothing else.
func TestDocListsTheSchema(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "// # Schema\n")
	if !ok {
		t.Fatal("doc.go has no Schema section")
	}
	var got []Column
	for _, line := range strings.Split(section, "\n") {
		body, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			if len(got) > 0 {
				break // the end of the table
			}
			continue
		}
		f := strings.Fields(body)
		if len(f) < 3 {
			t.Fatalf("schema line %q: want name, type and description", line)
		}
		got = append(got, Column{Name: f[0], Type: f[1]})
	}
	want := Columns()
	if int(ColOrigin) != len(want)-1 || len(schema.Fields()) != len(want) {
		t.Fatalf("the Col constants, Columns and the Arrow schema disagree on the column count")
	}
	if len(got) != len(want) {
		t.Fatalf("doc.go lists %d columns, the schema has %d", len(got), len(want))
	}
	for i, c := range want {
		if got[i].Name != c.Name || got[i].Type != c.Type {
			t.Errorf("column %d: doc.go says %s %s, the schema %s %s", i, got[i].Name, got[i].Type, c.Name, c.Type)
		}
		if f := schema.Field(i); f.Name != c.Name {
			t.Errorf("column %d: Columns says %s, the Arrow schema %s", i, c.Name, f.Name)
		}
	}
}

// TestColumnsIsACopy: changing what Columns returned changes neither the schema nor what shards record.
func TestColumnsIsACopy(t *testing.T) {
	c := Columns()
	c[0].Name = "changed"
	if Columns()[0].Name != "id" {
		t.Fatal("Columns returned the package's own slice")
	}
}
