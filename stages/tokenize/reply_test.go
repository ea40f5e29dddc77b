package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/topics"
)

// Unit tests of EncodeReply on the bundled model (ChatML, reasoning in <think>, Qwen-style tool calls) and on
// small templates that show each refusal; the conformance against transformers follows them.

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

// Conformance of EncodeReply with transformers. For every model family the reference tests cover, every
// assistant turn of the conversation corpora (the chat template corpus, the Kimi corpus, testdata's reply
// conversations and the sample dataset, parsed by ingest) is a Prompt of the messages before it and that
// reply. transformers renders, with the pinned release, the history with the generation prompt, the history
// with the reply (add_generation_prompt=False), and the history with the reply less each of its parts; from
// those renders and their ids alone the test derives each turn's expected result (replyExpect) and requires
// EncodeReply to give it: the same prompt and output ids, or a refusal of the same class.

// replyConv is one conversation of the corpus.
type replyConv struct {
	id     string
	msgs   []topics.Message
	tools  json.RawMessage
	kwargs map[string]any
}

// replyTurn is one assistant turn: the Prompt ingest makes of the messages before it, and the reply.
type replyTurn struct {
	id     string
	conv   string
	prompt topics.Prompt
	reply  topics.Message
}

// replyCorpus reads the conversations: the corpora as kimiCases reads them plus testdata/reply_conversations.jsonl,
// and the valid lines of the sample dataset as ingest parses them.
func replyCorpus(t testing.TB) []replyConv {
	t.Helper()
	cases := kimiCases(t)
	data, err := os.ReadFile("testdata/reply_conversations.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c kimiCase
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("reply_conversations.jsonl: %v", err)
		}
		cases = append(cases, c)
	}
	var out []replyConv
	for _, c := range cases {
		conv := replyConv{id: c.ID, tools: c.Tools}
		for _, raw := range c.Messages {
			var m topics.Message
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("%s: %v", c.ID, err)
			}
			conv.msgs = append(conv.msgs, m)
		}
		if len(c.Kwargs) > 0 {
			if err := json.Unmarshal(c.Kwargs, &conv.kwargs); err != nil {
				t.Fatalf("%s: %v", c.ID, err)
			}
		}
		out = append(out, conv)
	}
	const sample = "../../testdata/sample/conversations.jsonl"
	f, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range bytes.Split(f, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		p, err := ingest.ParseAll(sample, int64(i+1), line, "sample")
		if err != nil {
			continue // the deliberately malformed lines
		}
		out = append(out, replyConv{id: fmt.Sprintf("sample:%d", i+1), msgs: slices.Concat(p.Messages, p.Rest), tools: p.Tools})
	}
	return out
}

// replyTurns makes a turn of every assistant message that follows a user message, with the family's template
// kwargs under the conversation's own.
func replyTurns(convs []replyConv, kwargs map[string]any) []replyTurn {
	var out []replyTurn
	for _, c := range convs {
		kw := maps.Clone(kwargs)
		if len(c.kwargs) > 0 {
			if kw == nil {
				kw = map[string]any{}
			}
			maps.Copy(kw, c.kwargs)
		}
		for i, m := range c.msgs {
			if m.Role != "assistant" || !slices.ContainsFunc(c.msgs[:i], func(m topics.Message) bool { return m.Role == "user" }) {
				continue
			}
			out = append(out, replyTurn{id: fmt.Sprintf("%s/%d", c.id, i), conv: c.id, reply: m, prompt: topics.Prompt{
				ID: c.id, Dataset: "reply", Messages: c.msgs[:i:i], Tools: c.tools, Sampling: topics.Sampling{TemplateKwargs: kw}}})
		}
	}
	return out
}

// replyCases are a turn's reference requests: id|prompt (the history, add_generation_prompt=True), id|full
// (the history with the reply, False), and id|without-<part> for each part the reply has.
func replyCases(t *testing.T, tr replyTurn) []kimiCase {
	t.Helper()
	enc := func(id string, msgs []topics.Message, agp bool) kimiCase {
		c := kimiCase{ID: id, Tools: tr.prompt.Tools, AddGenerationPrompt: &agp}
		for _, m := range msgs {
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			c.Messages = append(c.Messages, b)
		}
		if kw := tr.prompt.Sampling.TemplateKwargs; len(kw) > 0 {
			b, err := json.Marshal(kw)
			if err != nil {
				t.Fatal(err)
			}
			c.Kwargs = b
		}
		return c
	}
	hist := tr.prompt.Messages
	out := []kimiCase{enc(tr.id+"|prompt", hist, true), enc(tr.id+"|full", append(slices.Clip(hist), tr.reply), false)}
	for _, part := range replyParts(tr.reply) {
		out = append(out, enc(tr.id+"|without-"+part.name, append(slices.Clip(hist), part.remove(tr.reply)), false))
	}
	return out
}

// replyExpect is a turn's expected result, from transformers' renders and ids: the class of the refusal
// ("" when accepted) and, when accepted, the prompt and output ids. ids picks a result's ids (the tokenizers
// library's on tokenizer.json where the family's transformers loads the file otherwise); decode decodes ids.
func replyExpect(tr replyTurn, ref map[string]turnsRef, ends []uint32, ids func(turnsRef) []uint32,
	decode func([]uint32) string) (class ReplyClass, prompt, output []uint32) {
	parts := replyParts(tr.reply)
	switch {
	case tr.reply.Role != "assistant":
		return ReplyNotAssistant, nil, nil
	case len(parts) == 0:
		return ReplyEmpty, nil, nil
	}
	p, full := ref[tr.id+"|prompt"], ref[tr.id+"|full"]
	if p.Error != "" || full.Error != "" {
		return ReplyTemplate, nil, nil
	}
	for _, part := range parts {
		if w := ref[tr.id+"|without-"+part.name]; w.Error == "" && *w.Text == *full.Text {
			return part.class, nil, nil
		}
	}
	if !strings.HasPrefix(*full.Text, *p.Text) {
		return ReplyRewritesPrompt, nil, nil
	}
	prompt, all := ids(p), ids(full)
	if len(all) < len(prompt) || !slices.Equal(all[:len(prompt)], prompt) {
		return ReplyMergesBoundary, nil, nil
	}
	output = all[len(prompt):]
	end := slices.IndexFunc(output, func(id uint32) bool { return slices.Contains(ends, id) })
	switch {
	case end < 0:
		return ReplyNoEndOfTurn, nil, nil
	case strings.TrimSpace(decode(output[end+1:])) != "":
		return ReplyEndOfTurnInside, nil, nil
	case end == 0:
		return ReplyEmpty, nil, nil
	}
	return "", prompt, output[:end+1]
}

// replyFamily is one model configuration: its directory, template kwargs, and the known result of each turn
// of testdata/reply_conversations.jsonl that it refuses (every other turn of that file is accepted).
type replyFamily struct {
	name string
	dir  func(t *testing.T) string
	kimi bool
	// hfQuirk: the pinned transformers' own ids differ from tokenizer.json's (TestTurnsMatchTransformers).
	hfQuirk bool
	// clock: the template prints today's date (strftime_now); the reference renders today too.
	clock   bool
	kwargs  map[string]any
	refuses map[string]ReplyClass
}

// withGenerationConfig returns a copy of a model directory with a generation_config.json whose eos_token_id
// is ids, as the model's own repository ships it: the token a server stops a turn on.
func withGenerationConfig(t *testing.T, src string, ids ...uint32) string {
	t.Helper()
	dir := copyDir(t, src)
	b, _ := json.Marshal(map[string]any{"eos_token_id": ids})
	writeFile(t, filepath.Join(dir, "generation_config.json"), string(b))
	return dir
}

// gptOSSDir is the gpt-oss tokenizer with gpt-oss-20b's chat template (testdata/wild) and the end ids gpt-oss's
// generation_config.json lists: <|return|>, <|endoftext|> and <|call|>, which ends a turn that calls a tool.
func gptOSSDir(t *testing.T) string {
	t.Helper()
	dir := withGenerationConfig(t, lenmlDir("gptoss")(t), 200002, 199999, 200012)
	tmpl, err := os.ReadFile("chattemplate/testdata/wild/gpt-oss-20b-Q8_0.jinja")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "chat_template.jinja"), string(tmpl))
	return dir
}

// refusals builds a family's known refusals among the turns of reply_conversations.jsonl: the ones every family
// refuses (the two empty replies; a reply whose text holds the end-of-turn token's text, which the tokenizer
// reads as that token, as transformers does) and, per class, the family's own (turn ids, space-separated).
func refusals(own map[ReplyClass]string) map[string]ReplyClass {
	out := map[string]ReplyClass{"r_empty_replies/1": ReplyEmpty, "r_empty_replies/3": ReplyEmpty, "r_end_token_text/1": ReplyEndOfTurnInside}
	for class, ids := range own {
		for _, id := range strings.Fields(ids) {
			out[id] = class
		}
	}
	return out
}

// The reasoning turns of reply_conversations.jsonl.
const (
	reasoningTurns = "r_reasoning_chat/2 r_reasoning_chat/4 r_reasoning_chat/6 r_reasoning_only/1 "
	// The tool calls with reasoning and the answers after their results.
	toolReasoningTurns = "r_tool_reasoning/1 r_tool_reasoning/3 r_tool_reasoning/5 " +
		"r_tool_reasoning_empty_content/1 r_tool_reasoning_empty_content/3 "
	// Templates that read an assistant's content as a string raise on the content None of OpenAI's tool-call
	// turns (and on every later turn, whose history holds one).
	noneContentTurns = "r_tool_reasoning/1 r_tool_reasoning/3 r_tool_reasoning/5 r_tool_null_string_args/1 " +
		"r_tool_null_string_args/3 r_two_calls/1 r_two_calls/4 "
)

func replyFamilies() []replyFamily {
	kimi := func(name string) func(t *testing.T) string {
		// A Kimi turn ends with <|im_end|> (163586), which the copies here declare nowhere (no generation_config.json).
		return func(t *testing.T) string { return withGenerationConfig(t, kimiDir(t, name), 163586) }
	}
	return []replyFamily{
		{name: "bundled", dir: func(t *testing.T) string { return bundledDir(t, func(string) {}) },
			// The generation prompt ends "assistant\n": a reply that starts with "\n" tokenizes "\n\n" as one id.
			refuses: refusals(map[ReplyClass]string{ReplyMergesBoundary: "r_leading_whitespace/1 r_leading_whitespace/5"})},
		{name: "llama3_1", dir: lenmlDir("llama3_1"),
			// No reasoning and no tool calls in this template: every reply's reasoning and calls are lost.
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + toolReasoningTurns,
				ReplyDropsToolCalls: "r_tool_plain/2 r_tool_null_string_args/1 r_tool_content_and_call/1 r_two_calls/1",
			})},
		{name: "llama3_1-tools", dir: llamaToolsDir, kwargs: map[string]any{"date_string": "26 Jul 2024"},
			// Calls render as a JSON object without the turn's text; two calls at once raise.
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + toolReasoningTurns,
				ReplyDropsContent:   "r_tool_content_and_call/1",
				ReplyTemplate:       "r_two_calls/1 r_two_calls/4",
			})},
		{name: "qwen3-thinking", dir: lenmlDir("qwen3"),
			// Every reply renders whole, its reasoning in <think> after the "assistant\n" generation prompt (the
			// history's replies before the last user message lose theirs in both renders).
			refuses: refusals(map[ReplyClass]string{ReplyTemplate: noneContentTurns + "r_content_parts/1"})},
		{name: "qwen3-no-thinking", dir: lenmlDir("qwen3"), kwargs: map[string]any{"enable_thinking": false},
			// The generation prompt holds an empty <think></think>; a reply's own reasoning renders in its place.
			refuses: refusals(map[ReplyClass]string{
				ReplyRewritesPrompt: reasoningTurns + "r_tool_reasoning_empty_content/1 r_tool_reasoning_empty_content/3 " +
					"r_think_in_content/1 r_think_in_content/3",
				ReplyTemplate: noneContentTurns + "r_content_parts/1",
			})},
		{name: "deepseek_v3", dir: lenmlDir("deepseek_v3"), hfQuirk: true,
			// No reasoning; calls only of a turn whose content is None, with string arguments (a dict raises), and
			// then without <｜end▁of▁sentence｜>.
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + "r_tool_reasoning_empty_content/1 r_tool_reasoning_empty_content/3",
				ReplyTemplate:       "r_tool_reasoning/1 r_tool_reasoning/3 r_tool_reasoning/5 r_two_calls/1 r_two_calls/4 r_content_parts/1",
				ReplyDropsToolCalls: "r_tool_plain/2 r_tool_content_and_call/1",
				ReplyNoEndOfTurn:    "r_tool_null_string_args/1",
			})},
		{name: "gemma3", dir: lenmlDir("gemma3"),
			// No reasoning, no calls, no tool role (roles must alternate), content None raises.
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + "r_tool_reasoning_empty_content/1",
				ReplyTemplate:       noneContentTurns + "r_tool_plain/4 r_tool_reasoning_empty_content/3 r_tool_content_and_call/3",
				ReplyDropsToolCalls: "r_tool_plain/2 r_tool_content_and_call/1",
			})},
		{name: "gpt-oss", dir: gptOSSDir, clock: true,
			// Reasoning is the message's "thinking", not reasoning_content. A call's text renders as an analysis
			// message in the generation prompt and is dropped once a final answer follows.
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + "r_tool_reasoning_empty_content/1 r_tool_reasoning_empty_content/3",
				ReplyTemplate:       noneContentTurns + "r_content_parts/1",
				ReplyRewritesPrompt: "r_tool_content_and_call/3",
			})},
		{name: "kimi-k2.5", kimi: true, dir: kimi("kimi-k2.5"),
			// Reasoning is kept only after the last assistant message without tool calls, which the reply itself
			// is unless it calls a tool: a reply's reasoning renders only on a call.
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + "r_tool_reasoning/3 r_tool_reasoning/5 r_tool_reasoning_empty_content/3",
			})},
		{name: "kimi-k2.5-preserve-thinking", kimi: true, dir: kimi("kimi-k2.5"), kwargs: map[string]any{"preserve_thinking": true},
			// preserve_thinking renders every message's reasoning.
			refuses: refusals(nil)},
		{name: "kimi-k2-thinking", kimi: true, dir: kimi("kimi-k2-thinking"),
			refuses: refusals(map[ReplyClass]string{
				ReplyDropsReasoning: reasoningTurns + "r_tool_reasoning/3 r_tool_reasoning/5 r_tool_reasoning_empty_content/3",
			})},
	}
}

// replyReference returns transformers' renders and ids of the cases (chattemplate/testdata/reference.py;
// Kimi: testdata/kimi_reference.py), cached in $DRAFTFLOW_CACHE/golden/reply.
func replyReference(t *testing.T, fam replyFamily, dir string, cases []kimiCase) map[string]turnsRef {
	t.Helper()
	if fam.kimi {
		return kimiTurnsReference(t, dir, cases)
	}
	now := turnsNow
	if fam.clock {
		now = time.Now().Format("2006-01-02") + "T12:00:00" // the day the Go side renders
	}
	return hfTurnsReference(t, "reply", now, dir, cases)
}

// TestEncodeReplyMatchesTransformers: for every family and every assistant turn of the corpora, EncodeReply
// gives the prompt and output transformers' renders give (prompt == ids(history, generation prompt);
// prompt + output == ids(history + [reply]) cut after the first end-of-turn id), or refuses the turn with the
// class those renders show; the renders themselves are transformers'. The turns of reply_conversations.jsonl
// each family refuses are listed, with why, in replyFamilies.
func TestEncodeReplyMatchesTransformers(t *testing.T) {
	convs := replyCorpus(t)
	for _, fam := range replyFamilies() {
		t.Run(fam.name, func(t *testing.T) {
			dir := fam.dir(t)
			m, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			turns := replyTurns(convs, fam.kwargs)
			var cases []kimiCase
			for _, tr := range turns {
				cases = append(cases, replyCases(t, tr)...)
			}
			ref := replyReference(t, fam, dir, cases)
			if len(ref) != len(cases) {
				t.Fatalf("%d reference results for %d cases", len(ref), len(cases))
			}
			pick := func(r turnsRef) []uint32 {
				if len(r.RawIDs) > 0 && !slices.Equal(r.IDs, r.RawIDs) {
					// As TestTurnsMatchTransformers: transformers' render, the tokenizers library's ids.
					if !fam.hfQuirk {
						t.Errorf("transformers' ids differ from the tokenizers library's on tokenizer.json")
					}
					return r.RawIDs
				}
				return r.IDs
			}
			counts, sampleCounts := map[ReplyClass]int{}, map[ReplyClass]int{}
			for _, tr := range turns {
				// The renders are transformers'.
				text, _, perr := m.encode(&tr.prompt)
				full, ferr := m.renderReply(&tr.prompt, tr.reply)
				for _, c := range []struct {
					name string
					text string
					err  error
				}{{"prompt", text, perr}, {"full", full, ferr}} {
					r := ref[tr.id+"|"+c.name]
					switch {
					case r.Error != "" && c.err == nil:
						t.Errorf("%s %s: transformers raised %q, Go rendered", tr.id, c.name, r.Error)
					case r.Error == "" && c.err != nil:
						t.Errorf("%s %s: Go failed (%v), transformers rendered", tr.id, c.name, c.err)
					case r.Error == "" && *r.Text != c.text:
						t.Errorf("%s %s: render differs: %s", tr.id, c.name, textDiff(*r.Text, c.text))
					}
				}
				class, wantPrompt, wantOutput := replyExpect(tr, ref, m.EndOfTurnIDs(&tr.prompt), pick, m.Tokenizer.Decode)
				prompt, output, err := m.EncodeReply(&tr.prompt, tr.reply)
				counts[class]++
				if strings.HasPrefix(tr.id, "sample:") {
					sampleCounts[class]++
				}
				if testing.Verbose() && class != "" && err != nil && !strings.HasPrefix(tr.id, "r_") {
					t.Logf("%s: %s: %v", tr.id, class, err)
				}
				if class == "" {
					switch {
					case err != nil:
						t.Errorf("%s: %v; transformers' renders give a row", tr.id, err)
					case !slices.Equal(prompt, wantPrompt):
						t.Errorf("%s: prompt ids differ from transformers': %s", tr.id, firstDiff(wantPrompt, prompt))
					case !slices.Equal(output, wantOutput):
						t.Errorf("%s: output ids differ from transformers': %s\n  want %q\n  got  %q", tr.id,
							firstDiff(wantOutput, output), m.Tokenizer.Decode(wantOutput), m.Tokenizer.Decode(output))
					}
				} else {
					var re *ReplyError
					if !errors.As(err, &re) || re.Class != class {
						t.Errorf("%s: EncodeReply gave (%d, %d ids, %v); transformers' renders show %s", tr.id, len(prompt), len(output), err, class)
					}
				}
				if !strings.HasPrefix(tr.id, "r_") {
					continue
				}
				if want := fam.refuses[tr.id]; class != want {
					t.Errorf("%s: %s, the known result is %q (%v)", tr.id, orAccepted(class), orAccepted(want), err)
				}
			}
			for id := range fam.refuses {
				if !slices.ContainsFunc(turns, func(tr replyTurn) bool { return tr.id == id }) {
					t.Errorf("known result for %s, no such turn", id)
				}
			}
			t.Logf("%s: %d turns, %d rows identical to transformers'; refused: %s; of them the sample dataset's: %d turns, "+
				"%d rows, refused: %s", fam.name, len(turns), counts[""], describeCounts(counts),
				sum(sampleCounts), sampleCounts[""], describeCounts(sampleCounts))
		})
	}
}

func sum(counts map[ReplyClass]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func orAccepted(c ReplyClass) string {
	if c == "" {
		return "accepted"
	}
	return string(c)
}

func describeCounts(counts map[ReplyClass]int) string {
	var parts []string
	for c, n := range counts {
		if c != "" {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// A Kimi directory without generation_config.json declares only [EOS], which its template never writes: every
// reply is refused as having no end-of-turn token, naming the ids it looked for and how the rendering ends.
func TestEncodeReplyNeedsTheEndOfTurnID(t *testing.T) {
	m, err := LoadModel(kimiDir(t, "kimi-k2-thinking"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.EncodeReply(promptOf(userAsk("Hi")), topics.Message{Role: "assistant", Content: "Hello!"})
	wantReplyClass(t, err, ReplyNoEndOfTurn, `163585 "[EOS]"`, `Hello!<|im_end|>"`, "generation_config.json")
}
