package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The committed sample must be exactly what the generator writes, so nobody edits it by hand and the
// expectations in expected.json can be trusted.
func TestCommittedSampleMatchesGenerator(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "testdata", "sample")
	for name, want := range generate().files() {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%v (regenerate: go run ./stages/ingest/internal/mksample -out testdata/sample)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("testdata/sample/%s differs from the generator's output; regenerate it with "+
				"go run ./stages/ingest/internal/mksample -out testdata/sample", name)
		}
	}
}

func TestGeneratorIsDeterministic(t *testing.T) {
	a, b := generate(), generate()
	if !bytes.Equal(a.jsonl, b.jsonl) {
		t.Fatal("two runs of the generator differ")
	}
}

func TestSampleShape(t *testing.T) {
	s := generate()
	if s.exp.Valid < 250 || len(s.exp.MalformedLines) != 6 {
		t.Fatalf("valid %d, malformed %d", s.exp.Valid, len(s.exp.MalformedLines))
	}
	if n := bytes.Count(s.jsonl, []byte("\n")); n != s.exp.Lines {
		t.Fatalf("%d newlines, expected.json says %d lines", n, s.exp.Lines)
	}
	if len(s.jsonl) > 2<<20 {
		t.Fatalf("sample is %d bytes, keep it under 2 MiB", len(s.jsonl))
	}
	for _, feature := range []string{`"reasoning_content"`, `"tool_calls"`, `"tool_call_id"`, `"tools"`,
		`"from":"human"`, `"from":"function_call"`, `"role":"system"`, `"type":"text"`, "```go", "你好", "🚀"} {
		if !bytes.Contains(s.jsonl, []byte(feature)) {
			t.Errorf("sample has no %s", feature)
		}
	}
}
