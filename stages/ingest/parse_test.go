package ingest

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/draftflow/draftflow/topics"
)

func mustParse(t *testing.T, line string) topics.Prompt {
	t.Helper()
	p, err := Parse("in.jsonl", 7, []byte(line), "ds")
	if err != nil {
		t.Fatalf("Parse(%s): %v", line, err)
	}
	return p
}

func TestParseFormats(t *testing.T) {
	cases := []struct {
		name  string
		line  string
		id    string
		msgs  []topics.Message
		tools string
		turn  int
	}{
		{
			name: "messages with string id",
			line: `{"id": "a-1", "messages": [{"role": "user", "content": "hi"}]}`,
			id:   "a-1",
			msgs: []topics.Message{{Role: "user", Content: "hi"}},
		},
		{
			name: "conversations with numeric id",
			line: `{"id": 42, "conversations": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]}`,
			id:   "42",
			msgs: []topics.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "q"}},
		},
		{
			name: "sharegpt from/value",
			line: `{"id": "s", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2"}]}`,
			id:   "s",
			msgs: []topics.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "q1"},
				{Role: "assistant", Content: "a1"}, {Role: "user", Content: "q2"}},
			turn: 1,
		},
		{
			name: "content parts joined",
			line: `{"id": "p", "messages": [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}, "three"]}]}`,
			id:   "p",
			msgs: []topics.Message{{Role: "user", Content: "one\ntwo\nthree",
				ContentParts: json.RawMessage(`[{"type":"text","text":"one"},{"type":"text","text":"two"},"three"]`)}},
		},
		{
			name: "tools, tool calls, tool results, reasoning kept in the prompt",
			line: `{"id": "t", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": [` +
				`{"role": "user", "content": "q"},` +
				`{"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": 2}}}]},` +
				`{"role": "tool", "tool_call_id": "c1", "name": "f", "content": "42"},` +
				`{"role": "assistant", "content": "done"},` +
				`{"role": "user", "content": "more"},` +
				`{"role": "assistant", "content": "dropped"}]}`,
			id: "t",
			msgs: []topics.Message{{Role: "user", Content: "q"},
				{Role: "assistant", ContentNull: true, ReasoningContent: "think", ToolCalls: json.RawMessage(`[{"id":"c1","type":"function","function":{"name":"f","arguments":{"b":1,"a":2}}}]`)},
				{Role: "tool", Content: "42", ToolCallID: "c1", Name: "f"},
				{Role: "assistant", Content: "done"},
				{Role: "user", Content: "more"}},
			tools: `[{"type":"function","function":{"name":"f"}}]`,
			turn:  2,
		},
		{
			name: "sharegpt function_call and observation, tools as a JSON string",
			line: `{"id": "g", "tools": "[{\"name\": \"conv\"}]", "conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{\"name\": \"conv\", \"arguments\": {\"x\": 1}}"}, {"from": "observation", "value": "{\"y\": 2}"}, {"from": "gpt", "value": "y is 2"}, {"from": "human", "value": "thanks"}]}`,
			id:   "g",
			msgs: []topics.Message{{Role: "user", Content: "q"},
				{Role: "assistant", ToolCalls: json.RawMessage(`[{"type":"function","function":{"name":"conv","arguments":{"x": 1}}}]`)},
				{Role: "tool", Content: `{"y": 2}`},
				{Role: "assistant", Content: "y is 2"},
				{Role: "user", Content: "thanks"}},
			tools: `[{"name":"conv"}]`,
			turn:  2,
		},
		{
			name: "role aliases and case",
			line: `{"id": "r", "messages": [{"role": "Developer", "content": "d"}, {"role": "HUMAN", "content": "u"}]}`,
			id:   "r",
			msgs: []topics.Message{{Role: "system", Content: "d"}, {Role: "user", Content: "u"}},
		},
		{
			name: "messages as a JSON string, null id, trailing whitespace",
			line: `{"id": null, "messages": "[{\"role\": \"user\", \"content\": \"x\"}]"}` + "  \t",
			id:   ContentID([]topics.Message{{Role: "user", Content: "x"}}, nil),
			msgs: []topics.Message{{Role: "user", Content: "x"}},
		},
		{
			name: "unicode and escapes",
			line: `{"id": "u", "messages": [{"role": "user", "content": "日本語 🚀 \u00e9 \n\t\"q\" \ud83d\ude80 \\ud800"}]}`,
			id:   "u",
			msgs: []topics.Message{{Role: "user", Content: "日本語 🚀 é \n\t\"q\" 🚀 \\ud800"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustParse(t, c.line)
			if p.ID != c.id {
				t.Errorf("id %q, want %q", p.ID, c.id)
			}
			if p.Dataset != "ds" || p.Source != (topics.Source{File: "in.jsonl", Line: 7}) {
				t.Errorf("dataset %q source %+v", p.Dataset, p.Source)
			}
			if p.Turn != c.turn {
				t.Errorf("turn %d, want %d", p.Turn, c.turn)
			}
			if len(p.Messages) != len(c.msgs) {
				t.Fatalf("%d messages, want %d: %+v", len(p.Messages), len(c.msgs), p.Messages)
			}
			for i := range c.msgs {
				got, want := p.Messages[i], c.msgs[i]
				if !jsonEqual(got.ToolCalls, want.ToolCalls) {
					t.Errorf("message %d tool_calls %s, want %s", i, got.ToolCalls, want.ToolCalls)
				}
				got.ToolCalls, want.ToolCalls = nil, nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("message %d = %+v, want %+v", i, got, want)
				}
			}
			if !jsonEqual(p.Tools, json.RawMessage(c.tools)) {
				t.Errorf("tools %s, want %s", p.Tools, c.tools)
			}
		})
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Tool-call arguments keep their key order: chat templates render them as given.
func TestParseKeepsToolCallKeyOrder(t *testing.T) {
	p := mustParse(t, `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"zeta": 1, "alpha": 2}}}]}, {"role": "user", "content": "q2"}]}`)
	if got := string(p.Messages[1].ToolCalls); !strings.Contains(got, `{"zeta":1,"alpha":2}`) {
		t.Fatalf("tool_calls %s lost key order", got)
	}
}

func TestContentIDStability(t *testing.T) {
	base := `{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}`
	id := mustParse(t, base).ID
	if !strings.HasPrefix(id, HashIDPrefix) || len(id) != len(HashIDPrefix)+24 {
		t.Fatalf("content id %q: want %s + 24 hex digits", id, HashIDPrefix)
	}
	same := []string{
		// whitespace, field order and field name variants of the same conversation
		`{"conversations":[{"content":"s","role":"system"},{"content":"hello","role":"user"},{"content":"hi","role":"assistant"}]}`,
		`{"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]}`,
		`{"id": "", "messages": [{"role": "system", "content": [{"type": "text", "text": "s"}]}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi", "reasoning_content": null}]}`,
	}
	for _, line := range same {
		for _, ds := range []string{"a", "b"} {
			p, err := Parse("other.jsonl", 99, []byte(line), ds)
			if err != nil {
				t.Fatal(err)
			}
			if p.ID != id {
				t.Errorf("%s (dataset %s): id %s, want %s", line, ds, p.ID, id)
			}
		}
	}
	// The id covers the whole conversation, not just the prompt, and every field of a message.
	different := []string{
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "HI"}]}`,
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]}`,
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello "}, {"role": "assistant", "content": "hi"}]}`,
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi", "reasoning_content": "r"}]}`,
		`{"tools": [{"name": "f"}], "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}`,
	}
	seen := map[string]string{id: base}
	for _, line := range different {
		p := mustParse(t, line)
		if prev, dup := seen[p.ID]; dup {
			t.Errorf("%s and %s share id %s", line, prev, p.ID)
		}
		seen[p.ID] = line
	}
	// JSON key order inside tool calls and tools does not change the id.
	a := mustParse(t, `{"tools": [{"a": 1, "b": 2}], "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1, "y": 2}}}]}, {"role": "user", "content": "q"}]}`)
	b := mustParse(t, `{"tools": [{"b": 2, "a": 1}], "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"function": {"arguments": {"y": 2, "x": 1}, "name": "f"}}]}, {"role": "user", "content": "q"}]}`)
	if a.ID != b.ID {
		t.Errorf("key order changed the id: %s vs %s", a.ID, b.ID)
	}
	// Pinned: the id is part of the data contract (resume and dedup across versions rely on it).
	if got := ContentID([]topics.Message{{Role: "user", Content: "hello"}}, nil); got != "h-"+pinnedHelloID {
		t.Errorf("ContentID changed: %s; the id scheme is a contract, bump its version deliberately", got)
	}
}

// pinnedHelloID is ContentID of a single user message "hello" (without the prefix).
const pinnedHelloID = "86c9dcad1ff17973e7396ada"

func TestParseTruncatesAtLastUserMessage(t *testing.T) {
	p := mustParse(t, `{"messages": [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}, {"role": "user", "content": "3"}, {"role": "assistant", "content": "4"}, {"role": "tool", "content": "5"}, {"role": "assistant", "content": "6"}]}`)
	var got []string
	for _, m := range p.Messages {
		got = append(got, m.Content)
	}
	if strings.Join(got, ",") != "1,2,3" || p.Turn != 1 {
		t.Fatalf("prompt %v turn %d, want [1 2 3] turn 1", got, p.Turn)
	}
	if cap(p.Messages) != len(p.Messages) {
		t.Fatal("prompt slice shares capacity with the dropped messages")
	}
}

func TestParseRejections(t *testing.T) {
	cases := []struct {
		line   string
		reason Reason
		detail string
	}{
		{`{"messages": [{"role": "user", "content": "x"}`, ReasonInvalidJSON, "invalid JSON at byte"},
		{`not json`, ReasonInvalidJSON, "invalid JSON"},
		{`[1, 2]`, ReasonInvalidJSON, "a JSON list, want an object"},
		{"   ", ReasonInvalidJSON, "empty line"},
		{"{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}", ReasonInvalidUTF8, "invalid UTF-8 at byte 46"},
		{`{"messages": [{"role": "user", "content": "a \ud83d b"}]}`, ReasonInvalidUTF8, `lone UTF-16 surrogate escape \ud83d at byte 45`},
		{`{"messages": [{"role": "user", "content": "\\ \udc00"}]}`, ReasonInvalidUTF8, `escape \udc00`},
		{`{"messages": [{"role": "wizard", "content": "x"}]}`, ReasonUnknownRole, `unknown role "wizard" in messages[0]`},
		{`{"conversations": [{"from": "human", "value": "x"}, {"from": "bot?", "value": "y"}]}`, ReasonUnknownRole, `unknown role "bot?" in conversations[1]`},
		{`{"messages": [{"content": "x"}]}`, ReasonUnknownRole, "messages[0] has no role"},
		{`{"messages": []}`, ReasonEmptyConversation, `"messages" has no messages`},
		{`{"id": 1}`, ReasonEmptyConversation, `no "messages" or "conversations"`},
		{`{"messages": null, "conversations": null}`, ReasonEmptyConversation, "empty conversation"},
		{`{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}`, ReasonNoUserMessage, "no user message among the 2 messages"},
		{`{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, ReasonUnsupportedContent, `messages[0].content[0] is a content part of type "image_url"`},
		{`{"messages": [{"role": "user", "content": 5}]}`, ReasonBadField, "messages[0].content is a number"},
		{`{"messages": [{"role": 3, "content": "x"}]}`, ReasonBadField, "messages[0].role is a number, want a string"},
		{`{"messages": ["hello"]}`, ReasonBadField, "messages[0] is a string, want a message object"},
		{`{"messages": {"role": "user"}}`, ReasonBadField, `"messages" is a object`},
		{`{"messages": "not json"}`, ReasonBadField, "does not hold JSON"},
		{`{"messages": [{"role": "user", "content": "x", "tool_calls": 5}]}`, ReasonBadField, "tool_calls is a number"},
		{`{"messages": [{"role": "user", "content": "x", "tool_calls": [1]}]}`, ReasonBadField, "tool_calls[0] is a number"},
		{`{"messages": [{"role": "user", "content": "x", "reasoning_content": 1}]}`, ReasonBadField, "reasoning_content is a number"},
		{`{"tools": {"a": 1}, "messages": [{"role": "user", "content": "x"}]}`, ReasonBadField, `"tools" is a object`},
		{`{"tools": [1], "messages": [{"role": "user", "content": "x"}]}`, ReasonBadField, "tools[0] is a number"},
		{`{"id": true, "messages": [{"role": "user", "content": "x"}]}`, ReasonBadField, `"id" is a boolean`},
		{`{"id": "` + strings.Repeat("x", MaxIDBytes+1) + `", "messages": [{"role": "user", "content": "x"}]}`, ReasonBadField, "byte limit"},
	}
	for _, c := range cases {
		_, err := Parse("bad.jsonl", 3, []byte(c.line), "ds")
		if err == nil {
			t.Errorf("%s: accepted, want %s", c.line, c.reason)
			continue
		}
		if ReasonOf(err) != c.reason || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("%s:\n got  %s: %v\n want %s: ...%s...", c.line, ReasonOf(err), err, c.reason, c.detail)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"id": "a", "messages": [{"role": "user", "content": "hi"}]}`,
		`{"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{\"name\": \"f\"}"}]}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}, {"role": "assistant", "tool_calls": [{}]}], "tools": "[{}]"}`,
		`{"id": -1.5e3, "messages": "[{\"role\": \"user\", \"content\": null}]"}`,
		"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
		`[]`, `{}`, `{"messages": [null]}`,
		// Rows of token ids are not conversations: Parse refuses them (FuzzParseRows reads them).
		`{"id": "r", "input_ids": [1, 2], "output_ids": [3]}`, `{"input_ids": [1, 2], "loss_mask": [0, 1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.jsonl", 1, data, "fz")
		if err != nil {
			var le *LineError
			if ReasonOf(err) == "" || !errors.As(err, &le) || le.Detail == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		// Valid output invariants.
		if p.ID == "" || len(p.ID) > MaxIDBytes || !utf8.ValidString(p.ID) {
			t.Fatalf("bad id %q", p.ID)
		}
		if len(p.Messages) == 0 || p.Messages[len(p.Messages)-1].Role != "user" {
			t.Fatalf("prompt does not end with a user message: %+v", p.Messages)
		}
		turns := 0
		for _, m := range p.Messages {
			switch m.Role {
			case "system", "user", "assistant", "tool":
			default:
				t.Fatalf("role %q escaped normalisation", m.Role)
			}
			if m.Role == "assistant" {
				turns++
			}
			if !utf8.ValidString(m.Content) || !utf8.ValidString(m.ReasoningContent) {
				t.Fatal("invalid UTF-8 in output")
			}
			if m.ToolCalls != nil && (!json.Valid(m.ToolCalls) || m.ToolCalls[0] != '[') {
				t.Fatalf("tool_calls %q is not a JSON list", m.ToolCalls)
			}
		}
		if turns != p.Turn {
			t.Fatalf("turn %d, %d assistant messages", p.Turn, turns)
		}
		if p.Tools != nil && (!json.Valid(p.Tools) || p.Tools[0] != '[') {
			t.Fatalf("tools %q is not a JSON list", p.Tools)
		}
		// Deterministic, and the record survives the wire codec.
		q, err := Parse("g.jsonl", 2, data, "other")
		if err != nil || q.ID != p.ID || !reflect.DeepEqual(q.Messages, p.Messages) {
			t.Fatalf("second parse differs: %v", err)
		}
		enc, err := topics.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		var back topics.Prompt
		if err := topics.Unmarshal(enc, &back); err != nil || back.ID != p.ID || len(back.Messages) != len(p.Messages) {
			t.Fatalf("codec round trip: %v", err)
		}
	})
}

func TestParseAllSplitsAtTheFirstTurn(t *testing.T) {
	for _, c := range []struct {
		name, line string
		msgs, rest []string // roles
		turn       int
		last       []string // LastTurn's roles
	}{
		{"chat", `{"id":"a","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"},{"role":"assistant","content":"a2"}]}`,
			[]string{"system", "user"}, []string{"assistant", "user", "assistant"}, 0, []string{"system", "user", "assistant", "user"}},
		{"tools", `{"id":"b","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"1"},{"role":"assistant","content":"done"}]}`,
			[]string{"user"}, []string{"assistant", "tool", "assistant"}, 0, []string{"user"}},
		{"greeting first", `{"id":"c","messages":[{"role":"assistant","content":"hi"},{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`,
			[]string{"assistant", "user"}, []string{"assistant"}, 1, []string{"assistant", "user"}},
		{"ends with user", `{"id":"d","messages":[{"role":"user","content":"q"}]}`,
			[]string{"user"}, nil, 0, []string{"user"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseAll("f", 1, []byte(c.line), "ds")
			if err != nil {
				t.Fatal(err)
			}
			roles := func(ms []topics.Message) []string {
				var r []string
				for _, m := range ms {
					r = append(r, m.Role)
				}
				return r
			}
			if !slices.Equal(roles(p.Messages), c.msgs) || !slices.Equal(roles(p.Rest), c.rest) || p.Turn != c.turn {
				t.Fatalf("ParseAll: messages %v rest %v turn %d, want %v %v %d", roles(p.Messages), roles(p.Rest), p.Turn, c.msgs, c.rest, c.turn)
			}
			last, err := Parse("f", 1, []byte(c.line), "ds")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(roles(last.Messages), c.last) || len(last.Rest) != 0 || !reflect.DeepEqual(LastTurn(p), last) {
				t.Fatalf("Parse: %v, want %v; LastTurn(ParseAll) = %+v", roles(last.Messages), c.last, LastTurn(p))
			}
		})
	}
}
