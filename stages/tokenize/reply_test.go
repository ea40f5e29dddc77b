package tokenize

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/draftflow/draftflow/topics"
)

// Unit tests of EncodeReply on the bundled model (ChatML, reasoning in <think>, Qwen-style tool calls) and on
// small templates that show each refusal; the conformance against transformers is in reply_conformance_test.go.

func userAsk(s string) topics.Message { return topics.Message{Role: "user", Content: s} }

func promptOf(msgs ...topics.Message) *topics.Prompt { return &topics.Prompt{ID: "p", Messages: msgs} }

// checkReplyRow asserts the properties every accepted reply has: the prompt is Encode(p), the output ends
// with its only end-of-turn id and is non-empty before it, and prompt + output is a prefix of the ids of the
// history rendered with the reply.
func checkReplyRow(t *testing.T, m *Model, p *topics.Prompt, reply topics.Message, prompt, output []uint32) {
	t.Helper()
	want, err := m.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prompt, want) {
		t.Fatalf("prompt differs from Encode: %s", firstDiff(want, prompt))
	}
	ends := m.EndOfTurnIDs(p)
	if len(output) < 2 || !slices.Contains(ends, output[len(output)-1]) {
		t.Fatalf("output %v does not end with an end-of-turn id %v after some reply", output, ends)
	}
	if i := slices.IndexFunc(output, func(id uint32) bool { return slices.Contains(ends, id) }); i != len(output)-1 {
		t.Fatalf("output has an end-of-turn id at %d of %d", i, len(output))
	}
	full, err := m.renderReply(p, reply)
	if err != nil {
		t.Fatal(err)
	}
	ids := m.Tokenizer.Encode(full)
	row := slices.Concat(prompt, output)
	if len(ids) < len(row) || !slices.Equal(ids[:len(row)], row) {
		t.Fatalf("prompt + output is not a prefix of the rendering with the reply: %s", firstDiff(ids, row))
	}
}

func wantReplyClass(t *testing.T, err error, class ReplyClass, says ...string) {
	t.Helper()
	var re *ReplyError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T), want a *ReplyError of class %s", err, err, class)
	}
	if re.Class != class {
		t.Fatalf("class %s (%v), want %s", re.Class, err, class)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not say %q", err, s)
		}
	}
}

// The bundled model renders every part of a reply; the output is exactly the reply's markup through
// <|im_end|>, without the "\n" the template writes after it.
func TestEncodeReplyBundled(t *testing.T) {
	m := bundledModel(t)
	imEnd, _ := m.Tokenizer.TokenID("<|im_end|>")
	calls := json.RawMessage(`[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]`)
	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`)
	for _, tc := range []struct {
		name  string
		p     *topics.Prompt
		reply topics.Message
		text  string // the output's text
	}{
		{"content", promptOf(userAsk("Hi")), topics.Message{Role: "assistant", Content: "Hello!"}, "Hello!<|im_end|>"},
		{"reasoning", promptOf(userAsk("2+2?")), topics.Message{Role: "assistant", ReasoningContent: "\nadd\n", Content: "4"},
			"<think>\nadd\n</think>\n\n4<|im_end|>"},
		{"tool call", &topics.Prompt{Messages: []topics.Message{userAsk("Weather?")}, Tools: tools},
			topics.Message{Role: "assistant", ContentNull: true, ToolCalls: calls},
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"},
		{"after a tool result", &topics.Prompt{Tools: tools, Messages: []topics.Message{userAsk("Weather?"),
			{Role: "assistant", ToolCalls: calls}, {Role: "tool", ToolCallID: "c1", Content: "18C"}}},
			topics.Message{Role: "assistant", Content: "18°C."}, "18°C.<|im_end|>"},
		{"later turn", promptOf(userAsk("a"), topics.Message{Role: "assistant", Content: "b"}, userAsk("c")),
			topics.Message{Role: "assistant", Content: "d"}, "d<|im_end|>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt, output, err := m.EncodeReply(tc.p, tc.reply)
			if err != nil {
				t.Fatal(err)
			}
			checkReplyRow(t, m, tc.p, tc.reply, prompt, output)
			if got := m.Tokenizer.Decode(output); got != tc.text {
				t.Fatalf("output %q, want %q", got, tc.text)
			}
			if output[len(output)-1] != imEnd {
				t.Fatalf("output ends with %d, want <|im_end|> %d", output[len(output)-1], imEnd)
			}
		})
	}
}

// Every refusal, each with its class and a reason that says what happened.
func TestEncodeReplyRefusals(t *testing.T) {
	m := bundledModel(t)
	p := promptOf(userAsk("Hi"))
	say := func(s string) topics.Message { return topics.Message{Role: "assistant", Content: s} }
	t.Run("not assistant", func(t *testing.T) {
		_, _, err := m.EncodeReply(p, userAsk("Hello"))
		wantReplyClass(t, err, ReplyNotAssistant, `"user"`)
	})
	for name, r := range map[string]topics.Message{
		"empty": say(""), "blank": say(" \n\t"), "null content": {Role: "assistant", ContentNull: true},
		"empty call list": {Role: "assistant", ToolCalls: json.RawMessage(`[]`)},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := m.EncodeReply(p, r)
			wantReplyClass(t, err, ReplyEmpty, "empty")
		})
	}
	t.Run("merges boundary", func(t *testing.T) {
		// The generation prompt ends "assistant\n"; a reply starting "\n" makes "\n\n" one token.
		_, _, err := m.EncodeReply(p, say("\nHello"))
		wantReplyClass(t, err, ReplyMergesBoundary, "merges")
	})
	t.Run("end of turn inside", func(t *testing.T) {
		_, _, err := m.EncodeReply(p, say("Write <|im_end|> to stop."))
		wantReplyClass(t, err, ReplyEndOfTurnInside, "<|im_end|>", " to stop.")
	})
	t.Run("stop token ids end the turn", func(t *testing.T) {
		// A stop id of the prompt is an end-of-turn id: a reply holding it is cut there, so refused.
		stop, ok := m.Tokenizer.TokenID("<|endoftext|>")
		if !ok {
			t.Fatal("no <|endoftext|>")
		}
		q := promptOf(userAsk("Hi"))
		q.Sampling.StopTokenIDs = []int{int(stop)}
		_, _, err := m.EncodeReply(q, say("a <|endoftext|> b"))
		wantReplyClass(t, err, ReplyEndOfTurnInside, "<|endoftext|>")
		if _, _, err := m.EncodeReply(p, say("a <|endoftext|> b")); err != nil {
			t.Fatalf("without the stop id: %v", err)
		}
	})
	t.Run("no end of turn", func(t *testing.T) {
		mm := *m
		mm.EOSTokenIDs = []uint32{0}
		_, _, err := mm.EncodeReply(p, say("Hello"))
		wantReplyClass(t, err, ReplyNoEndOfTurn, "generation_config.json", "<|im_end|>")
	})
	t.Run("template raises", func(t *testing.T) {
		_, _, err := m.EncodeReply(promptOf(userAsk("a"), topics.Message{Role: "wizard", Content: "b"}), say("c"))
		wantReplyClass(t, err, ReplyTemplate, "Unknown role: wizard")
	})
}

// Templates that do not render a reply whole: each refusal names what is lost or where the renderings part.
func TestEncodeReplyTemplatesThatDoNotExtend(t *testing.T) {
	const (
		head = `{%- for m in messages %}{%- if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n`
		gen  = `{%- endif %}{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n`
	)
	for _, tc := range []struct {
		name, template string
		reply          topics.Message
		class          ReplyClass
		says           []string
	}{
		{
			// DeepSeek-R1's shape: the generation prompt opens <think>, the rendering keeps only the answer.
			name: "drops reasoning",
			template: head + `{%- elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}<|im_end|>\n` +
				gen + `<think>\n{% endif %}`,
			reply: topics.Message{Role: "assistant", ReasoningContent: "think", Content: "answer"},
			class: ReplyDropsReasoning, says: []string{"reasoning_content"},
		},
		{
			name: "drops tool calls",
			template: head + `{%- elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}<|im_end|>\n` +
				gen + `{% endif %}`,
			reply: topics.Message{Role: "assistant", Content: "Checking.",
				ToolCalls: json.RawMessage(`[{"type":"function","function":{"name":"f","arguments":{}}}]`)},
			class: ReplyDropsToolCalls, says: []string{"tool_calls"},
		},
		{
			name: "drops content",
			template: head + `{%- elif m.role == 'assistant' %}<|im_start|>assistant\n` +
				`{%- if m.tool_calls %}{{ m.tool_calls[0].function.name }}{% else %}{{ m.content }}{% endif %}<|im_end|>\n` +
				gen + `{% endif %}`,
			reply: topics.Message{Role: "assistant", Content: "Checking.",
				ToolCalls: json.RawMessage(`[{"type":"function","function":{"name":"f","arguments":{}}}]`)},
			class: ReplyDropsContent, says: []string{"content"},
		},
		{
			// Qwen3 with thinking off: an empty think block in the generation prompt, the reply's own in its rendering.
			name: "rewrites prompt",
			template: head + `{%- elif m.role == 'assistant' %}<|im_start|>assistant\n<think>\n{{ m.reasoning_content }}\n</think>\n\n` +
				`{{ m.content }}<|im_end|>\n` + gen + `<think>\n\n</think>\n\n{% endif %}`,
			reply: topics.Message{Role: "assistant", ReasoningContent: "r", Content: "answer"},
			class: ReplyRewritesPrompt, says: []string{`the prompt has "\n</think>\n\n"`, `the rendering with the reply "r\n</think>`},
		},
		{
			name: "end of turn before the reply",
			template: head + `{%- elif m.role == 'assistant' %}<|im_start|>assistant\n<|im_end|>{{ m.content }}\n` +
				gen + `{% endif %}`,
			reply: topics.Message{Role: "assistant", Content: "late"},
			class: ReplyEndOfTurnInside, says: []string{`"late`},
		},
		{
			// The reply shows only as whitespace after the end-of-turn token: nothing of it is generated.
			name: "end of turn only",
			template: head + `{%- elif m.role == 'assistant' %}<|im_start|>assistant\n<|im_end|>{{ ' ' * (m.content | length) }}\n` +
				gen + `{% endif %}`,
			reply: topics.Message{Role: "assistant", Content: "abc"},
			class: ReplyEmpty, says: []string{"nothing of the reply"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.ReplaceAll(tc.template, `\n`, "\n")
			dir := bundledDir(t, func(dir string) { writeFile(t, filepath.Join(dir, "chat_template.jinja"), src) })
			m, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			p := promptOf(userAsk("Hi"))
			prompt, output, err := m.EncodeReply(p, tc.reply)
			if tc.class == "" {
				if err != nil {
					t.Fatal(err)
				}
				checkReplyRow(t, m, p, tc.reply, prompt, output)
				return
			}
			if prompt != nil || output != nil {
				t.Fatalf("refused reply returned ids: %v, %v", prompt, output)
			}
			wantReplyClass(t, err, tc.class, tc.says...)
		})
	}
}

// FuzzEncodeReply: whatever the conversation, an accepted reply's output holds one end-of-turn id, its
// last, after at least one other id, and prompt + output is a prefix of the ids of the history rendered with
// the reply; a refused one is a *ReplyError with a class and no ids.
func FuzzEncodeReply(f *testing.F) {
	f.Add("Hi", "Hello!", "", false, uint8(0), false, int16(-1))
	f.Add("2+2?", "\n\n4", "\nadd\n", false, uint8(2), true, int16(-1))
	f.Add("Weather?", "", "need a tool", true, uint8(1), false, int16(-1))
	f.Add("x", "a <|im_end|> b", "", false, uint8(0), false, int16(5))
	f.Add("x", "\nleading", "", true, uint8(3), true, int16(0))
	f.Add("", " ", " ", false, uint8(0), false, int16(-1))
	f.Add("é", "<think>x</think>y", "", false, uint8(1), false, int16(100))
	m := func() *Model {
		mm, cleanup, err := LoadModelOrBundled("")
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(cleanup)
		return mm
	}()
	tools := json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)
	f.Fuzz(func(t *testing.T, user, content, reasoning string, call bool, history uint8, thinkingOff bool, stop int16) {
		if !utf8.ValidString(user) || !utf8.ValidString(content) || !utf8.ValidString(reasoning) {
			return // ingest refuses invalid UTF-8
		}
		p := &topics.Prompt{ID: "fuzz", Tools: tools}
		for i := range int(history % 4) {
			p.Messages = append(p.Messages, userAsk(user), topics.Message{Role: "assistant", Content: content[:len(content)*i/4]})
		}
		p.Messages = append(p.Messages, userAsk(user))
		if thinkingOff {
			p.Sampling.TemplateKwargs = map[string]any{"enable_thinking": false}
		}
		if stop >= 0 {
			p.Sampling.StopTokenIDs = []int{int(stop) % m.Tokenizer.VocabSize()}
		}
		reply := topics.Message{Role: "assistant", Content: content, ReasoningContent: reasoning}
		if call {
			reply.ToolCalls = json.RawMessage(`[{"type":"function","function":{"name":"f","arguments":{"q":1}}}]`)
		}
		prompt, output, err := m.EncodeReply(p, reply)
		if err != nil {
			var re *ReplyError
			if !errors.As(err, &re) || re.Class == "" || re.Reason == "" {
				t.Fatalf("error %v (%T) is not a classed *ReplyError", err, err)
			}
			if prompt != nil || output != nil {
				t.Fatalf("refused reply returned ids")
			}
			return
		}
		checkReplyRow(t, m, p, reply, prompt, output)
	})
}
