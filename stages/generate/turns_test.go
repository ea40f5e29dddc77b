package generate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

// TestConcludeTurns: how a generated turn of a multi-turn conversation bears on it, from the server's text.
func TestConcludeTurns(t *testing.T) {
	call := json.RawMessage(`[{"id":"call_7","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 2}"}}]`)
	toolThread := &topics.Thread{
		Messages: []topics.Message{{Role: "user", Content: "weather?"}},
		Tools:    json.RawMessage(`[{"type":"function","function":{"name":"get_weather","parameters":{}}}]`),
		Rest: []topics.Message{{Role: "assistant", ToolCalls: call}, {Role: "tool", ToolCallID: "call_7", Content: "sunny"},
			{Role: "assistant", Content: "Sunny."}},
	}
	chatThread := &topics.Thread{
		Messages: []topics.Message{{Role: "user", Content: "hi"}},
		Rest:     []topics.Message{{Role: "assistant", Content: "hello"}, {Role: "user", Content: "bye"}},
	}
	lastThread := &topics.Thread{
		Messages: []topics.Message{{Role: "user", Content: "hi"}},
		Rest:     []topics.Message{{Role: "assistant", Content: "hello"}},
	}
	qwen := topics.Parsers{Reasoning: "qwen3", Tools: "qwen25"}
	for _, c := range []struct {
		name    string
		thread  *topics.Thread
		parsers topics.Parsers
		finish  string
		text    string
		want    string
		check   func(t *testing.T, g *topics.Generation)
	}{
		{"single turn", nil, qwen, "stop", "anything", topics.StopEnd, func(t *testing.T, g *topics.Generation) {
			if g.Reply != nil || g.Thread != nil {
				t.Fatal("a single turn carries a reply or a thread")
			}
		}},
		{"chat continues", chatThread, qwen, "stop", "<think>\nhm\n</think>\n\nHello there", topics.StopContinued, func(t *testing.T, g *topics.Generation) {
			if strings.TrimSpace(g.Reply.Content) != "Hello there" || strings.TrimSpace(g.Reply.ReasoningContent) != "hm" || g.Reply.Role != "assistant" {
				t.Fatalf("reply %+v", g.Reply)
			}
			next, ok := g.Next()
			if !ok || next.Turn != 1 || next.Messages[1].Content != g.Reply.Content || next.Messages[2].Content != "bye" {
				t.Fatalf("next %+v %v", next, ok)
			}
		}},
		{"same call, keys reordered, continues with the source's call id", toolThread, qwen, "stop",
			"<think>\nlook it up\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2.0, \"city\": \"Paris\"}}\n</tool_call>",
			topics.StopContinued, func(t *testing.T, g *topics.Generation) {
				var calls []struct {
					ID       string `json:"id"`
					Function struct{ Name string }
				}
				if err := json.Unmarshal(g.Reply.ToolCalls, &calls); err != nil || len(calls) != 1 || calls[0].ID != "call_7" || calls[0].Function.Name != "get_weather" {
					t.Fatalf("reply tool calls %s (%v)", g.Reply.ToolCalls, err)
				}
				next, _ := g.Next()
				if last := next.Messages[len(next.Messages)-1]; last.Role != "tool" || last.ToolCallID != "call_7" {
					t.Fatalf("next turn does not end with the source's tool result: %+v", last)
				}
			}},
		{"other arguments diverge", toolThread, qwen, "stop",
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 2}}\n</tool_call>",
			topics.StopToolDivergence, func(t *testing.T, g *topics.Generation) {
				if !strings.Contains(g.StopDetail, "Rome") || g.Reply == nil {
					t.Fatalf("detail %q, reply %+v", g.StopDetail, g.Reply)
				}
			}},
		{"no call where the source called diverges", toolThread, qwen, "stop", "It is probably sunny.", topics.StopToolDivergence, nil},
		{"a call where the source had none diverges", chatThread, qwen, "stop",
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", topics.StopToolDivergence, nil},
		{"malformed call", toolThread, qwen, "stop", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\n</tool_call>", topics.StopParseError, func(t *testing.T, g *topics.Generation) {
			if g.StopDetail == "" {
				t.Fatal("no detail")
			}
		}},
		{"cut at max_new_tokens", chatThread, qwen, "length", "<think>\nstill thinking", topics.StopLength, nil},
		{"last turn ends", lastThread, qwen, "stop", "hello!", topics.StopEnd, func(t *testing.T, g *topics.Generation) {
			if g.Reply == nil || g.Reply.Content != "hello!" {
				t.Fatalf("reply %+v", g.Reply)
			}
		}},
		{"kimi section", toolThread, topics.Parsers{Reasoning: "kimi_k2", Tools: "kimi_k2"}, "stop",
			"<think>ok</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\":\"Paris\",\"days\":2}<|tool_call_end|><|tool_calls_section_end|>",
			topics.StopContinued, func(t *testing.T, g *topics.Generation) {
				// The history keeps the id the model wrote, and the source's result (for call_7) answers it.
				if ids := g.Reply.CallIDs(); len(ids) != 1 || ids[0] != "functions.get_weather:0" {
					t.Fatalf("reply call ids %q", ids)
				}
				next, _ := g.Next()
				if last := next.Messages[len(next.Messages)-1]; last.Role != "tool" || last.ToolCallID != "functions.get_weather:0" {
					t.Fatalf("next turn's tool result does not answer the model's call: %+v", last)
				}
				if toolThread.Rest[1].ToolCallID != "call_7" {
					t.Fatal("Next changed the thread")
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk := &topics.Tokenized{ID: "c", Turn: 0, Thread: c.thread, Parsers: c.parsers, InputIDs: []uint32{1}}
			g := &topics.Generation{ID: "c", OutputIDs: []uint32{1, 2}, Meta: topics.GenerationMeta{FinishReason: c.finish}}
			conclude(tk, g, c.text)
			if g.StopReason != c.want {
				t.Fatalf("stop reason %q (%s), want %q", g.StopReason, g.StopDetail, c.want)
			}
			if c.check != nil {
				c.check(t, g)
			}
		})
	}
}
