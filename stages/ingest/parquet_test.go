package ingest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/compress"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/draftflow/draftflow/topics"
)

// writeParquet writes one record to path as zstd Parquet with rowGroup rows per row group.
func writeParquet(t testing.TB, path string, rec arrow.Record, rowGroup int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tbl := array.NewTableFromRecords(rec.Schema(), []arrow.Record{rec})
	defer tbl.Release()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	if err := pqarrow.WriteTable(tbl, f, rowGroup, props, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
}

var (
	toolCallType = arrow.StructOf(
		arrow.Field{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "type", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "function", Type: arrow.StructOf(
			arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "arguments", Type: arrow.BinaryTypes.String},
		), Nullable: true},
	)
	messageType = arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "from", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "value", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "reasoning_content", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "tool_calls", Type: arrow.ListOf(toolCallType), Nullable: true},
		arrow.Field{Name: "tool_call_id", Type: arrow.BinaryTypes.String, Nullable: true},
	)
)

func TestReadParquetNested(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "messages", Type: arrow.ListOf(messageType), Nullable: true},
		{Name: "tools", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true}, // ignored column
	}, nil)
	rows := `[
	  {"id": 1, "messages": [{"role": "user", "content": "q"},
	     {"role": "assistant", "reasoning_content": "r", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
	     {"role": "tool", "tool_call_id": "c", "content": "1"}, {"role": "user", "content": "again"}, {"role": "assistant", "content": "x"}],
	   "tools": "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "score": 0.5},
	  {"id": null, "messages": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]},
	  {"id": 3, "messages": []},
	  {"id": 4, "messages": null},
	  {"id": 5, "messages": [{"role": "alien", "content": "x"}]},
	  {"id": 6, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "日本 🚀"}]}
	]`
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "nested.parquet")
	writeParquet(t, path, rec, 2) // three row groups

	var progressed int64
	s := seen{prompts: map[int64]topics.Prompt{}, errs: map[int64]error{}, raw: map[int64]int{}}
	err = readFile(context.Background(), path, readOptions{progress: func(n int64) { progressed += n }},
		func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
			if err != nil {
				s.errs[src.Line] = err
			} else {
				s.prompts[src.Line] = p
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	// Readers give every turn (turns: all): the first turn's prompt, the rest of the conversation after it.
	if all := s.prompts[1]; len(all.Messages) != 1 || all.Turn != 0 || len(all.Rest) != 4 || all.Rest[0].Role != "assistant" {
		t.Fatalf("row 1 (turns: all): %+v", all)
	}
	p1 := LastTurn(s.prompts[1])
	if p1.ID != "1" || p1.Dataset != "nested" || len(p1.Messages) != 4 || p1.Turn != 1 || p1.Source.Line != 1 {
		t.Fatalf("row 1: %+v", p1)
	}
	if m := p1.Messages[1]; m.Role != "assistant" || m.ReasoningContent != "r" ||
		!jsonEqual(m.ToolCalls, []byte(`[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]`)) {
		t.Errorf("row 1 assistant: %+v %s", m, m.ToolCalls)
	}
	if m := p1.Messages[2]; m.Role != "tool" || m.ToolCallID != "c" || m.Content != "1" {
		t.Errorf("row 1 tool: %+v", m)
	}
	if !jsonEqual(p1.Tools, []byte(`[{"type":"function","function":{"name":"f"}}]`)) {
		t.Errorf("row 1 tools %s", p1.Tools)
	}
	// Same conversation in JSONL and Parquet: same content id.
	jl := mustParse(t, `{"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]}`)
	if p2 := s.prompts[2]; p2.ID != jl.ID || len(p2.Messages) != 1 || p2.Messages[0].Content != "hello" {
		t.Errorf("row 2: %+v, want id %s", p2, jl.ID)
	}
	for row, r := range map[int64]Reason{3: ReasonEmptyConversation, 4: ReasonEmptyConversation, 5: ReasonUnknownRole} {
		if ReasonOf(s.errs[row]) != r {
			t.Errorf("row %d: %v, want %s", row, s.errs[row], r)
		}
	}
	if p6 := s.prompts[6]; p6.ID != "6" || p6.Messages[1].Content != "日本 🚀" {
		t.Errorf("row 6: %+v", p6)
	}
	st, _ := os.Stat(path)
	if progressed != st.Size() {
		t.Errorf("progress %d, file %d bytes", progressed, st.Size())
	}
}

func TestReadParquetJSONStringColumns(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "conversations", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ids := b.Field(0).(*array.StringBuilder)
	convs := b.Field(1).(*array.StringBuilder)
	ids.AppendValues([]string{"a", "b", "c", "d"}, nil)
	convs.Append(`[{"from": "human", "value": "x"}]`)
	convs.Append("[{\"from\": \"human\", \"value\": \"caf\xff\"}]") // invalid UTF-8 the JSON encoder would hide
	convs.Append("not json")
	convs.AppendNull()
	rec := b.NewRecord()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "strings.parquet")
	writeParquet(t, path, rec, 1024)

	got := map[int64]string{}
	err := ReadFile(path, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
		if err != nil {
			got[src.Line] = string(ReasonOf(err)) + ": " + err.Error()
		} else {
			got[src.Line] = "ok " + p.ID + " " + p.Messages[0].Content
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{
		1: "ok a x",
		2: "invalid_utf8: invalid UTF-8 in column conversations",
		3: "bad_field: \"conversations\" is a string that does not hold JSON",
		4: "empty_conversation",
	}
	for row, w := range want {
		if !strings.HasPrefix(got[row], w) {
			t.Errorf("row %d: %q, want %q...", row, got[row], w)
		}
	}
}

func TestReadParquetWithoutMessages(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[{"text": "x"}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "plain.parquet")
	writeParquet(t, path, rec, 10)
	err = ReadFile(path, func(topics.Prompt, error, topics.Source, []byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `no "messages", "conversations" or "input_ids" column (columns: text)`) {
		t.Fatalf("err %v", err)
	}
}
