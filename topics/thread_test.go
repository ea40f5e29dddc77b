package topics

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func msg(role, content string) Message { return Message{Role: role, Content: content} }

func TestNextBuildsTheFollowingTurn(t *testing.T) {
	t.Parallel()
	call := json.RawMessage(`[{"id":"c1","type":"function","function":{"name":"f","arguments":{"x":1}}}]`)
	original := Message{Role: "assistant", ToolCalls: call}
	result := Message{Role: "tool", Content: "42", ToolCallID: "c1"}
	final := msg("assistant", "it is 42")
	g := Generation{
		ID: "c", Dataset: "d", Turn: 0, StopReason: StopContinued,
		Sampling: Sampling{MaxNewTokens: 9, TemplateKwargs: map[string]any{"enable_thinking": false}},
		Source:   Source{File: "f.jsonl", Line: 3},
		Meta:     GenerationMeta{Endpoint: "http://a"},
		Thread: &Thread{
			Messages: []Message{msg("system", "s"), msg("user", "q")},
			Tools:    json.RawMessage(`[{"type":"function"}]`),
			Rest:     []Message{original, result, final, msg("user", "thanks"), msg("assistant", "bye")},
		},
		Reply: &Message{Role: "assistant", ReasoningContent: "think", ToolCalls: call},
	}
	p, ok := g.Next()
	if !ok {
		t.Fatal("Next reported no next turn")
	}
	want := Prompt{
		ID: "c", Dataset: "d", Turn: 1,
		Messages: []Message{msg("system", "s"), msg("user", "q"), *g.Reply, result},
		Tools:    g.Thread.Tools, Sampling: g.Sampling, Source: g.Source, Endpoint: "http://a", Continuation: true,
		Rest: []Message{final, msg("user", "thanks"), msg("assistant", "bye")},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("Next:\n got  %+v\n want %+v", p, want)
	}
	// The thread's own history is not aliased: appending to the next prompt leaves g alone.
	p.Messages[0].Content = "changed"
	if g.Thread.Messages[0].Content != "s" {
		t.Fatal("Next aliases the thread's messages")
	}

	// Turn 1 generated from p: its next turn is the user's "thanks", with no rest after "bye".
	g2 := Generation{ID: "c", Turn: 1, StopReason: StopContinued, Reply: &Message{Role: "assistant", Content: "42!"},
		Thread: &Thread{Messages: p.Messages, Rest: p.Rest}}
	p2, ok := g2.Next()
	if !ok || p2.Turn != 2 || len(p2.Rest) != 1 || p2.Messages[len(p2.Messages)-1].Content != "thanks" {
		t.Fatalf("second Next = %+v, %v", p2, ok)
	}
	g3 := Generation{ID: "c", Turn: 2, StopReason: StopContinued, Reply: &Message{Role: "assistant", Content: "bye!"},
		Thread: &Thread{Messages: p2.Messages, Rest: p2.Rest}}
	if g3.Thread.HasNext() {
		t.Fatal("HasNext on the last turn")
	}
	if _, ok := g3.Next(); ok {
		t.Fatal("Next after the last assistant message")
	}
}

func TestNextOnlyWhenContinued(t *testing.T) {
	t.Parallel()
	th := &Thread{Messages: []Message{msg("user", "q")}, Rest: []Message{msg("assistant", "a"), msg("user", "q2")}}
	for _, r := range []string{"", StopEnd, StopToolDivergence, StopLength, StopParseError} {
		g := Generation{ID: "c", StopReason: r, Thread: th, Reply: &Message{Role: "assistant"}}
		if _, ok := g.Next(); ok {
			t.Fatalf("Next with stop reason %q", r)
		}
	}
	for name, g := range map[string]Generation{
		"no thread": {ID: "c", StopReason: StopContinued, Reply: &Message{Role: "assistant"}},
		"no reply":  {ID: "c", StopReason: StopContinued, Thread: th},
		"nothing to answer": {ID: "c", StopReason: StopContinued, Reply: &Message{Role: "assistant"},
			Thread: &Thread{Rest: []Message{msg("assistant", "a"), msg("assistant", "b")}}},
	} {
		if _, ok := g.Next(); ok {
			t.Fatalf("Next with %s", name)
		}
	}
	if (*Thread)(nil).Original() != nil || th.Original().Content != "a" {
		t.Fatal("Original")
	}
}

func TestThreadFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	th := &Thread{Messages: []Message{msg("user", "q")}, Tools: json.RawMessage(`[]`),
		Rest: []Message{msg("assistant", "a"), msg("user", "q2")}}
	tk := Tokenized{ID: "x", Turn: 1, InputIDs: []uint32{1, 2}, Thread: th, Endpoint: "e",
		Parsers: Parsers{Reasoning: "qwen3", Tools: "qwen25", ReasoningOpen: true}}
	b, err := Marshal(&tk)
	if err != nil {
		t.Fatal(err)
	}
	var tk2 Tokenized
	if err := Unmarshal(b, &tk2); err != nil || !reflect.DeepEqual(tk, tk2) {
		t.Fatalf("Tokenized round trip: %v\n got  %+v\n want %+v", err, tk2, tk)
	}
	g := Generation{ID: "x", Turn: 1, PromptIDs: []uint32{1}, OutputIDs: []uint32{2}, Thread: th,
		Reply: &Message{Role: "assistant", Content: "a"}, StopReason: StopToolDivergence, StopDetail: "called g, not f"}
	b, err = Marshal(&g)
	if err != nil {
		t.Fatal(err)
	}
	var g2 Generation
	if err := Unmarshal(b, &g2); err != nil || !reflect.DeepEqual(g, g2) {
		t.Fatalf("Generation round trip: %v\n got  %+v\n want %+v", err, g2, g)
	}
	// Single-turn records carry none of it on the wire.
	b, _ = Marshal(&Tokenized{ID: "x", InputIDs: []uint32{1}})
	for _, field := range []string{`"thread"`, `"parsers"`, `"endpoint"`} {
		if bytes.Contains(b, []byte(field)) {
			t.Fatalf("single-turn Tokenized carries %s: %q", field, b)
		}
	}
}

// FuzzNext: for any generation decoded from JSON, Next never panics, and when it gives a next turn, that turn
// is the same conversation one turn on, its history starts with the thread's history and the reply, it ends
// with something to answer, and its rest is a suffix of the thread's.
func FuzzNext(f *testing.F) {
	f.Add([]byte(`{"id":"c","turn":0,"stop_reason":"continued","reply":{"role":"assistant","content":"a"},"thread":{"messages":[{"role":"user","content":"q"}],"rest":[{"role":"assistant","content":"o"},{"role":"user","content":"q2"},{"role":"assistant","content":"o2"}]}}`))
	f.Add([]byte(`{"id":"c","turn":3,"stop_reason":"continued","reply":{"role":"assistant"},"thread":{"messages":[],"rest":[{"role":"assistant"},{"role":"tool","content":"r"}]}}`))
	f.Add([]byte(`{"id":"c","stop_reason":"end"}`))
	f.Add([]byte(`{"id":"c","turn":1,"stop_reason":"continued","reply":{"role":"assistant","tool_calls":[{"id":"functions.f:0"}]},"thread":{"messages":[{"role":"user","content":"q"}],"rest":[{"role":"assistant","tool_calls":[{"id":"c1"}]},{"role":"tool","tool_call_id":"c1"},{"role":"tool","tool_call_id":"c2"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var g Generation
		if json.Unmarshal(data, &g) != nil {
			return
		}
		p, ok := g.Next()
		if !ok {
			return
		}
		th := g.Thread
		if p.ID != g.ID || p.Turn != g.Turn+1 || !p.Continuation || len(p.Messages) < len(th.Messages)+2 {
			t.Fatalf("next turn %+v of %+v", p, g)
		}
		if !slices.EqualFunc(p.Messages[:len(th.Messages)], th.Messages, func(a, b Message) bool { return reflect.DeepEqual(a, b) }) || !reflect.DeepEqual(p.Messages[len(th.Messages)], *g.Reply) {
			t.Fatalf("next turn's history does not start with the thread's history and the reply")
		}
		// Then the source messages after the original reply, a tool result's call id at most changed.
		for i, m := range p.Messages[len(th.Messages)+1:] {
			src := th.Rest[1+i]
			if m.Role == "tool" {
				src.ToolCallID = m.ToolCallID
			}
			if !reflect.DeepEqual(m, src) {
				t.Fatalf("next turn's message %d is %+v, the source's %+v", len(th.Messages)+1+i, m, th.Rest[1+i])
			}
		}
		if last := p.Messages[len(p.Messages)-1]; last.Role == "assistant" {
			t.Fatalf("next turn ends with an assistant message: nothing to answer")
		}
		if len(p.Rest) > 0 && (len(p.Rest) >= len(th.Rest) || !reflect.DeepEqual(p.Rest, th.Rest[len(th.Rest)-len(p.Rest):]) || p.Rest[0].Role != "assistant") {
			t.Fatalf("next turn's rest %+v is not a suffix of %+v starting with the next original reply", p.Rest, th.Rest)
		}
	})
}

// A model that writes its own call ids keeps them in the next turn's history, and the source's tool results
// are pointed at them; ids the source gives twice, or a reply without ids, leave the results as they were.
func TestNextRelinksToolResultsToTheReplysCallIDs(t *testing.T) {
	t.Parallel()
	source := Message{Role: "assistant", ToolCalls: json.RawMessage(`[{"id":"c1","function":{"name":"f"}},{"id":7,"function":{"name":"g"}}]`)}
	between := []Message{{Role: "tool", Content: "r1", ToolCallID: "c1"}, {Role: "tool", Content: "r2", ToolCallID: "7"},
		{Role: "tool", Content: "other", ToolCallID: "c9"}, msg("user", "ok?")}
	next := func(src Message, reply string) []Message {
		t.Helper()
		th := &Thread{Messages: []Message{msg("user", "q")}, Rest: append([]Message{src}, append(append([]Message(nil), between...), msg("assistant", "done"))...)}
		g := Generation{ID: "c", StopReason: StopContinued, Thread: th, Reply: &Message{Role: "assistant", ToolCalls: json.RawMessage(reply)}}
		p, ok := g.Next()
		if !ok {
			t.Fatal("no next turn")
		}
		if !reflect.DeepEqual(th.Rest[1:1+len(between)], between) {
			t.Fatal("Next changed the thread's messages")
		}
		return p.Messages[2:]
	}
	ids := func(ms []Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ToolCallID)
		}
		return out
	}
	kimi := `[{"id":"functions.f:0","function":{"name":"f"}},{"id":"functions.g:1","function":{"name":"g"}}]`
	if got, want := ids(next(source, kimi)), []string{"functions.f:0", "functions.g:1", "c9", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("relinked ids %q, want %q", got, want)
	}
	if got, want := ids(next(source, `[{"id":"c1"},{"id":"7"}]`)), []string{"c1", "7", "c9", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("same ids: %q, want %q", got, want)
	}
	if got, want := ids(next(source, `[{"function":{"name":"f"}}]`)), []string{"c1", "7", "c9", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("reply without ids: %q, want %q", got, want)
	}
	twice := Message{Role: "assistant", ToolCalls: json.RawMessage(`[{"id":"c1"},{"id":"c1"}]`)}
	if got, want := ids(next(twice, kimi)), []string{"c1", "7", "c9", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ambiguous source ids: %q, want %q", got, want)
	}
	if got := (&Message{ToolCalls: json.RawMessage(`{"id":"x"}`)}).CallIDs(); got != nil {
		t.Fatalf("CallIDs of a non-list: %q", got)
	}
}
