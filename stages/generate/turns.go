package generate

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/draftflow/draftflow/sglang/reply"
	"github.com/draftflow/draftflow/topics"
)

// conclude decides how a generated turn bears on its conversation (g.StopReason) and, for a turn of a
// multi-turn conversation (t.Thread set), parses the server's text into the reply the next turn's history
// holds (g.Reply). Every copy of a turn concludes the same way: it depends only on t and the response.
//
//   - No thread (a single turn, or the conversation's last): StopEnd.
//   - Cut at max_new_tokens: StopLength; a truncated answer cannot stand in a history.
//   - Text that does not parse (a malformed tool call): StopParseError.
//   - Tool calls that are not the source's calls at this turn (other names, other arguments as JSON
//     values, another count, or calls where the source had none and the reverse): StopToolDivergence; the
//     source's tool results would not answer them.
//   - Otherwise StopContinued, unless the source has no later message to answer (StopEnd). A call keeps the
//     id the model wrote for it (Kimi-K2), else takes the source's id, so the source's tool results link up
//     (Generation.Next points them at the model's ids).
func conclude(t *topics.Tokenized, g *topics.Generation, text string) {
	if t.Thread == nil {
		g.StopReason = topics.StopEnd
		return
	}
	g.Thread = t.Thread
	r, err := reply.Parse(text, reply.Options{Reasoning: t.Parsers.Reasoning, Tools: t.Parsers.Tools,
		ReasoningOpen: t.Parsers.ReasoningOpen, Functions: functionNames(t.Thread.Tools)})
	if g.Meta.FinishReason == "length" {
		if err == nil {
			msg := r.Message(nil)
			g.Reply = &msg
		}
		g.StopReason = topics.StopLength
		g.StopDetail = fmt.Sprintf("the reply was cut at max_new_tokens (%d tokens)", len(g.OutputIDs))
		return
	}
	if err != nil {
		g.StopReason, g.StopDetail = topics.StopParseError, err.Error()
		return
	}
	orig := t.Thread.Original()
	var origCalls []reply.Call
	var origErr error
	if orig != nil && len(orig.ToolCalls) > 0 && string(orig.ToolCalls) != "null" {
		origCalls, origErr = reply.CallsOf(orig.ToolCalls)
	}
	same := origErr == nil && reply.SameCalls(r.Calls, origCalls)
	var ids []string
	if same {
		ids = orig.CallIDs()
	}
	msg := r.Message(ids)
	g.Reply = &msg
	switch {
	case origErr != nil:
		g.StopReason = topics.StopToolDivergence
		g.StopDetail = "the source's tool calls at this turn do not parse, so no call can match them: " + origErr.Error()
	case !same:
		g.StopReason = topics.StopToolDivergence
		g.StopDetail = fmt.Sprintf("called %s; the source called %s", describeCalls(r.Calls), describeCalls(origCalls))
	case !t.Thread.HasNext():
		g.StopReason = topics.StopEnd
	default:
		g.StopReason = topics.StopContinued
	}
}

// functionNames lists the function names of a tool list in the OpenAI shape ([{"type": "function",
// "function": {"name": ...}}], or bare {"name": ...} entries); nil when there is none or it does not parse,
// which keeps every parsed call.
func functionNames(tools json.RawMessage) []string {
	if len(tools) == 0 {
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(tools, &list) != nil {
		return nil
	}
	var names []string
	for _, t := range list {
		if t.Function.Name != "" {
			names = append(names, t.Function.Name)
		} else if t.Name != "" {
			names = append(names, t.Name)
		}
	}
	return names
}

// describeCalls names calls for a stop detail: "no tool", or "f({...}), g({...})" with long arguments cut.
func describeCalls(calls []reply.Call) string {
	if len(calls) == 0 {
		return "no tool"
	}
	parts := make([]string, len(calls))
	for i, c := range calls {
		args := string(c.Arguments)
		if len(args) > 80 {
			args = args[:77] + "..."
		}
		parts[i] = c.Name + "(" + args + ")"
	}
	return strings.Join(parts, ", ")
}
