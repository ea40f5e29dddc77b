package sim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Reply formats accepted by Config.ReplyFormat: how a scripted reply is
// written, as the model family writes it and as SGLang 0.5.23's parsers for
// that family read it back.
const (
	// ReplyQwen3 writes "<think>\n{reasoning}\n</think>\n\n{content}" and each
	// call as "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>",
	// preceded by "\n" unless it is the first and the content is empty (the
	// Qwen3 chat template's rendering). Read back by the reasoning parser
	// "qwen3" (srt/parser/reasoning_parser.py Qwen3Detector) and the tool
	// parser "qwen"/"qwen25" (srt/function_call/qwen25_detector.py, bot
	// "<tool_call>\n", eot "\n</tool_call>").
	ReplyQwen3 = "qwen3"
	// ReplyKimiK2 writes "<think>{reasoning}</think>{content}" then, with
	// calls, "<|tool_calls_section_begin|>" + one
	// "<|tool_call_begin|>functions.{name}:{idx}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
	// per call + "<|tool_calls_section_end|>"; idx counts the conversation's
	// calls from 0, as Kimi's ids do. Read back by the reasoning parser
	// "kimi_k2" (reasoning_parser.py KimiK2Detector) and the tool parser
	// "kimi_k2" (srt/function_call/kimik2_detector.py).
	ReplyKimiK2 = "kimi_k2"
	// ReplyLlama3 writes no reasoning; a turn with calls is only the calls,
	// each {"name": ..., "parameters": {...}}, separated by "; " (the Llama
	// 3.1 template renders a call turn without its content); a turn without
	// is its content. Read back by the tool parser "llama3"
	// (srt/function_call/llama32_detector.py: text starting with "{", ";"
	// separator, "parameters" or "arguments").
	ReplyLlama3 = "llama3"
	// ReplyDeepSeekV3 writes "<think>{reasoning}</think>{content}" then, with
	// calls, "<｜tool▁calls▁begin｜>" + one
	// "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
	// per call (joined by "\n") + "<｜tool▁calls▁end｜>". Read back by the
	// reasoning parser "deepseek-v3" (reasoning_parser.py _DeepSeekV3Detector,
	// Qwen3's <think> tokens) and the tool parser "deepseekv3"
	// (srt/function_call/deepseekv3_detector.py func_detail_regex). Its
	// markers are not ASCII: see Config.ReplyFormat for how they are encoded.
	ReplyDeepSeekV3 = "deepseekv3"
)

// scriptTurn is one original assistant message of a conversation.
type scriptTurn struct {
	reasoning string
	content   string
	hasReason bool
	calls     []scriptCall
	callBase  int // tool calls in earlier assistant messages (Kimi's call index)
}

// scriptCall is one original tool call: its name and arguments as JSON.
type scriptCall struct {
	name string
	args json.RawMessage
}

// scriptRoles maps the role and ShareGPT "from" values the ingest stage
// accepts (lower-cased) to chat roles; only "assistant" matters here.
var scriptRoles = map[string]string{
	"system": "system", "developer": "system",
	"user": "user", "human": "user",
	"assistant": "assistant", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
	"bing": "assistant", "model": "assistant", "function_call": "assistant",
	"tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool",
	"function_response": "tool", "tool_response": "tool",
}

// loadConversations reads a JSONL dataset in the ingest format and returns
// each row's assistant messages by id, how many rows had no id, and the lines
// that are not a usable row (ingest dead-letters those; no request names them).
func loadConversations(path string) (map[string][]scriptTurn, int, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("sim: conversations: %w", err)
	}
	defer f.Close()
	var bad []int
	out := map[string][]scriptTurn{}
	noID := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		id, turns, err := parseScriptRow(b)
		if err != nil {
			bad = append(bad, line)
			continue
		}
		if id == "" {
			noID++
			continue
		}
		out[id] = turns
	}
	if err := sc.Err(); err != nil {
		return nil, 0, nil, fmt.Errorf("sim: conversations %s: %w", path, err)
	}
	return out, noID, bad, nil
}

// parseScriptRow parses one dataset row: its id ("" when absent) and its
// assistant messages in order.
func parseScriptRow(b []byte) (string, []scriptTurn, error) {
	var row struct {
		ID            json.RawMessage `json:"id"`
		Messages      json.RawMessage `json:"messages"`
		Conversations json.RawMessage `json:"conversations"`
	}
	if err := json.Unmarshal(b, &row); err != nil {
		return "", nil, err
	}
	id := ""
	if !isNullJSON(row.ID) {
		if row.ID[0] == '"' {
			if err := json.Unmarshal(row.ID, &id); err != nil {
				return "", nil, fmt.Errorf("id: %w", err)
			}
			id = strings.TrimSpace(id)
		} else {
			id = string(row.ID) // a number, as its literal (as ingest does)
		}
	}
	raw := row.Messages
	if isNullJSON(raw) {
		raw = row.Conversations
	}
	raw, err := unwrapString(raw)
	if err != nil {
		return "", nil, fmt.Errorf("messages: %w", err)
	}
	var msgs []struct {
		Role             json.RawMessage `json:"role"`
		From             json.RawMessage `json:"from"`
		Content          json.RawMessage `json:"content"`
		Value            json.RawMessage `json:"value"`
		ReasoningContent *string         `json:"reasoning_content"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	}
	if !isNullJSON(raw) {
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return "", nil, fmt.Errorf("messages: %w", err)
		}
	}
	var turns []scriptTurn
	calls := 0
	for i, m := range msgs {
		var role string
		rawRole := m.Role
		if isNullJSON(rawRole) {
			rawRole = m.From
		}
		_ = json.Unmarshal(rawRole, &role)
		key := strings.ToLower(strings.TrimSpace(role))
		if scriptRoles[key] != "assistant" {
			continue
		}
		rawContent := m.Content
		if isNullJSON(rawContent) {
			rawContent = m.Value
		}
		t := scriptTurn{content: contentString(rawContent), callBase: calls}
		if m.ReasoningContent != nil {
			t.reasoning, t.hasReason = *m.ReasoningContent, true
		}
		if t.calls, err = parseScriptCalls(m.ToolCalls); err != nil {
			return "", nil, fmt.Errorf("messages[%d].tool_calls: %w", i, err)
		}
		if key == "function_call" && t.calls == nil {
			// ShareGPT: the value is the call ({"name", "arguments"} or a list).
			if c, err := parseScriptCalls(json.RawMessage(strings.TrimSpace(t.content))); err == nil && c != nil {
				t.calls, t.content = c, ""
			}
		}
		calls += len(t.calls)
		turns = append(turns, t)
	}
	return id, turns, nil
}

// contentString is a content field's text: a string, or text parts joined
// with "\n" (as the ingest stage joins them).
func contentString(raw json.RawMessage) string {
	if isNullJSON(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if json.Unmarshal(p, &s) == nil {
			texts = append(texts, s)
			continue
		}
		var part struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(p, &part)
		texts = append(texts, part.Text)
	}
	return strings.Join(texts, "\n")
}

// parseScriptCalls reads tool_calls: a list (or one object, or a JSON string
// of either) of OpenAI calls {"function": {"name", "arguments"}} or flat
// {"name", "arguments"|"parameters"}; arguments an object or a JSON string.
func parseScriptCalls(raw json.RawMessage) ([]scriptCall, error) {
	raw, err := unwrapString(raw)
	if err != nil || isNullJSON(raw) {
		return nil, err
	}
	if raw[0] == '{' {
		raw = append(append(json.RawMessage{'['}, raw...), ']')
	}
	var in []struct {
		Function *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	var out []scriptCall
	for _, c := range in {
		name, args := c.Name, c.Arguments
		if c.Function != nil {
			name, args = c.Function.Name, c.Function.Arguments
		}
		if isNullJSON(args) {
			args = c.Parameters
		}
		if args, err = unwrapString(args); err != nil {
			return nil, fmt.Errorf("arguments of %q: %w", name, err)
		}
		if isNullJSON(args) {
			args = json.RawMessage(`{}`)
		}
		if !json.Valid(args) {
			return nil, fmt.Errorf("arguments of %q are not JSON", name)
		}
		out = append(out, scriptCall{name: name, args: args})
	}
	return out, nil
}

// unwrapString returns the JSON a JSON string holds, or raw itself.
func unwrapString(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return raw, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return json.RawMessage(strings.TrimSpace(s)), nil
}

func isNullJSON(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// ParseRID splits a generate-stage request id "<escaped id>#<turn>.<attempt>;"
// into the conversation id (with "%3B" and "%25" unescaped back to ";" and
// "%") and the turn, the 0-based index of the assistant turn among the
// conversation's assistant messages. ok is false for any other rid.
func ParseRID(rid string) (id string, turn int, ok bool) {
	base, found := strings.CutSuffix(rid, ";")
	if !found {
		return "", 0, false
	}
	dot := strings.LastIndexByte(base, '.')
	if dot < 0 || !allDigits(base[dot+1:]) {
		return "", 0, false
	}
	base = base[:dot]
	hash := strings.LastIndexByte(base, '#')
	if hash < 0 || !allDigits(base[hash+1:]) {
		return "", 0, false
	}
	turn, err := strconv.Atoi(base[hash+1:])
	if err != nil {
		return "", 0, false
	}
	esc := base[:hash]
	if strings.Contains(esc, ";") {
		return "", 0, false
	}
	return strings.NewReplacer("%3B", ";", "%25", "%").Replace(esc), turn, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Diverges reports whether the scripted reply of turn turn of conversation
// id, when that turn has tool calls, diverges from the original call: a
// share rate of (id, turn) pairs do, decided by a hash of (seed, id, turn)
// alone, so every attempt at a turn decides the same.
func Diverges(seed int64, rate float64, id string, turn int) bool {
	if rate <= 0 {
		return false
	}
	if rate >= 1 {
		return true
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte("tool-divergence\x00"))
	h.Write([]byte(id))
	binary.LittleEndian.PutUint64(b[:], uint64(turn))
	h.Write(b[:])
	return float64(h.Sum64()>>11)/float64(1<<53) < rate
}

// scriptFor returns the scripted reply (as the sim's byte tokens) for rid,
// and the length of its reasoning segment through the end marker; nil when
// scripting is off or rid names no known assistant turn.
func (s *Server) scriptFor(rid string) ([]int32, int) {
	if s.cfg.ReplyFormat == "" || s.scripts == nil {
		return nil, 0
	}
	id, turn, ok := ParseRID(rid)
	if !ok {
		return nil, 0
	}
	turns := s.scripts[id]
	if turn < 0 || turn >= len(turns) {
		return nil, 0
	}
	t := &turns[turn]
	div := len(t.calls) > 0 && Diverges(s.cfg.Seed, s.cfg.ToolDivergenceRate, id, turn)
	text, reasonLen := renderReply(s.cfg.ReplyFormat, t, turn, div)
	ids := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int32(text[i])
	}
	return ids, reasonLen
}

// ScriptedReply returns the text a server with cfg answers for rid's turn
// (before the EOS token), and whether rid has one. It is what tests compare
// /generate's text with; it loads cfg.Conversations on every call.
func ScriptedReply(cfg Config, rid string) (string, bool, error) {
	if cfg.ReplyFormat == "" || cfg.Conversations == "" {
		return "", false, nil
	}
	scripts, _, _, err := loadConversations(cfg.Conversations)
	if err != nil {
		return "", false, err
	}
	s := &Server{cfg: cfg, scripts: scripts}
	ids, _ := s.scriptFor(rid)
	if ids == nil {
		return "", false, nil
	}
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b), true, nil
}

// renderReply writes turn t in format, and returns the text and the byte
// length of its reasoning segment (through the end marker; 0 without one).
func renderReply(format string, t *scriptTurn, turn int, diverge bool) (string, int) {
	var b strings.Builder
	reasoning := t.reasoning
	if !t.hasReason || strings.TrimSpace(reasoning) == "" {
		reasoning = fmt.Sprintf("Simulated reasoning for assistant turn %d.", turn)
	}
	reasoning, content := asciiText(reasoning), asciiText(t.content)
	args := make([]string, len(t.calls))
	for i, c := range t.calls {
		args[i] = scriptArgs(c.args, diverge && i == 0)
	}
	name := func(i int) string { return asciiJSON(t.calls[i].name) }
	reasonLen := 0
	switch format {
	case ReplyQwen3:
		b.WriteString("<think>\n" + reasoning + "\n</think>")
		reasonLen = b.Len()
		b.WriteString("\n\n" + content)
		for i := range t.calls {
			if i > 0 || content != "" {
				b.WriteString("\n")
			}
			b.WriteString("<tool_call>\n{\"name\": " + name(i) + ", \"arguments\": " + args[i] + "}\n</tool_call>")
		}
	case ReplyKimiK2:
		b.WriteString("<think>" + reasoning + "</think>")
		reasonLen = b.Len()
		b.WriteString(content)
		if len(t.calls) > 0 {
			b.WriteString("<|tool_calls_section_begin|>")
			for i, c := range t.calls {
				b.WriteString("<|tool_call_begin|>functions." + asciiText(c.name) + ":" + strconv.Itoa(t.callBase+i) +
					"<|tool_call_argument_begin|>" + args[i] + "<|tool_call_end|>")
			}
			b.WriteString("<|tool_calls_section_end|>")
		}
	case ReplyLlama3:
		if len(t.calls) == 0 {
			b.WriteString(content)
		}
		for i := range t.calls {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString("{\"name\": " + name(i) + ", \"parameters\": " + args[i] + "}")
		}
	case ReplyDeepSeekV3:
		b.WriteString("<think>" + reasoning + "</think>")
		reasonLen = b.Len()
		b.WriteString(content)
		if len(t.calls) > 0 {
			b.WriteString("<｜tool▁calls▁begin｜>")
			for i, c := range t.calls {
				if i > 0 {
					b.WriteString("\n")
				}
				b.WriteString("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + asciiText(c.name) +
					"\n```json\n" + args[i] + "\n```<｜tool▁call▁end｜>")
			}
			b.WriteString("<｜tool▁calls▁end｜>")
		}
	}
	return b.String(), reasonLen
}

// scriptArgs re-marshals a call's arguments (keys sorted, ASCII only) and,
// when diverge is set, changes them: the first key's value (in sorted
// order) becomes another value of its kind, or an object without keys gets
// the key "sim_diverged".
func scriptArgs(raw json.RawMessage, diverge bool) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		v = map[string]any{}
	}
	if diverge {
		obj, ok := v.(map[string]any)
		if !ok {
			obj = map[string]any{"sim_original": v}
			v = obj
		}
		if len(obj) == 0 {
			obj["sim_diverged"] = true
		} else {
			keys := make([]string, 0, len(obj))
			for k := range obj {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			obj[keys[0]] = divergedValue(obj[keys[0]])
		}
	}
	return asciiJSON(v)
}

// divergedValue is a value unequal to v as JSON.
func divergedValue(v any) any {
	switch x := v.(type) {
	case string:
		return x + " (diverged)"
	case bool:
		return !x
	case json.Number:
		if f, err := x.Float64(); err == nil && !math.IsInf(f+1, 0) && f+1 != f {
			return json.Number(strconv.FormatFloat(f+1, 'g', -1, 64))
		}
		return "diverged"
	default: // null, list, object
		return "diverged"
	}
}

// asciiJSON marshals v without HTML escaping and with every non-ASCII rune
// written as a \uXXXX escape (a surrogate pair above the BMP): the same JSON
// value in ASCII bytes.
func asciiJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "null"
	}
	s := strings.TrimSuffix(buf.String(), "\n")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// asciiText replaces every non-ASCII rune of s with an ASCII escape:
// \uXXXX for the BMP, \UXXXXXXXX above it (Python and Go spell them so).
func asciiText(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			var b strings.Builder
			for _, r := range s {
				switch {
				case r < utf8.RuneSelf:
					b.WriteRune(r)
				case r > 0xFFFF:
					fmt.Fprintf(&b, `\U%08X`, r)
				default:
					fmt.Fprintf(&b, `\u%04X`, r)
				}
			}
			return b.String()
		}
	}
	return s
}

// loadScripts loads Config.Conversations when replies are scripted.
func (s *Server) loadScripts() error {
	if s.cfg.ReplyFormat == "" || s.cfg.Conversations == "" {
		return nil
	}
	scripts, noID, bad, err := loadConversations(s.cfg.Conversations)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		s.log.Warn("conversation lines that are not a usable row were skipped (ingest rejects them too)",
			"lines", len(bad), "first", bad[0], "conversations", s.cfg.Conversations)
	}
	s.scripts = scripts
	turns := 0
	for _, t := range scripts {
		turns += len(t)
	}
	s.log.Info("scripted replies loaded", "conversations", s.cfg.Conversations, "format", s.cfg.ReplyFormat,
		"rows", len(scripts), "assistant_turns", turns, "rows_without_id_skipped", noID,
		"tool_divergence_rate", s.cfg.ToolDivergenceRate)
	if noID > 0 {
		s.log.Warn("conversation rows without an id cannot be matched to a request id and were skipped",
			"rows", noID, "conversations", s.cfg.Conversations)
	}
	return nil
}
