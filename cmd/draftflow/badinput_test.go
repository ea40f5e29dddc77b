package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/klauspost/compress/zstd"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/topics"
)

// TestBadInputCorpus feeds a corpus of broken input through the whole pipeline (ingest, tokenize, generate,
// sink): truncated JSON, wrong types, unknown roles, empty conversations and messages, a line over the line
// limit, invalid UTF-8, raw NUL bytes, a prompt over the model's context, a duplicate id with other content,
// no user message, a misspelt text key ("valeu"), a Parquet file with a wrong schema, a corrupt gzip file, a
// truncated zstd file and a JSON array file (read row by row, a bad element rejected at its line). Rows with
// metadata keys (MT-bench's question_id) and legacy "functions" are good rows. Each bad
// record is one rejection naming its file, line and reason class; every good record reaches the shards; no
// stage stops.
func TestBadInputCorpus(t *testing.T) {
	dir := t.TempDir()
	user := func(id, content string) string {
		return fmt.Sprintf(`{"id": %q, "messages": [{"role": "user", "content": %q}]}`, id, content)
	}
	lines := []struct {
		line  string
		class string // "" for a good line
	}{
		{user("good-1", "hello"), ""},
		{`{"id": "trunc", "messages": [{"role": "user", "content": "cut off`, "invalid_json"},
		{`{"id": "types", "messages": 42}`, "bad_field"},
		{`{"id": "types2", "messages": [{"role": "user", "content": {"nested": true}}]}`, "bad_field"},
		{`{"id": "role", "messages": [{"role": "wizard", "content": "abracadabra"}]}`, "unknown_role"},
		{`{"id": "empty", "messages": []}`, "empty_conversation"},
		{`{"id": "nouser", "messages": [{"role": "system", "content": "only a system prompt"}]}`, "no_user_message"},
		{user("huge", strings.Repeat("x", 70<<10)), "line_too_long"},
		{"{\"id\": \"utf8\", \"messages\": [{\"role\": \"user\", \"content\": \"bad \xff\xfe bytes\"}]}", "invalid_utf8"},
		{"{\"id\": \"nul\", \"messages\": [{\"role\": \"user\", \"content\": \"raw \x00 nul\"}]}", "invalid_json"},
		{`{"id": "nul-escaped", "messages": [{"role": "user", "content": "an escaped \u0000 NUL is text"}]}`, ""},
		{user("empty-content", ""), ""},
		{user("overlong", strings.Repeat("tell me everything about the weather ", 300)), "too_long"},
		{user("good-1", "the same id with other content"), "duplicate_id"},
		{user("good-2", "bye"), ""},
		{`{"id": "typo", "conversations": [{"from": "human", "valeu": "a misspelt text key"}]}`, "no_text"},
		{`{"id": "meta", "question_id": 81, "category": "writing", "messages": [{"role": "user", "content": "metadata is not an error"}]}`, ""},
		{`{"id": "legacy-functions", "functions": [{"name": "f", "parameters": {"type": "object"}}], "messages": [{"role": "user", "content": "call f"}]}`, ""},
	}
	var jsonl bytes.Buffer
	for _, l := range lines {
		jsonl.WriteString(l.line + "\n")
	}
	main := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(main, jsonl.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// A gzip file whose stream breaks after its first line.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(user("gz-1", "first") + "\n" + user("gz-2", "second") + "\n" + user("gz-3", "third") + "\n"))
	zw.Close()
	broken := gz.Bytes()
	broken = append(broken[:len(broken)/2:len(broken)/2], bytes.Repeat([]byte{0x5a}, 16)...)
	corruptGz := filepath.Join(dir, "corrupt.jsonl.gz")
	os.WriteFile(corruptGz, broken, 0o644)
	// A zstd file cut short.
	var zs bytes.Buffer
	ze, _ := zstd.NewWriter(&zs)
	for i := range 200 {
		ze.Write([]byte(user(fmt.Sprintf("zst-%d", i), strings.Repeat("words ", 40)) + "\n"))
	}
	ze.Close()
	truncZst := filepath.Join(dir, "truncated.jsonl.zst")
	os.WriteFile(truncZst, zs.Bytes()[:zs.Len()*2/3], 0o644)
	// A JSON array of ShareGPT rows (how FastChat ships them), pretty-printed: read row by row, each at the line
	// it starts on; element 1 has a misspelt text key.
	array := filepath.Join(dir, "sharegpt.json")
	os.WriteFile(array, []byte(`[
  {
    "id": "arr-0",
    "conversations": [{"from": "human", "value": "first"}]
  },
  {
    "id": "arr-1",
    "conversations": [{"from": "human", "valeu": "second"}]
  },
  {"id": "arr-2", "conversations": [{"from": "human", "value": "third"}]}
]
`), 0o644)
	// A Parquet file without a messages or conversations column.
	wrongSchema := filepath.Join(dir, "wrong.parquet")
	writeTextParquet(t, wrongSchema)

	kc := kafkatest.Config(t, 2)
	rc := simRun(kc, filepath.Join(dir, "out"), main, corruptGz, truncZst, wrongSchema, array)
	rc.Ingest.Defaults.MaxNewTokens = 64
	rc.Ingest.MaxLineBytes = 64 << 10
	rc.Tokenize.ContextLength = 1024
	rc.Sim.OutputLenMean = 50
	rc.Timeout = 3 * time.Minute
	res, err := pipeline.Run(context.Background(), rc)
	if err != nil {
		t.Fatalf("the run stopped: %v", err)
	}
	if len(res.Missing) != 0 {
		t.Fatalf("prompts lost: %v", res.Missing)
	}

	n := kafkatest.Size(t, kc, topics.TopicRejected)
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, n, time.Minute)
	type where struct {
		file string
		line int64
	}
	got := map[where]*topics.Rejection{}
	for _, r := range rejs {
		if r.Source.File == "" || r.Source.Line == 0 || r.Reason == "" || r.Class == "" {
			t.Errorf("rejection without file, line, reason or class: %+v", r)
		}
		got[where{filepath.Base(r.Source.File), r.Source.Line}] = r
	}
	want := 0
	for i, l := range lines {
		r := got[where{"corpus.jsonl", int64(i + 1)}]
		switch {
		case l.class == "" && r != nil:
			t.Errorf("line %d (good) rejected: %s", i+1, r.Reason)
		case l.class != "" && r == nil:
			t.Errorf("line %d: no rejection, want %s", i+1, l.class)
		case l.class != "" && r.Class != l.class:
			t.Errorf("line %d: rejected as %s (%s), want %s", i+1, r.Class, r.Reason, l.class)
		}
		if l.class != "" {
			want++
		}
	}
	for _, f := range []struct{ file, class string }{{"corrupt.jsonl.gz", "corrupt_file"}, {"truncated.jsonl.zst", "corrupt_file"}, {"wrong.parquet", "wrong_schema"}} {
		found := false
		for w, r := range got {
			if w.file == f.file && r.Class == f.class {
				found = true
				t.Logf("%s: rejected from line %d: %s", f.file, w.line, r.Reason)
			}
		}
		if !found {
			t.Errorf("%s: no %s rejection", f.file, f.class)
		}
		want++
	}
	if r := got[where{"sharegpt.json", 6}]; r == nil || r.Class != "no_text" || !strings.Contains(r.Reason, "element 1 of the JSON array") ||
		!strings.Contains(r.Reason, `"valeu"`) {
		t.Errorf("sharegpt.json line 6 (element 1, a misspelt text key): %+v", r)
	}
	want++
	if len(rejs) != want {
		t.Errorf("%d rejections, want %d (one per bad record)", len(rejs), want)
	}
	// The same rejections are in the output directory, where the user finds them after the run.
	if res.RejectedFile == "" {
		t.Fatal("the run names no rejections file")
	}
	if lines := readRejectionFile(t, res.RejectedFile); len(lines) != len(rejs) {
		t.Errorf("%s holds %d rejections, the topic %d", res.RejectedFile, len(lines), len(rejs))
	}
	// The good lines are in the shards.
	ids := map[string]bool{}
	for _, r := range readShards(t, rc.Sink.Dir) {
		ids[r.id] = true
	}
	for _, id := range []string{"good-1", "good-2", "nul-escaped", "empty-content", "meta", "legacy-functions", "arr-0", "arr-2"} {
		if !ids[id] {
			t.Errorf("%s is not in the shards", id)
		}
	}
}

// writeTextParquet writes a Parquet file with one string column "text": no conversation in it.
func writeTextParquet(t *testing.T, path string) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
	rec := b.NewRecord()
	defer rec.Release()
	testutil.WriteParquet(t, path, rec)
}
