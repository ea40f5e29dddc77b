package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// TestParseMisspeltTextKey: a message with no key that holds its text is rejected with the keys it has and
// the ones that are read; an assistant message with only tool calls, and an explicit null content, are not.
func TestParseMisspeltTextKey(t *testing.T) {
	_, err := Parse("f", 1, []byte(`{"conversations": [{"from": "human", "valeu": "hi"}, {"from": "gpt", "value": "yo"}]}`), "d")
	if ReasonOf(err) != ReasonNoText {
		t.Fatalf("got %v (%s), want %s", err, ReasonOf(err), ReasonNoText)
	}
	for _, want := range []string{"conversations[0]", `"from", "valeu"`, `"content"`, `"value"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("reason %q does not name %s", err, want)
		}
	}
	for _, ok := range []string{
		`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}, {"role": "user", "content": "again"}]}`,
		`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}, {"role": "user", "content": ""}]}`,
	} {
		if _, err := Parse("f", 1, []byte(ok), "d"); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestParseFunctionsAsTools: a row's legacy "functions" (and BFCL's "function") become OpenAI-shaped tools;
// with "tools" as well, the row is rejected.
func TestParseFunctionsAsTools(t *testing.T) {
	fn := `{"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {}}}`
	want := `[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{}}}}]`
	for _, key := range []string{"functions", "function"} {
		p, err := Parse("f", 1, []byte(`{"`+key+`": [`+fn+`], "messages": [{"role": "user", "content": "weather?"}]}`), "d")
		if err != nil {
			t.Fatal(err)
		}
		if string(p.Tools) != want {
			t.Errorf("%s: tools %s, want %s", key, p.Tools, want)
		}
	}
	// Already tools under the old name: kept as they are; the content id is that of the same row with "tools".
	tool := `[{"type":"function","function":{"name":"f"}}]`
	a, err := Parse("f", 1, []byte(`{"functions": `+tool+`, "messages": [{"role": "user", "content": "x"}]}`), "d")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Parse("f", 1, []byte(`{"tools": `+tool+`, "messages": [{"role": "user", "content": "x"}]}`), "d")
	if string(a.Tools) != tool || a.ID != b.ID {
		t.Errorf("tools %s id %s, want %s id %s", a.Tools, a.ID, tool, b.ID)
	}
	_, err = Parse("f", 1, []byte(`{"tools": `+tool+`, "functions": [`+fn+`], "messages": [{"role": "user", "content": "x"}]}`), "d")
	if ReasonOf(err) != ReasonBadField {
		t.Errorf("tools and functions: %v, want %s", err, ReasonBadField)
	}
	_, err = Parse("f", 1, []byte(`{"functions": [{"description": "no name"}], "messages": [{"role": "user", "content": "x"}]}`), "d")
	if ReasonOf(err) != ReasonBadField || !strings.Contains(err.Error(), "functions[0]") {
		t.Errorf("function without a name: %v", err)
	}
}

// TestRunReportsIgnoredKeysOncePerDataset: row keys ingest does not read are logged once per dataset and key,
// and listed in the result; the rows are ingested.
func TestRunReportsIgnoredKeysOncePerDataset(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := range 5 {
		lines = append(lines, fmt.Sprintf(`{"question_id": %d, "category": "writing", "messages": [{"role": "user", "content": "q%d"}]}`, i, i))
	}
	lines = append(lines, `{"question_id": 9, "turns": ["x"], "messages": [{"role": "user", "content": "q9"}]}`)
	path := filepath.Join(dir, "mtbench.jsonl")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	var logs bytes.Buffer
	cfg := Config{Client: kafkatest.Client(t, startKafka(t)), Inputs: []string{path}, TempDir: t.TempDir(), Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Prompts != 6 || res.Rejected != 0 {
		t.Fatalf("%d prompts, %d rejected, want 6 and 0", res.Prompts, res.Rejected)
	}
	if got := strings.Join(res.IgnoredKeys["mtbench"], ","); got != "category,question_id,turns" {
		t.Errorf("ignored keys %q", got)
	}
	if n := strings.Count(logs.String(), "keys ingest does not read"); n != 2 {
		t.Errorf("%d warnings about ignored keys, want 2 (line 1's keys, then line 6's new one):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "mtbench.jsonl line 6") {
		t.Errorf("the second warning does not point at line 6:\n%s", logs.String())
	}
}

// TestReadJSONArray: a file that is one JSON array of rows (FastChat's ShareGPT, pretty-printed, gzip
// compressed or not) is read row by row, each located by the line it starts on, a bad element rejected with
// its index; a cut-off array is a FileError after the rows before the cut.
func TestReadJSONArray(t *testing.T) {
	rows := []map[string]any{
		{"id": "a", "conversations": []map[string]string{{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}}},
		{"id": "b", "conversations": []map[string]string{{"from": "human", "valeu": "typo"}}},
		{"id": "c", "conversations": []map[string]string{{"from": "human", "value": "a \"quoted\" ] and , and }"}}},
	}
	pretty, _ := json.MarshalIndent(rows, "", "  ")
	dir := t.TempDir()
	plain := filepath.Join(dir, "sharegpt.json")
	os.WriteFile(plain, append([]byte("\xef\xbb\xbf\n"), pretty...), 0o644)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(pretty)
	zw.Close()
	packed := filepath.Join(dir, "sharegpt.json.gz")
	os.WriteFile(packed, gz.Bytes(), 0o644)

	// The line each element starts on in the pretty text.
	starts := map[string]int64{}
	for i, l := range strings.Split(string(pretty), "\n") {
		if strings.HasPrefix(l, "  {") {
			starts[[]string{"a", "b", "c"}[len(starts)]] = int64(i + 1)
		}
	}
	for _, tc := range []struct {
		path  string
		shift int64
	}{{plain, 1}, {packed, 0}} {
		type got struct {
			id   string
			line int64
			err  error
		}
		var all []got
		err := ReadFile(tc.path, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
			all = append(all, got{p.ID, src.Line, err})
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if len(all) != 3 {
			t.Fatalf("%s: %d rows, want 3", tc.path, len(all))
		}
		for i, id := range []string{"a", "b", "c"} {
			if all[i].line != starts[id]+tc.shift {
				t.Errorf("%s: element %d at line %d, want %d", tc.path, i, all[i].line, starts[id]+tc.shift)
			}
		}
		if all[0].err != nil || all[0].id != "a" || all[2].err != nil || all[2].id != "c" {
			t.Errorf("%s: good rows: %+v", tc.path, all)
		}
		if ReasonOf(all[1].err) != ReasonNoText || !strings.Contains(all[1].err.Error(), "element 1 of the JSON array") {
			t.Errorf("%s: bad row: %v", tc.path, all[1].err)
		}
	}

	// Cut short in the third element: two rows, then one FileError where reading stopped.
	cut := filepath.Join(dir, "cut.json")
	os.WriteFile(cut, pretty[:bytes.LastIndex(pretty, []byte(`"id": "c"`))+5], 0o644)
	n := 0
	err := ReadFile(cut, func(topics.Prompt, error, topics.Source, []byte) error { n++; return nil })
	var fe *FileError
	if n != 2 || !errors.As(err, &fe) || fe.Err.Reason != ReasonCorruptFile || !strings.Contains(fe.Error(), "element 2") {
		t.Errorf("cut array: %d rows, %v", n, err)
	}
	// An empty array holds no rows; content after the array is refused with the fix.
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(" [ ]\n"), 0o644)
	if err := ReadFile(empty, func(topics.Prompt, error, topics.Source, []byte) error { t.Error("a row in []"); return nil }); err != nil {
		t.Errorf("[]: %v", err)
	}
	lists := filepath.Join(dir, "lists.jsonl")
	os.WriteFile(lists, []byte(`[{"role": "user", "content": "x"}]`+"\n"+`[{"role": "user", "content": "y"}]`+"\n"), 0o644)
	err = ReadFile(lists, func(topics.Prompt, error, topics.Source, []byte) error { return nil })
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "JSONL") {
		t.Errorf("JSONL of lists: %v", err)
	}
}
