package reply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/draftflow/draftflow/topics"
)

// Options names the parsers with SGLang's own --reasoning-parser and
// --tool-call-parser names. The zero value parses nothing: the whole text is
// content.
type Options struct {
	// Reasoning is the reasoning parser: "" (none), "qwen3", "deepseek-r1",
	// "kimi_k2", "kimi", "gpt-oss", ... (ReasoningParsers lists them all).
	Reasoning string
	// Tools is the tool-call parser: "" (none), "qwen25" (Qwen2.5/Qwen3/Hermes
	// <tool_call>), "llama3", "kimi_k2", "deepseekv3", "gpt-oss", ...
	// (ToolParsers lists them all).
	Tools string
	// ReasoningOpen says the rendered prompt ended inside an open reasoning
	// block (the template appended "<think>\n"), so the text starts inside
	// reasoning: SGLang's force_reasoning. Some parsers ignore it as SGLang
	// does: deepseek-r1 always starts in reasoning, kimi never does, and
	// qwen3-thinking, minimax and gpt-oss are always forced.
	ReasoningOpen bool
	// Functions, when not nil, lists the functions the request offered; calls
	// to any other name are dropped, as SGLang does by default
	// (SGLANG_FORWARD_UNKNOWN_TOOLS unset). Nil keeps every call. A Kimi K2
	// call that names no function (a bare counter id) takes the name of the
	// only function when Functions has exactly one.
	Functions []string
}

// Call is one tool call.
type Call struct {
	// Name is the function name.
	Name string
	// Arguments is a JSON object.
	Arguments json.RawMessage
	// ID is the id the model wrote for the call where the format carries one
	// (Kimi K2: "functions.NAME:IDX"); empty otherwise. SameCalls ignores it.
	ID string
}

// Reply is one assistant turn split the way SGLang's chat endpoint splits it.
type Reply struct {
	// Reasoning is the reasoning_content ("" when there was none).
	Reasoning string
	// Content is the message content: the text that is neither reasoning nor
	// a tool call.
	Content string
	// Calls are the tool calls, in order.
	Calls []Call
}

// ParseError says why a generated text could not be read as a reply.
type ParseError struct {
	// Parser is the parser that failed ("qwen25", "reasoning", ...).
	Parser string
	// Reason says what is wrong.
	Reason string
	// Snippet is the part of the text at fault, shortened.
	Snippet string
}

// Error says which parser failed, why, and on what text.
func (e *ParseError) Error() string {
	if e.Snippet == "" {
		return fmt.Sprintf("reply: %s: %s", e.Parser, e.Reason)
	}
	return fmt.Sprintf("reply: %s: %s: %q", e.Parser, e.Reason, e.Snippet)
}

func parseErr(parser, snippet, format string, args ...any) *ParseError {
	const max = 120
	if len(snippet) > max {
		snippet = snippet[:max] + "…"
	}
	return &ParseError{Parser: parser, Reason: fmt.Sprintf(format, args...), Snippet: snippet}
}

// Known returns an error (a *ParseError) when a parser name is not one Parse
// supports; "" is valid for both and means no parser.
func Known(reasoning, tools string) error {
	if _, ok := reasoningParsers[reasoning]; reasoning != "" && !ok {
		return parseErr("options", "", "unknown reasoning parser %q (supported: %v)", reasoning, ReasoningParsers())
	}
	if _, ok := toolParsers[tools]; tools != "" && !ok {
		return parseErr("options", "", "unknown tool-call parser %q (supported: %v)", tools, ToolParsers())
	}
	return nil
}

// ReasoningParsers lists the supported --reasoning-parser names, sorted.
func ReasoningParsers() []string { return sortedKeys(reasoningParsers) }

// ToolParsers lists the supported --tool-call-parser names, sorted.
func ToolParsers() []string { return sortedKeys(toolParsers) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Parse splits text, as SGLang's /generate returned it, into reasoning,
// content and tool calls. It follows serving_chat.py _build_chat_response:
// the reasoning parser runs on the whole text, the tool-call parser on the
// reasoning parser's normal text, and only when the detector's has_tool_call
// sees its marker (_process_tool_calls). It returns a *ParseError when a
// parser name is unknown or a tool-call block is present but cannot be read,
// where SGLang would drop the call.
func Parse(text string, o Options) (Reply, error) {
	if err := Known(o.Reasoning, o.Tools); err != nil {
		return Reply{}, err
	}
	var r Reply
	normal := text
	if o.Reasoning != "" {
		r.Reasoning, normal = reasoningParsers[o.Reasoning](text, o.ReasoningOpen)
	}
	r.Content = normal
	if o.Tools == "" {
		return r, nil
	}
	if o.Tools == "gpt-oss" && o.Reasoning == "gpt-oss" {
		// The harmony reasoning parser already dropped a call block that
		// has no <|call|>; the tool parser would never see it.
		if _, rest := harmonyOneShotRest(text); harmonyHeldCall(rest) != nil {
			return Reply{}, harmonyHeldCall(rest)
		}
	}
	tp := toolParsers[o.Tools]
	if !tp.has(normal) {
		return r, nil
	}
	content, calls, err := tp.parse(normal, o)
	if err != nil {
		return Reply{}, err
	}
	if o.Functions != nil {
		// base_format_detector.py parse_base_json (and each detector's own
		// check): a call to a function not offered is skipped.
		calls = slices.DeleteFunc(calls, func(c Call) bool { return !slices.Contains(o.Functions, c.Name) })
	}
	r.Content, r.Calls = content, calls
	return r, nil
}

// Message is the reply as an assistant message. ToolCalls take the OpenAI
// shape [{"id", "type": "function", "function": {"name", "arguments"}}] with
// arguments as a JSON object (what chat templates iterate over). Call i keeps
// the id the model wrote for it (Call.ID), else takes callIDs[i] when given
// and not empty (the source conversation's id for that call), else a
// deterministic id made from the call ("call_" and 24 hex digits, SGLang's
// shape).
func (r Reply) Message(callIDs []string) topics.Message {
	m := topics.Message{Role: "assistant", Content: r.Content, ReasoningContent: r.Reasoning}
	if len(r.Calls) == 0 {
		return m
	}
	type function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type toolCall struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	out := make([]toolCall, len(r.Calls))
	for i, c := range r.Calls {
		id := c.ID
		if id == "" && i < len(callIDs) {
			id = callIDs[i]
		}
		if id == "" {
			id = defaultCallID(i, c)
		}
		args := c.Arguments
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		out[i] = toolCall{ID: id, Type: "function", Function: function{Name: c.Name, Arguments: args}}
	}
	b, err := json.Marshal(out)
	if err != nil {
		// Only invalid Arguments get here; keep the message, with calls that
		// say so rather than a silently empty list.
		b, _ = json.Marshal([]map[string]string{{"error": err.Error()}})
	}
	m.ToolCalls = b
	return m
}

func defaultCallID(i int, c Call) string {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(i)))
	h.Write([]byte{0})
	h.Write([]byte(c.Name))
	h.Write([]byte{0})
	h.Write(c.Arguments)
	return "call_" + hex.EncodeToString(h.Sum(nil))[:24]
}
