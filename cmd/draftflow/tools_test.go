package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

func TestEncodeStream(t *testing.T) {
	m, cleanup, err := loadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id": "a", "messages": [{"role": "user", "content": "Hello there"}]}
{"conversations": [{"from": "human", "value": "你好 🚀"}, {"from": "gpt", "value": "dropped"}]}

{"id": 7, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x  123"}]}
`
	var out bytes.Buffer
	if err := encodeStream(strings.NewReader(in), &out, m, map[string]any{"enable_thinking": false}, false); err != nil {
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
	if err := encodeStream(strings.NewReader(`{"text": "plain  text 42"}`+"\n"), &out, m, nil, true); err != nil {
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

	err = encodeStream(strings.NewReader(in+`{"messages": [{"role": "wizard", "content": "x"}]}`+"\n"), &out, m, nil, false)
	if err == nil || !strings.Contains(err.Error(), "stdin line 5") || !strings.Contains(err.Error(), "wizard") {
		t.Fatalf("bad line error %v does not name line 5 and the reason", err)
	}
}
