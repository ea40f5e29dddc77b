package encode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

func TestStream(t *testing.T) {
	m, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id": "a", "messages": [{"role": "user", "content": "Hello there"}]}
{"conversations": [{"from": "human", "value": "你好 🚀"}, {"from": "gpt", "value": "dropped"}]}

{"id": 7, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x  123"}]}
`
	var out bytes.Buffer
	if err := Stream(strings.NewReader(in), &out, m, Options{TemplateKwargs: map[string]any{"enable_thinking": false}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d output lines for 3 conversations:\n%s", len(lines), out.String())
	}
	want := []*topics.Prompt{
		{Messages: []topics.Message{{Role: "user", Content: "Hello there"}}},
		{Messages: []topics.Message{{Role: "user", Content: "你好 🚀"}}},
		{Messages: []topics.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "x  123"}}},
	}
	for i, l := range lines {
		var row struct {
			ID       string   `json:"id"`
			InputIDs []uint32 `json:"input_ids"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatal(err)
		}
		want[i].Sampling.TemplateKwargs = map[string]any{"enable_thinking": false}
		ids, err := m.Encode(want[i])
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids) != fmt.Sprint(row.InputIDs) {
			t.Errorf("line %d: %v, want %v", i+1, row.InputIDs, ids)
		}
	}
	if !strings.HasPrefix(lines[0], `{"id":"a",`) || !strings.HasPrefix(lines[2], `{"id":"7",`) {
		t.Errorf("ids not carried: %q, %q", lines[0], lines[2])
	}

	out.Reset()
	if err := Stream(strings.NewReader(`{"text": "plain  text 42"}`+"\n"), &out, m, Options{Text: true}); err != nil {
		t.Fatal(err)
	}
	var textRow struct {
		InputIDs []uint32 `json:"input_ids"`
	}
	if err := json.Unmarshal(out.Bytes(), &textRow); err != nil {
		t.Fatal(err)
	}
	if want := m.Tokenizer.Encode("plain  text 42"); len(want) == 0 || fmt.Sprint(textRow.InputIDs) != fmt.Sprint(want) {
		t.Errorf("text mode gave %v, want %v", textRow.InputIDs, want)
	}

	err = Stream(strings.NewReader(in+`{"messages": [{"role": "wizard", "content": "x"}]}`+"\n"), &out, m, Options{})
	if err == nil || !strings.Contains(err.Error(), "stdin line 5") || !strings.Contains(err.Error(), "wizard") {
		t.Fatalf("bad line error %v does not name line 5 and the reason", err)
	}
}

// TestStreamContextLength: Stream applies the stage's too-long check where the context window is known.
func TestStreamContextLength(t *testing.T) {
	m, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id": "a", "messages": [{"role": "user", "content": "Hello there"}]}` + "\n"
	var out bytes.Buffer
	err = Stream(strings.NewReader(in), &out, m, Options{ContextLength: 5})
	if err == nil || !strings.Contains(err.Error(), "stdin line 1") || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("a conversation over the context window: %v", err)
	}
}
