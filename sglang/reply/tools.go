package reply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A toolParser is one of SGLang's function-call detectors
// (sglang/srt/function_call/*_detector.py): has is its has_tool_call, parse
// its detect_and_parse, returning the normal text and the calls.
type toolParser struct {
	has   func(text string) bool
	parse func(text string, o Options) (normal string, calls []Call, err error)
}

// toolParsers maps SGLang's --tool-call-parser names
// (FunctionCallParser.ToolCallParserEnum) to the ported detectors.
var toolParsers = map[string]toolParser{
	"qwen25":     {has: qwen25Has, parse: qwen25Parse}, // Qwen25Detector
	"qwen":       {has: qwen25Has, parse: qwen25Parse}, // Qwen25Detector
	"llama3":     {has: llama3Has, parse: llama3Parse}, // Llama32Detector
	"kimi_k2":    {has: kimiHas, parse: kimiParse},     // KimiK2Detector
	"deepseekv3": {has: dsv3Has, parse: dsv3Parse},     // DeepSeekV3Detector
	"gpt-oss":    {has: harmonyHas, parse: harmonyParse},
}

// pyIsSpace is Python's str.isspace for one character: Go's unicode.IsSpace
// plus the four information separators U+001C..U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pyStrip is Python's str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pySpace is Python's \s in a str pattern, as a Go character class body.
const pySpace = `\t\n\v\f\r \x1c-\x1f\x85\x{2028}\x{2029}\p{Zs}`

// pyTruthy is Python's bool() of a decoded JSON value.
func pyTruthy(raw json.RawMessage) bool {
	v := bytes.TrimSpace(raw)
	switch {
	case len(v) == 0, string(v) == "null", string(v) == "false", string(v) == `""`:
		return false
	case v[0] == '{' || v[0] == '[':
		var x any
		if json.Unmarshal(v, &x) != nil {
			return true
		}
		switch x := x.(type) {
		case map[string]any:
			return len(x) > 0
		case []any:
			return len(x) > 0
		}
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		var n json.Number
		if json.Unmarshal(v, &n) == nil {
			f, err := n.Float64()
			return err != nil || f != 0
		}
	}
	return true
}

// objectArgs checks that raw (already valid JSON) is an object and returns it
// compacted.
func objectArgs(parser, snippet string, raw json.RawMessage) (json.RawMessage, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || v[0] != '{' {
		return nil, parseErr(parser, snippet, "arguments are not a JSON object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, parseErr(parser, snippet, "arguments: %v", err)
	}
	return json.RawMessage(b.Bytes()), nil
}

// baseJSONCalls is BaseFormatDetector.parse_base_json: the decoded action is
// one call object or a list of them; each has a "name" and its arguments
// under "parameters" (when truthy) or "arguments" (default {}). Where SGLang
// would skip an entry (no name) or raise (an entry that is not an object),
// this returns a *ParseError.
func baseJSONCalls(parser string, action json.RawMessage) ([]Call, error) {
	v := bytes.TrimSpace(action)
	var entries []json.RawMessage
	if len(v) > 0 && v[0] == '[' {
		if err := json.Unmarshal(v, &entries); err != nil {
			return nil, parseErr(parser, string(v), "%v", err)
		}
	} else {
		entries = []json.RawMessage{v}
	}
	calls := make([]Call, 0, len(entries))
	for _, e := range entries {
		e = bytes.TrimSpace(e)
		if len(e) == 0 || e[0] != '{' {
			return nil, parseErr(parser, string(e), "a tool call is not a JSON object")
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(e, &obj); err != nil {
			return nil, parseErr(parser, string(e), "%v", err)
		}
		var name string
		if err := json.Unmarshal(obj["name"], &name); err != nil || name == "" {
			return nil, parseErr(parser, string(e), "a tool call has no name")
		}
		args := json.RawMessage("{}")
		if p, ok := obj["parameters"]; ok && pyTruthy(p) {
			args = p
		} else if a, ok := obj["arguments"]; ok {
			args = a
		}
		// json.dumps(act.get("parameters") or act.get("arguments", {})):
		// a falsy value (null, [], "") becomes itself, which is not an object.
		args, err := objectArgs(parser, string(e), args)
		if err != nil {
			return nil, err
		}
		calls = append(calls, Call{Name: name, Arguments: args})
	}
	return calls, nil
}

// ---------------------------------------------------------------------------
// Qwen 2.5 / Qwen 3 / Hermes: qwen25_detector.py Qwen25Detector

const (
	qwenOpen  = "<tool_call>\n"
	qwenClose = "\n</tool_call>"
)

var qwenBlock = regexp.MustCompile(`(?s)` + regexp.QuoteMeta(qwenOpen) + `(.*?)` + regexp.QuoteMeta(qwenClose))

// qwen25Has is Qwen25Detector.has_tool_call: bot_token "<tool_call>\n" (with
// its newline) anywhere in the text.
func qwen25Has(text string) bool { return strings.Contains(text, qwenOpen) }

// qwen25Parse is Qwen25Detector.detect_and_parse: the normal text is what
// precedes the first "<tool_call>\n", stripped; text after or between the
// blocks is dropped. Each "<tool_call>\n…\n</tool_call>" block holds one
// JSON call (or a list of them).
func qwen25Parse(text string, _ Options) (string, []Call, error) {
	const p = "qwen25"
	normal := pyStrip(text[:strings.Index(text, qwenOpen)])
	blocks := qwenBlock.FindAllStringSubmatch(text, -1)
	if opened := strings.Count(text, qwenOpen); opened > len(blocks) {
		// SGLang drops a block that never closes.
		return "", nil, parseErr(p, text[strings.LastIndex(text, qwenOpen):], "unterminated <tool_call> block (%d opened, %d closed)", opened, len(blocks))
	}
	var calls []Call
	for _, b := range blocks {
		body := pyStrip(b[1])
		if !json.Valid([]byte(body)) {
			return "", nil, parseErr(p, body, "tool call is not valid JSON")
		}
		cs, err := baseJSONCalls(p, json.RawMessage(body))
		if err != nil {
			return "", nil, err
		}
		calls = append(calls, cs...)
	}
	return normal, calls, nil
}

// ---------------------------------------------------------------------------
// Llama 3.x JSON: llama32_detector.py Llama32Detector

const pythonTag = "<|python_tag|>"

// llama3Has is Llama32Detector.has_tool_call: <|python_tag|> anywhere, or a
// text that starts with "{" (so a plain JSON answer counts as a call).
func llama3Has(text string) bool {
	return strings.Contains(text, pythonTag) || strings.HasPrefix(text, "{")
}

// llama3Parse is Llama32Detector.detect_and_parse. The text after the first
// <|python_tag|> (or all of it, when it starts with "{") is read as JSON
// objects one after another; after each, exactly one character (the ";"
// separator, whatever it is) is skipped. Where a JSON value does not start
// right there, the braces that follow are tried as a Python dict literal
// (pyDictAt), and failing that the parser jumps to the next `{"name":`;
// here only whitespace and ";" may be jumped over, anything else is a
// *ParseError. The normal text is what preceded the tag plus
// the stripped rest after the last object read.
func llama3Parse(text string, _ Options) (string, []Call, error) {
	const p = "llama3"
	normal, action := "", text
	if before, after, ok := strings.Cut(text, pythonTag); ok {
		normal, action = before, after
	}
	var actions []json.RawMessage
	idx, safe := 0, 0
	for idx < len(action) {
		if v, n, ok := rawDecode(action[idx:]); ok {
			actions = append(actions, v)
			idx = skipChar(action, idx+n) // + len(self.tool_call_separator): one character
			safe = idx
			continue
		}
		if v, end, ok := pyDictAt(action, idx); ok {
			actions = append(actions, v)
			idx = skipChar(action, end)
			safe = idx
			continue
		}
		from := skipChar(action, idx)
		next := strings.Index(action[from:], `{"name":`)
		if next < 0 {
			break
		}
		next += from
		if skipped := strings.Trim(pyStrip(action[idx:next]), ";"); pyStrip(skipped) != "" {
			return "", nil, parseErr(p, action[idx:next], "text between tool calls is not a call")
		}
		idx = next
	}
	trailing := ""
	if safe < len(action) {
		trailing = pyStrip(action[safe:])
	}
	if len(actions) == 0 {
		return "", nil, parseErr(p, action, "no JSON tool call after the marker")
	}
	if strings.HasPrefix(trailing, "{") {
		return "", nil, parseErr(p, trailing, "tool call is not valid JSON")
	}
	var calls []Call
	for _, a := range actions {
		cs, err := baseJSONCalls(p, a)
		if err != nil {
			return "", nil, err
		}
		calls = append(calls, cs...)
	}
	return normal + trailing, calls, nil
}

// skipChar is i plus one character (Python indexes str by code point), at
// most len(s).
func skipChar(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return i + n
}

// rawDecode is Python's json.JSONDecoder().raw_decode(s): one JSON value that
// starts at s[0] (no leading whitespace), and the length it took.
func rawDecode(s string) (json.RawMessage, int, bool) {
	if s == "" || strings.ContainsRune(" \t\n\r", rune(s[0])) {
		return nil, 0, false
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return nil, 0, false
	}
	return v, int(dec.InputOffset()), true
}

// pyDictAt is the Python-dict fallback of Llama32Detector.detect_and_parse:
// from idx, the span up to the first point where "{" and "}" balance
// (counted without regard to strings, as SGLang counts), stripped, read as a
// Python dict literal (pyDictJSON) and written as JSON. It returns the JSON
// and where the span ended.
func pyDictAt(s string, idx int) (json.RawMessage, int, bool) {
	depth, end := 0, idx
	for i := idx; i < len(s); i++ {
		if s[i] == '{' {
			depth++
		} else if s[i] == '}' {
			depth--
			if depth == 0 {
				end = i + 1
				break
			}
		}
	}
	if end <= idx {
		return nil, 0, false
	}
	v, ok := pyDictJSON(pyStrip(s[idx:end]))
	return v, end, ok
}

// ---------------------------------------------------------------------------
// Kimi K2: kimik2_detector.py KimiK2Detector

const kimiSection = "<|tool_calls_section_begin|>"

var (
	// KimiK2Detector.tool_call_regex, with Python's Unicode \s.
	kimiCall = regexp.MustCompile(`(?s)<\|tool_call_begin\|>[` + pySpace + `]*([^` + pySpace + `<|]+)[` + pySpace + `]*<\|tool_call_argument_begin\|>[` + pySpace + `]*(\{.*?\})[` + pySpace + `]*<\|tool_call_end\|>`)
	// KimiK2Detector.tool_call_id_regex ("functions.NAME:IDX", "NAME:IDX"),
	// with Python's Unicode \w and \d.
	kimiID = regexp.MustCompile(`^(?:functions\.)?([\p{L}\p{N}_.\-]+):(\p{Nd}+)$`)
	// tool_call_id_counter_regex: a bare counter the model may write instead.
	kimiCounter = regexp.MustCompile(`^\p{Nd}+$`)
)

// kimiHas is KimiK2Detector.has_tool_call: the section-begin token anywhere.
func kimiHas(text string) bool { return strings.Contains(text, kimiSection) }

// kimiParse is KimiK2Detector.detect_and_parse: the normal text is what
// precedes the section (not stripped); every
// <|tool_call_begin|>ID<|tool_call_argument_begin|>{…}<|tool_call_end|> in
// the text is a call, named by its id. SGLang passes the arguments through
// unchecked; here they must be a JSON object.
func kimiParse(text string, o Options) (string, []Call, error) {
	const p = "kimi_k2"
	normal := text[:strings.Index(text, kimiSection)]
	matches := kimiCall.FindAllStringSubmatch(text, -1)
	if len(matches) == 0 {
		return "", nil, parseErr(p, text[strings.Index(text, kimiSection):], "tool-call section holds no complete call")
	}
	if begun := strings.Count(text, "<|tool_call_begin|>"); begun > len(matches) {
		return "", nil, parseErr(p, text[strings.Index(text, kimiSection):], "%d tool calls begun, %d complete", begun, len(matches))
	}
	calls := make([]Call, 0, len(matches))
	for _, m := range matches {
		id, args := m[1], m[2]
		var name string
		if idm := kimiID.FindStringSubmatch(id); idm != nil {
			name = idm[1]
		} else if kimiCounter.MatchString(id) && len(o.Functions) == 1 {
			// _infer_tool_name: the only tool offered.
			name = o.Functions[0]
		} else {
			return "", nil, parseErr(p, m[0], "call id %q names no function", id)
		}
		if !json.Valid([]byte(args)) {
			return "", nil, parseErr(p, args, "tool call arguments are not valid JSON")
		}
		a, err := objectArgs(p, args, json.RawMessage(args))
		if err != nil {
			return "", nil, err
		}
		calls = append(calls, Call{Name: name, Arguments: a, ID: id})
	}
	return normal, calls, nil
}

// ---------------------------------------------------------------------------
// DeepSeek V3: deepseekv3_detector.py DeepSeekV3Detector

const dsv3Begin = "<｜tool▁calls▁begin｜>"

var (
	// func_call_regex and func_detail_regex.
	dsv3Call   = regexp.MustCompile("(?s)<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>")
	dsv3Detail = regexp.MustCompile("(?s)<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>")
)

// dsv3Has is DeepSeekV3Detector.has_tool_call.
func dsv3Has(text string) bool { return strings.Contains(text, dsv3Begin) }

// dsv3Parse is DeepSeekV3Detector.detect_and_parse: the normal text is what
// precedes <｜tool▁calls▁begin｜>, stripped; each
// <｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
// is a call whose name is taken as written (not stripped) and whose ARGS,
// when falsy (null, {}, []), become {}. Where any call fails SGLang keeps the
// whole text as content and no calls; here that is a *ParseError.
func dsv3Parse(text string, _ Options) (string, []Call, error) {
	const p = "deepseekv3"
	normal := pyStrip(text[:strings.Index(text, dsv3Begin)])
	blocks := dsv3Call.FindAllString(text, -1)
	if len(blocks) == 0 {
		return "", nil, parseErr(p, text[strings.Index(text, dsv3Begin):], "tool-call section holds no complete call")
	}
	if begun := strings.Count(text, "<｜tool▁call▁begin｜>"); begun > len(blocks) {
		return "", nil, parseErr(p, text[strings.Index(text, dsv3Begin):], "%d tool calls begun, %d complete", begun, len(blocks))
	}
	calls := make([]Call, 0, len(blocks))
	for _, b := range blocks {
		d := dsv3Detail.FindStringSubmatch(b)
		if d == nil {
			return "", nil, parseErr(p, b, "tool call is not TYPE<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```")
		}
		if !json.Valid([]byte(d[3])) {
			return "", nil, parseErr(p, d[3], "tool call arguments are not valid JSON")
		}
		obj, err := json.Marshal(map[string]json.RawMessage{"name": mustJSONString(d[2]), "parameters": json.RawMessage(d[3])})
		if err != nil {
			return "", nil, parseErr(p, b, "%v", err)
		}
		cs, err := baseJSONCalls(p, obj)
		if err != nil {
			return "", nil, err
		}
		calls = append(calls, cs...)
	}
	return normal, calls, nil
}

func mustJSONString(s string) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("reply: marshal string: %v", err))
	}
	return b
}
