package tokenize

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/draftflow/draftflow/stages/tokenize/chattemplate"
	"github.com/draftflow/draftflow/topics"
)

// ReplyClass is the short, stable name of why a kept reply cannot be a row (topics.Rejection.Class).
type ReplyClass string

// The reasons EncodeReply refuses a reply. None of them is ever turned into a row with other ids.
const (
	// ReplyTemplate: the chat template fails on the history or on the history with the reply (it raises,
	// as it would under transformers, or cannot be rendered).
	ReplyTemplate ReplyClass = "template"
	// ReplyNotAssistant: the reply's role is not assistant.
	ReplyNotAssistant ReplyClass = "reply_not_assistant"
	// ReplyEmpty: the reply has no content, reasoning or tool calls (whitespace counts as none), or its
	// rendering holds nothing before the end-of-turn token.
	ReplyEmpty ReplyClass = "reply_empty"
	// ReplyDropsReasoning, ReplyDropsToolCalls, ReplyDropsContent: the chat template renders the reply
	// exactly as it renders it without that part, so the row would lose it (DeepSeek-R1-style templates
	// drop reasoning, DeepSeek-V3's drops the calls of a turn whose content is not None, Llama 3.1's
	// tool template drops the content of a turn that calls a tool).
	ReplyDropsReasoning ReplyClass = "reply_drops_reasoning"
	ReplyDropsToolCalls ReplyClass = "reply_drops_tool_calls"
	ReplyDropsContent   ReplyClass = "reply_drops_content"
	// ReplyRewritesPrompt: the rendering of the history with the reply does not start with the prompt's
	// text: the template renders the assistant turn otherwise than its generation prompt (Qwen3 with
	// thinking off writes an empty <think></think> block in the generation prompt and the reply's own
	// reasoning in its rendering), or renders the history differently once the reply follows.
	ReplyRewritesPrompt ReplyClass = "reply_rewrites_prompt"
	// ReplyMergesBoundary: the text extends the prompt's, but its ids do not extend the prompt's ids: the
	// tokenizer merges text across the boundary between the generation prompt and the reply.
	ReplyMergesBoundary ReplyClass = "reply_merges_boundary"
	// ReplyNoEndOfTurn: the ids the reply renders to hold none of the ids a server stops on.
	ReplyNoEndOfTurn ReplyClass = "reply_no_end_of_turn"
	// ReplyEndOfTurnInside: an end-of-turn id comes before the end of the reply's rendering (its text
	// holds the token's text, say), so the reply cannot be generated whole.
	ReplyEndOfTurnInside ReplyClass = "reply_end_of_turn_inside"
)

// ReplyError is why EncodeReply refuses a reply: its class and, in words a user can act on, the reason.
type ReplyError struct {
	Class  ReplyClass
	Reason string
	// Err is the chat template's error for ReplyTemplate, else nil.
	Err error
}

func (e *ReplyError) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *ReplyError) Unwrap() error { return e.Err }

func replyErr(class ReplyClass, format string, args ...any) *ReplyError {
	return &ReplyError{Class: class, Reason: fmt.Sprintf(format, args...)}
}

// EncodeReply returns the ids of a kept assistant reply, the row a conversation's own reply makes
// without generating. prompt is Encode(p): the history with the generation prompt. output is what the
// chat template renders for reply after it, through the first end-of-turn id: the ids of
// apply_chat_template(history + [reply], add_generation_prompt=False, the same tools and template
// kwargs) after the prompt's, cut after the first id a server stops on (EndOfTurnIDs); what the template
// writes after that token (Qwen's "\n", say) is not part of a generated reply.
//
// A reply that cannot be such a row is refused with a *ReplyError naming the reason, never written with
// other ids: the chat template fails (ReplyTemplate), the reply is not an assistant's or is empty, the
// template renders the reply without one of its parts (reasoning, tool calls or content), the rendering
// with the reply does not extend the prompt's text or ids, or its ids hold no end-of-turn id, or one
// before the reply's end. Each turn is judged on its own rendering, as transformers renders it: Qwen3,
// for one, renders the reasoning of an assistant message after the last user query (so a reply's own
// reasoning, even where the history's earlier replies lose theirs).
func (m *Model) EncodeReply(p *topics.Prompt, reply topics.Message) (prompt, output []uint32, err error) {
	if reply.Role != "assistant" {
		return nil, nil, replyErr(ReplyNotAssistant, "the reply's role is %q, want assistant", reply.Role)
	}
	parts := replyParts(reply)
	if len(parts) == 0 {
		return nil, nil, replyErr(ReplyEmpty, "the reply is empty: no content, reasoning or tool calls")
	}
	promptText, prompt, err := m.encode(p)
	if err != nil {
		return nil, nil, &ReplyError{Class: ReplyTemplate, Reason: "rendering the history with the generation prompt", Err: err}
	}
	full, err := m.renderReply(p, reply)
	if err != nil {
		return nil, nil, &ReplyError{Class: ReplyTemplate, Reason: "rendering the history with the reply", Err: err}
	}
	for _, part := range parts {
		// A rendering that fails without the part has not dropped it.
		if without, err := m.renderReply(p, part.remove(reply)); err == nil && without == full {
			return nil, nil, replyErr(part.class, "the chat template renders the reply without its %s: the row would lose it "+
				"(%s)", part.name, part.hint)
		}
	}
	if !strings.HasPrefix(full, promptText) {
		k := commonTextPrefix(promptText, full)
		return nil, nil, replyErr(ReplyRewritesPrompt, "the chat template renders the turn with the reply otherwise than the "+
			"history with its generation prompt: after %q the prompt has %q, the rendering with the reply %q",
			tail(promptText[:k], 40), head(promptText[k:], 40), head(full[k:], 40))
	}
	ids := m.Tokenizer.Encode(full)
	if len(ids) < len(prompt) || !slices.Equal(ids[:len(prompt)], prompt) {
		k := 0
		for k < len(prompt) && k < len(ids) && prompt[k] == ids[k] {
			k++
		}
		return nil, nil, replyErr(ReplyMergesBoundary, "the tokenizer merges the reply into the generation prompt: the prompt's "+
			"ids end %q, the rendering with the reply tokenizes them as %q",
			m.Tokenizer.Decode(prompt[k:]), m.Tokenizer.Decode(ids[k:min(len(ids), len(prompt)+2)]))
	}
	output = ids[len(prompt):]
	ends := m.EndOfTurnIDs(p)
	end := slices.IndexFunc(output, func(id uint32) bool { return slices.Contains(ends, id) })
	if end < 0 {
		return nil, nil, replyErr(ReplyNoEndOfTurn, "the reply renders to ids without an end-of-turn id %s (the ids a server "+
			"stops on: the model's eos_token_id in generation_config.json, eos_token in tokenizer_config.json, and the "+
			"prompt's stop_token_ids): the rendering of the reply ends %q", m.describeIDs(ends), tail(full, 40))
	}
	if after := m.Tokenizer.Decode(output[end+1:]); strings.TrimSpace(after) != "" {
		return nil, nil, replyErr(ReplyEndOfTurnInside, "the reply's rendering holds the end-of-turn token %s before its end, "+
			"followed by %q: a generated reply stops there", m.describeIDs(output[end:end+1]), head(after, 40))
	}
	if end == 0 {
		return nil, nil, replyErr(ReplyEmpty, "the chat template renders nothing of the reply before the end-of-turn token")
	}
	return prompt, output[: end+1 : end+1], nil
}

// EndOfTurnIDs are the ids that end a generated reply to p, the ids a server stops on: the model's
// EOSTokenIDs and the prompt's stop_token_ids.
func (m *Model) EndOfTurnIDs(p *topics.Prompt) []uint32 {
	ends := slices.Clone(m.EOSTokenIDs)
	for _, id := range p.Sampling.StopTokenIDs {
		if id >= 0 && !slices.Contains(ends, uint32(id)) {
			ends = append(ends, uint32(id))
		}
	}
	return ends
}

// renderReply renders p's history followed by reply, without a generation prompt.
func (m *Model) renderReply(p *topics.Prompt, reply topics.Message) (string, error) {
	msgs := make([]chattemplate.Message, 0, len(p.Messages)+1)
	msgs = append(append(msgs, templateMessages(p.Messages)...), chattemplate.Message(reply))
	return m.Render(chattemplate.Input{Messages: msgs, Tools: p.Tools, Kwargs: p.Sampling.TemplateKwargs})
}

// replyPart is one part of a reply that its rendering must show.
type replyPart struct {
	name   string
	class  ReplyClass
	hint   string
	remove func(topics.Message) topics.Message
}

// replyParts returns the parts a reply has: reasoning, tool calls, content, each only when not blank.
func replyParts(r topics.Message) []replyPart {
	var out []replyPart
	if strings.TrimSpace(r.ReasoningContent) != "" {
		out = append(out, replyPart{name: "reasoning_content", class: ReplyDropsReasoning,
			hint:   "leave reasoning_content out of the data to keep the replies without it",
			remove: func(m topics.Message) topics.Message { m.ReasoningContent = ""; return m }})
	}
	if hasToolCalls(r.ToolCalls) {
		out = append(out, replyPart{name: "tool_calls", class: ReplyDropsToolCalls,
			hint:   "the template renders this turn's calls in another shape of message, or not at all",
			remove: func(m topics.Message) topics.Message { m.ToolCalls = nil; return m }})
	}
	if strings.TrimSpace(r.Content) != "" {
		out = append(out, replyPart{name: "content", class: ReplyDropsContent,
			hint: "the template renders a turn with tool calls without its text",
			remove: func(m topics.Message) topics.Message {
				m.Content, m.ContentParts, m.ContentNull = "", nil, false
				return m
			}})
	}
	return out
}

// hasToolCalls reports whether a message's tool_calls is a non-empty JSON list.
func hasToolCalls(raw json.RawMessage) bool {
	var calls []json.RawMessage
	return json.Unmarshal(raw, &calls) == nil && len(calls) > 0
}

// describeIDs writes ids with their tokens: [151645 "<|im_end|>"].
func (m *Model) describeIDs(ids []uint32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		tok, _ := m.Tokenizer.Token(id)
		fmt.Fprintf(&b, "%d %q", id, tok)
	}
	b.WriteByte(']')
	return b.String()
}

// commonTextPrefix returns the length of the longest common prefix of a and b that ends at a rune boundary.
func commonTextPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(a) && !utf8.RuneStart(a[i]) {
		i--
	}
	return i
}

// head and tail cut s to at most n bytes, at rune boundaries.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return "…" + s[i:]
}
