package topics

import "encoding/json"

// Stop reasons of a Generation: how a regenerated turn bears on its conversation.
const (
	// StopEnd: the conversation has no later turn to regenerate (also every single-turn record).
	StopEnd = "end"
	// StopContinued: the turn was accepted and the next turn's Prompt is built from it (Generation.Next).
	StopContinued = "continued"
	// StopToolDivergence: the target called other tools, or the same tools with other arguments, than the
	// source conversation did at this turn, so the source's tool results do not answer it; the
	// conversation ends here, this turn kept.
	StopToolDivergence = "tool_divergence"
	// StopLength: the reply was cut at max_new_tokens, so it cannot stand in the history of a later turn;
	// the conversation ends here, this turn kept.
	StopLength = "length"
	// StopParseError: the reply could not be parsed into a message (a malformed tool call, for example);
	// the conversation ends here, this turn kept.
	StopParseError = "parse_error"
	// StopLoop: the reply fell into a repetition loop and generate stopped it (GenerationMeta.FinishReason
	// FinishLoop), so it cannot stand in the history of a later turn; the conversation ends here, this turn
	// kept.
	StopLoop = "loop"
)

// StopReasons returns every stop reason, in the order metrics and summaries show them.
func StopReasons() []string {
	return []string{StopEnd, StopContinued, StopToolDivergence, StopLength, StopParseError, StopLoop}
}

// Thread is what a turn of a multi-turn conversation carries so that the next turn can be built from the
// target's own reply: the history the turn was generated from and the rest of the source conversation.
type Thread struct {
	// Messages is the history this turn was generated from (the Prompt's Messages).
	Messages []Message `json:"messages"`
	// Tools is the conversation's tool list (the Prompt's Tools).
	Tools json.RawMessage `json:"tools,omitempty"`
	// Rest is the source conversation after Messages: the original assistant reply of this turn first
	// (what a regenerated tool call is compared with), then every later message.
	Rest []Message `json:"rest"`
}

// Original is the source conversation's assistant reply at this turn (Rest[0]), or nil.
func (t *Thread) Original() *Message {
	if t == nil || len(t.Rest) == 0 {
		return nil
	}
	return &t.Rest[0]
}

// follow returns the messages after the original reply up to the next assistant message (what answers the
// reply: tool results, or the user's next message) and the rest from that assistant message on.
func (t *Thread) follow() (between, rest []Message) {
	if t == nil || len(t.Rest) < 2 {
		return nil, nil
	}
	k := 1
	for k < len(t.Rest) && t.Rest[k].Role != "assistant" {
		k++
	}
	return t.Rest[1:k], t.Rest[k:]
}

// HasNext reports whether a turn follows this one: the source conversation goes on after the original
// reply with a message to answer (a user message or a tool result).
func (t *Thread) HasNext() bool {
	between, _ := t.follow()
	for _, m := range between {
		if m.Role == "user" || m.Role == "tool" {
			return true
		}
	}
	return false
}

// Parsers names how a turn's reply is split into a message, with SGLang's names for its
// --reasoning-parser and --tool-call-parser (for example "qwen3" and "qwen25", "kimi_k2" and "kimi_k2",
// "deepseek-r1" and "deepseekv3", "" and "llama3").
type Parsers struct {
	// Reasoning is the reasoning parser, "" when the model does not think in a block of its own.
	Reasoning string `json:"reasoning,omitempty"`
	// Tools is the tool-call parser, "" when the chat template offers no tools.
	Tools string `json:"tools,omitempty"`
	// ReasoningOpen is set when the rendered prompt ends inside an open reasoning block (the template
	// wrote the opening tag), so the reply starts with reasoning.
	ReasoningOpen bool `json:"reasoning_open,omitempty"`
}

// Continues reports whether Next gives a turn: StopReason is StopContinued, the generation carries its
// thread and reply, and the source conversation goes on.
func (g *Generation) Continues() bool {
	return g.StopReason == StopContinued && g.Thread != nil && g.Reply != nil && g.Thread.HasNext()
}

// Next builds the Prompt of the conversation's next turn from this generation: the history, the parsed
// reply, then the source messages that answer it (tool results or the user's next message, a tool result's
// tool_call_id changed to the id the reply gave the call where the source's call had another), keyed by the
// same ID with Turn+1 and the Endpoint that produced this turn. It reports false unless StopReason is
// StopContinued and there is a next turn. Next is a pure function of g, so every copy of a generation
// yields the same prompt.
func (g *Generation) Next() (Prompt, bool) {
	if !g.Continues() {
		return Prompt{}, false
	}
	between, rest := g.Thread.follow()
	between = relink(between, g.Thread.Original().CallIDs(), g.Reply.CallIDs())
	msgs := make([]Message, 0, len(g.Thread.Messages)+1+len(between))
	msgs = append(msgs, g.Thread.Messages...)
	msgs = append(msgs, *g.Reply)
	msgs = append(msgs, between...)
	p := Prompt{
		ID:       g.ID,
		Dataset:  g.Dataset,
		Turn:     g.Turn + 1,
		Messages: msgs,
		Tools:    g.Thread.Tools,
		Sampling: g.Sampling,
		Source:   g.Source,
		Endpoint: g.Meta.Endpoint,

		Continuation: true,
	}
	if len(rest) > 0 {
		p.Rest = rest
	}
	return p, true
}

// CallIDs returns the ids of the message's tool calls, in order ("" where a call has none); nil for a nil
// message, or one without calls or whose calls are not a JSON list.
func (m *Message) CallIDs() []string {
	if m == nil || len(m.ToolCalls) == 0 {
		return nil
	}
	var list []struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(m.ToolCalls, &list) != nil {
		return nil
	}
	ids := make([]string, len(list))
	for i, c := range list {
		var id string
		if json.Unmarshal(c.ID, &id) != nil && len(c.ID) > 0 && string(c.ID) != "null" {
			id = string(c.ID) // a number
		}
		ids[i] = id
	}
	return ids
}

// relink returns msgs with each tool result that answers the source's call i (its ToolCallID is from[i])
// answering the reply's call i instead (to[i]): a model that writes its own call ids (Kimi-K2's
// functions.NAME:IDX) keeps them in the history, and the source's results still link to them. Ids that
// are empty or occur twice in from are left alone. msgs itself is not changed.
func relink(msgs []Message, from, to []string) []Message {
	seen := map[string]int{}
	for _, id := range from {
		seen[id]++
	}
	ids := map[string]string{}
	for i := 0; i < len(from) && i < len(to); i++ {
		if from[i] != "" && to[i] != "" && from[i] != to[i] && seen[from[i]] == 1 {
			ids[from[i]] = to[i]
		}
	}
	if len(ids) == 0 {
		return msgs
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if id, ok := ids[m.ToolCallID]; ok && m.Role == "tool" {
			m.ToolCallID = id
		}
		out[i] = m
	}
	return out
}
