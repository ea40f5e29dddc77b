package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/draftflow/draftflow/topics"
)

// Reason classifies why a line was rejected. It is the "reason" label of the rejected-lines metric; the
// Rejection record carries the full, human-readable message.
type Reason string

// Rejection reasons.
const (
	ReasonInvalidJSON        Reason = "invalid_json"
	ReasonInvalidUTF8        Reason = "invalid_utf8"
	ReasonLineTooLong        Reason = "line_too_long"
	ReasonEmptyConversation  Reason = "empty_conversation"
	ReasonUnknownRole        Reason = "unknown_role"
	ReasonNoUserMessage      Reason = "no_user_message"
	ReasonUnsupportedContent Reason = "unsupported_content"
	ReasonBadField           Reason = "bad_field"
	ReasonDuplicateID        Reason = "duplicate_id"
	// ReasonNoText: a message with none of the keys that hold its text ("content", ShareGPT's "value"), such
	// as a misspelt "valeu", and no tool calls; the reason names the keys it has.
	ReasonNoText Reason = "no_text"
	// ReasonTooLarge: the prompt's record is over the message size limit, the client's or the topic's
	// (kafka/stream's class too_large, the same in every stage).
	ReasonTooLarge Reason = "too_large"
	// ReasonCorruptFile: the rest of an input file cannot be read (a corrupt compressed stream or Parquet
	// file); it is rejected from the line or row where reading stopped.
	ReasonCorruptFile Reason = "corrupt_file"
	// ReasonWrongSchema: a Parquet file without a "messages", "conversations" or "input_ids" column.
	ReasonWrongSchema Reason = "wrong_schema"
	// ReasonBadIDs: a row's "input_ids" or "output_ids" is not a list of token ids (integers in [0, 2^32)).
	ReasonBadIDs Reason = "bad_ids"
	// ReasonEmptyIDs: a row's "input_ids" or "output_ids" is an empty list.
	ReasonEmptyIDs Reason = "empty_ids"
	// ReasonBadMask: a row's "loss_mask" is not one 0 or 1 per input id with a 1 after a prompt.
	ReasonBadMask Reason = "bad_loss_mask"
	// ReasonAborted: a /generate result whose finish reason is abort.
	ReasonAborted Reason = "aborted"
	// ReasonNoReply: under `replies: keep`, a conversation with no assistant reply after a user message.
	ReasonNoReply Reason = "no_reply"
)

// FileError says why the rest of an input file, from Line on, could not be read. Ingest dead-letters it as
// one rejection (reason ReasonCorruptFile or ReasonWrongSchema, with the file and the line) and goes on with
// the next file; the lines before Line were read as usual.
type FileError struct {
	// Path is the input file.
	Path string
	// Line is the first line (JSONL) or row (Parquet) not read, 1-based.
	Line int64
	// Err is a *LineError with the reason and the detail.
	Err *LineError
}

func (e *FileError) Error() string {
	return fmt.Sprintf("ingest: %s: unreadable from line %d on: %s", e.Path, e.Line, e.Err.Detail)
}

func (e *FileError) Unwrap() error { return e.Err }

func fileErr(path string, line int64, r Reason, format string, args ...any) *FileError {
	return &FileError{Path: path, Line: line, Err: lineErr(r, format, args...)}
}

// LineError says why one input line (or Parquet row) is not a usable conversation.
type LineError struct {
	// Reason classifies the problem.
	Reason Reason
	// Detail is the message a user reads, naming the problem and where in the line it is.
	Detail string
}

func (e *LineError) Error() string { return e.Detail }

func lineErr(r Reason, format string, args ...any) *LineError {
	return &LineError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason of a LineError anywhere in err's chain, or "" if there is none.
func ReasonOf(err error) Reason {
	var le *LineError
	if errors.As(err, &le) {
		return le.Reason
	}
	return ""
}

// MaxIDBytes bounds a dataset-provided id; ids are Kafka keys and Parquet values.
const MaxIDBytes = 512

// HashIDPrefix starts every id derived from content rather than taken from the row.
const HashIDPrefix = "h-"

// wireRow is one input row before validation. Every field stays raw so that type errors can be reported
// with the field's name.
type wireRow struct {
	ID            json.RawMessage
	Messages      json.RawMessage
	Conversations json.RawMessage
	Tools         json.RawMessage
	// Functions is the row's "functions" (OpenAI's legacy name for tools, BFCL's rows) or "function": bare
	// function schemas, read as tools when the row has no "tools".
	Functions, FunctionsKey json.RawMessage
	// InputIDs, OutputIDs, LossMask, Turn, FinishReason, MetaInfo and Metadata are the keys of a row of token
	// ids (tokens.go).
	InputIDs, OutputIDs, LossMask, Turn, FinishReason, MetaInfo, Metadata json.RawMessage
	// Keys are every key of the row, sorted.
	Keys []string
	// Unknown are the row's keys its shape does not read, sorted (nil when none): reported once per dataset.
	Unknown []string
}

// conversationKeys are the row-level keys a conversation is read from; a row's other keys are reported (Run
// logs them once per dataset) and ignored. A row of token ids is read from tokenKeys.
var conversationKeys = []string{"id", "messages", "conversations", "tools", "functions", "function"}

// rowKeys are the keys of either shape: the Parquet columns ingest reads.
var rowKeys = append(slices.Clone(conversationKeys), slices.DeleteFunc(slices.Clone(tokenKeys), func(k string) bool {
	return slices.Contains(conversationKeys, k)
})...)

// decodeRow decodes a JSON object into a wireRow.
func decodeRow(data []byte, row *wireRow) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	for k, v := range m {
		row.Keys = append(row.Keys, k)
		switch k {
		case "id":
			row.ID = v
		case "messages":
			row.Messages = v
		case "conversations":
			row.Conversations = v
		case "tools":
			row.Tools = v
		case "functions", "function":
			if isNull(row.Functions) || k == "functions" {
				row.Functions, row.FunctionsKey = v, json.RawMessage(k)
			}
		case "input_ids":
			row.InputIDs = v
		case "output_ids":
			row.OutputIDs = v
		case "loss_mask":
			row.LossMask = v
		case "turn":
			row.Turn = v
		case "finish_reason":
			row.FinishReason = v
		case "meta_info":
			row.MetaInfo = v
		case "metadata":
			row.Metadata = v
		}
	}
	slices.Sort(row.Keys)
	read := conversationKeys
	if !isNull(row.InputIDs) {
		read = tokenKeys
	}
	for _, k := range row.Keys {
		if !slices.Contains(read, k) {
			row.Unknown = append(row.Unknown, k)
		}
	}
	return nil
}

type wireMessage struct {
	Role             json.RawMessage `json:"role"`
	From             json.RawMessage `json:"from"`
	Content          json.RawMessage `json:"content"`
	Value            json.RawMessage `json:"value"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	ToolCallID       json.RawMessage `json:"tool_call_id"`
	Name             json.RawMessage `json:"name"`
}

// roles maps every accepted role or ShareGPT "from" value (lower-cased) to the chat-template role.
var roles = map[string]string{
	"system":            "system",
	"developer":         "system",
	"user":              "user",
	"human":             "user",
	"assistant":         "assistant",
	"gpt":               "assistant",
	"chatgpt":           "assistant",
	"bard":              "assistant",
	"bing":              "assistant",
	"model":             "assistant",
	"function_call":     "assistant", // ShareGPT tool call: the value is the call
	"tool":              "tool",
	"function":          "tool",
	"observation":       "tool",
	"ipython":           "tool",
	"function_response": "tool",
	"tool_response":     "tool",
}

// Parse turns one JSONL line into a Prompt of dataset, located at file:line, for the dataset setting
// `turns: last`: the conversation up to its last user message, to regenerate the assistant turn after it.
// It returns a *LineError when the line is not a usable conversation (a row of token ids is not one: see
// ParseRows). Sampling is left zero: per-dataset settings are applied by Run.
func Parse(file string, line int64, data []byte, dataset string) (topics.Prompt, error) {
	p, err := ParseAll(file, line, data, dataset)
	if err != nil {
		return p, err
	}
	return LastTurn(p), nil
}

// ParseAll is Parse for `turns: all`: the Prompt of the conversation's first assistant turn after a user
// message, with the rest of the conversation (that turn's original reply first) in Rest, from which each
// later turn is built once the previous one is generated (topics.Generation.Next). A conversation with no
// assistant message after its first user message is a single prompt up to its last user message, as for
// Parse.
func ParseAll(file string, line int64, data []byte, dataset string) (topics.Prompt, error) {
	ps, _, err := parseRow(file, line, data, dataset)
	if err != nil {
		return topics.Prompt{}, err
	}
	if topics.Kept(ps[0].Origin) {
		return topics.Prompt{}, lineErr(ReasonBadField, "a row of token ids (%q), not a conversation: its rows are brought in as they are (ParseRows)",
			"input_ids")
	}
	return ps[0], nil
}

// ParseRows returns every Prompt a line makes: for a conversation, ParseAll's; for a row of token ids (a line
// with "input_ids", see tokens.go), the rows it brings with their output (topics.Kept), one per run of its loss
// mask. It returns a *LineError when the line is neither.
func ParseRows(file string, line int64, data []byte, dataset string) ([]topics.Prompt, error) {
	ps, _, err := parseRow(file, line, data, dataset)
	return ps, err
}

// parseRow is ParseRows, also returning the row's keys it does not read (sorted; nil when none).
func parseRow(file string, line int64, data []byte, dataset string) ([]topics.Prompt, []string, error) {
	var row wireRow
	ps, err := parseWire(file, line, data, dataset, &row)
	return ps, row.Unknown, err
}

// parseWire decodes one line into row and returns the Prompts it makes (tokens.go for a row of token ids).
func parseWire(file string, line int64, data []byte, dataset string, row *wireRow) ([]topics.Prompt, error) {
	src := topics.Source{File: file, Line: line}
	if !utf8.Valid(data) {
		return nil, lineErr(ReasonInvalidUTF8, "invalid UTF-8 at byte %d", invalidUTF8Offset(data))
	}
	trimmed := bytes.Trim(data, " \t\r\n") // JSON whitespace only
	if len(trimmed) == 0 {
		return nil, lineErr(ReasonInvalidJSON, "invalid JSON: empty line")
	}
	if err := decodeRow(trimmed, row); err != nil || trimmed[0] != '{' {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, lineErr(ReasonInvalidJSON, "invalid JSON at byte %d: %v", se.Offset, se)
		}
		return nil, lineErr(ReasonInvalidJSON, "invalid row: a JSON %s, want an object", jsonKind(trimmed))
	}
	if off := loneSurrogate(trimmed); off >= 0 {
		// encoding/json would silently turn it into U+FFFD; Python tokenizers would fail on it.
		return nil, lineErr(ReasonInvalidUTF8, "invalid Unicode: a lone UTF-16 surrogate escape %s at byte %d",
			trimmed[off:off+6], off+len(data)-len(bytes.TrimLeft(data, " \t\r\n")))
	}
	if !isNull(row.InputIDs) {
		return parseTokenRow(src, dataset, row)
	}
	p, err := parseConversation(src, dataset, trimmed, row)
	if err != nil {
		return nil, err
	}
	return []topics.Prompt{p}, nil
}

// parseConversation reads the conversation of a decoded row.
func parseConversation(src topics.Source, dataset string, trimmed []byte, row *wireRow) (topics.Prompt, error) {

	field, rawMsgs := "messages", row.Messages
	if isNull(rawMsgs) {
		field, rawMsgs = "conversations", row.Conversations
	}
	if isNull(rawMsgs) {
		return topics.Prompt{}, lineErr(ReasonEmptyConversation, "empty conversation: no \"messages\" or \"conversations\" field, "+
			"nor \"input_ids\" of a row of token ids (the row's keys: %s)", quotedKeys(trimmed))
	}
	rawMsgs, err := unwrapJSONString(rawMsgs, field)
	if err != nil {
		return topics.Prompt{}, err
	}
	if rawMsgs[0] != '[' {
		return topics.Prompt{}, lineErr(ReasonBadField, "%q is a %s, want a list of messages", field, jsonKind(rawMsgs))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(rawMsgs, &items); err != nil {
		return topics.Prompt{}, lineErr(ReasonBadField, "%q: %v", field, err)
	}
	if len(items) == 0 {
		return topics.Prompt{}, lineErr(ReasonEmptyConversation, "empty conversation: %q has no messages", field)
	}
	msgs := make([]topics.Message, 0, len(items))
	lastUser := -1
	for i, item := range items {
		m, err := parseMessage(fmt.Sprintf("%s[%d]", field, i), item)
		if err != nil {
			return topics.Prompt{}, err
		}
		if m.Role == "user" {
			lastUser = i
		}
		msgs = append(msgs, m)
	}
	if lastUser < 0 {
		return topics.Prompt{}, lineErr(ReasonNoUserMessage, "no user message among the %d messages of %q (roles: %s)",
			len(msgs), field, roleList(msgs))
	}

	tools, err := parseTools(row.Tools)
	if err != nil {
		return topics.Prompt{}, err
	}
	if !isNull(row.Functions) {
		if tools != nil {
			return topics.Prompt{}, lineErr(ReasonBadField, "the row has both \"tools\" and %q; give the tools once", row.FunctionsKey)
		}
		if tools, err = parseFunctions(row.Functions, string(row.FunctionsKey)); err != nil {
			return topics.Prompt{}, err
		}
	}
	id, err := parseID(row.ID)
	if err != nil {
		return topics.Prompt{}, err
	}
	if id == "" {
		id = ContentID(msgs, tools)
	}

	p := topics.Prompt{ID: id, Dataset: dataset, Tools: tools, Source: src}
	firstUser := slices.IndexFunc(msgs, func(m topics.Message) bool { return m.Role == "user" })
	split := -1
	for i := firstUser + 1; i < len(msgs); i++ {
		if msgs[i].Role == "assistant" {
			split = i
			break
		}
	}
	if split < 0 {
		p.Messages = msgs[: lastUser+1 : lastUser+1]
	} else {
		p.Messages, p.Rest = msgs[:split:split], msgs[split:]
	}
	p.Turn = assistantTurns(p.Messages)
	return p, nil
}

// LastTurn turns a Prompt of ParseAll into the one Parse gives: its whole conversation up to the last user
// message, with no Rest.
func LastTurn(p topics.Prompt) topics.Prompt {
	if len(p.Rest) == 0 {
		return p
	}
	all := slices.Concat(p.Messages, p.Rest)
	lastUser := 0
	for i, m := range all {
		if m.Role == "user" {
			lastUser = i
		}
	}
	p.Messages, p.Rest = all[:lastUser+1:lastUser+1], nil
	p.Turn = assistantTurns(p.Messages)
	return p
}

// assistantTurns is the index of the turn that answers msgs: how many assistant messages it holds.
func assistantTurns(msgs []topics.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

func parseMessage(where string, raw json.RawMessage) (topics.Message, error) {
	if raw[0] != '{' {
		return topics.Message{}, lineErr(ReasonBadField, "%s is a %s, want a message object", where, jsonKind(raw))
	}
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		return topics.Message{}, lineErr(ReasonBadField, "%s: %v", where, err)
	}
	roleField, rawRole := "role", w.Role
	if isNull(rawRole) {
		roleField, rawRole = "from", w.From
	}
	if isNull(rawRole) {
		return topics.Message{}, lineErr(ReasonUnknownRole, "%s has no role (neither \"role\" nor \"from\")", where)
	}
	given, err := stringField(rawRole, where+"."+roleField)
	if err != nil {
		return topics.Message{}, err
	}
	key := strings.ToLower(strings.TrimSpace(given))
	role, ok := roles[key]
	if !ok {
		return topics.Message{}, lineErr(ReasonUnknownRole, "unknown role %q in %s (want system, user, assistant or tool, or a ShareGPT from value)", given, where)
	}

	if len(w.Content) == 0 && len(w.Value) == 0 && isNull(w.ToolCalls) && isNull(w.ReasoningContent) {
		// No key holds the message's text (a null content is a key present): a misspelt key would otherwise
		// become an empty message and be generated from.
		return topics.Message{}, lineErr(ReasonNoText, "%s has no text: its keys are %s; the text is under \"content\" "+
			"(or ShareGPT's \"value\"), or an assistant message has \"tool_calls\"", where, quotedKeys(raw))
	}
	contentField, rawContent := "content", w.Content
	if isNull(rawContent) && !isNull(w.Value) {
		contentField, rawContent = "value", w.Value
	}
	m := topics.Message{Role: role}
	if m.Content, err = contentText(rawContent, where+"."+contentField); err != nil {
		return topics.Message{}, err
	}
	if !isNull(rawContent) && rawContent[0] == '[' {
		m.ContentParts = compact(rawContent)
	}
	// An explicit null (not a missing key) reaches the chat template as None, as it does in transformers.
	m.ContentNull = string(rawContent) == "null"
	if m.ReasoningContent, err = optString(w.ReasoningContent, where+".reasoning_content"); err != nil {
		return topics.Message{}, err
	}
	if m.ToolCallID, err = optStringOrNumber(w.ToolCallID, where+".tool_call_id"); err != nil {
		return topics.Message{}, err
	}
	if m.Name, err = optString(w.Name, where+".name"); err != nil {
		return topics.Message{}, err
	}
	if m.ToolCalls, err = parseToolCalls(w.ToolCalls, where+".tool_calls"); err != nil {
		return topics.Message{}, err
	}
	if key == "function_call" && m.ToolCalls == nil {
		// ShareGPT tool-use datasets (glaive, ToolACE, xLAM) put the call as JSON in the value.
		if calls := shareGPTCalls(m.Content); calls != nil {
			m.ToolCalls, m.Content = calls, ""
		}
	}
	return m, nil
}

// contentText returns the text of a content field: a string, null (empty), or a list of text parts joined
// with a newline (as vLLM and SGLang join them). A list is also kept as given (Message.ContentParts), for
// chat templates.
func contentText(raw json.RawMessage, where string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", lineErr(ReasonBadField, "%s: %v", where, err)
		}
		return s, nil
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", lineErr(ReasonBadField, "%s: %v", where, err)
		}
		texts := make([]string, 0, len(parts))
		for j, p := range parts {
			pw := fmt.Sprintf("%s[%d]", where, j)
			if p[0] == '"' {
				var s string
				_ = json.Unmarshal(p, &s)
				texts = append(texts, s)
				continue
			}
			if p[0] != '{' {
				return "", lineErr(ReasonBadField, "%s is a %s, want a content part object", pw, jsonKind(p))
			}
			var part struct {
				Type json.RawMessage `json:"type"`
				Text json.RawMessage `json:"text"`
			}
			if err := json.Unmarshal(p, &part); err != nil {
				return "", lineErr(ReasonBadField, "%s: %v", pw, err)
			}
			typ := "text"
			if !isNull(part.Type) {
				t, err := stringField(part.Type, pw+".type")
				if err != nil {
					return "", err
				}
				typ = t
			}
			switch typ {
			case "text", "input_text", "output_text":
			default:
				return "", lineErr(ReasonUnsupportedContent, "%s is a content part of type %q; only text content is supported", pw, typ)
			}
			if isNull(part.Text) {
				return "", lineErr(ReasonBadField, "%s is a text part without \"text\"", pw)
			}
			s, err := stringField(part.Text, pw+".text")
			if err != nil {
				return "", err
			}
			texts = append(texts, s)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", lineErr(ReasonBadField, "%s is a %s, want a string or a list of text parts", where, jsonKind(raw))
}

// parseToolCalls validates an assistant's tool_calls (a list of objects, or a JSON string holding one) and
// returns it compacted, keys in their original order (chat templates render them in that order).
func parseToolCalls(raw json.RawMessage, where string) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	raw, err := unwrapJSONString(raw, where)
	if err != nil {
		return nil, err
	}
	if raw[0] == '{' { // a single call
		raw = append(append([]byte{'['}, raw...), ']')
	}
	if raw[0] != '[' {
		return nil, lineErr(ReasonBadField, "%s is a %s, want a list of tool calls", where, jsonKind(raw))
	}
	var calls []json.RawMessage
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, lineErr(ReasonBadField, "%s: %v", where, err)
	}
	if len(calls) == 0 {
		return nil, nil
	}
	for j, c := range calls {
		if c[0] != '{' {
			return nil, lineErr(ReasonBadField, "%s[%d] is a %s, want a tool call object", where, j, jsonKind(c))
		}
	}
	return compact(raw), nil
}

// parseTools validates the row-level tool list: a list of objects, or a JSON string holding one.
func parseTools(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	raw, err := unwrapJSONString(raw, "tools")
	if err != nil {
		return nil, err
	}
	if raw[0] != '[' {
		return nil, lineErr(ReasonBadField, "\"tools\" is a %s, want a list of tool schemas", jsonKind(raw))
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, lineErr(ReasonBadField, "\"tools\": %v", err)
	}
	if len(tools) == 0 {
		return nil, nil
	}
	for j, t := range tools {
		if t[0] != '{' {
			return nil, lineErr(ReasonBadField, "tools[%d] is a %s, want a tool schema object", j, jsonKind(t))
		}
	}
	return compact(raw), nil
}

// parseFunctions reads a row's legacy "functions" (or BFCL's "function"): a list of bare function schemas
// ({"name", "description", "parameters"}), each of which becomes the tool {"type": "function", "function": it};
// an item already shaped as a tool is kept as it is.
func parseFunctions(raw json.RawMessage, key string) (json.RawMessage, error) {
	raw, err := unwrapJSONString(raw, key)
	if err != nil {
		return nil, err
	}
	if raw[0] == '{' { // a single function
		raw = append(append([]byte{'['}, raw...), ']')
	}
	if raw[0] != '[' {
		return nil, lineErr(ReasonBadField, "%q is a %s, want a list of function schemas", key, jsonKind(raw))
	}
	var fns []json.RawMessage
	if err := json.Unmarshal(raw, &fns); err != nil {
		return nil, lineErr(ReasonBadField, "%q: %v", key, err)
	}
	if len(fns) == 0 {
		return nil, nil
	}
	var out bytes.Buffer
	out.WriteByte('[')
	for j, f := range fns {
		if f[0] != '{' {
			return nil, lineErr(ReasonBadField, "%s[%d] is a %s, want a function schema object", key, j, jsonKind(f))
		}
		var shape struct {
			Name     json.RawMessage `json:"name"`
			Function json.RawMessage `json:"function"`
		}
		if err := json.Unmarshal(f, &shape); err != nil {
			return nil, lineErr(ReasonBadField, "%s[%d]: %v", key, j, err)
		}
		if j > 0 {
			out.WriteByte(',')
		}
		switch {
		case !isNull(shape.Function): // already a tool
			out.Write(f)
		case !isNull(shape.Name):
			out.WriteString(`{"type":"function","function":`)
			out.Write(f)
			out.WriteByte('}')
		default:
			return nil, lineErr(ReasonBadField, "%s[%d] has no \"name\", want a function schema", key, j)
		}
	}
	out.WriteByte(']')
	return compact(out.Bytes()), nil
}

// quotedKeys lists the keys of a JSON object, quoted, in their order in the object ("none" when it has none).
func quotedKeys(obj []byte) string {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "none"
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		keys = append(keys, strconv.Quote(fmt.Sprint(t)))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			break
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// shareGPTCalls converts a ShareGPT function_call value ({"name", "arguments"} or a list of them) into
// OpenAI-shaped tool calls, or returns nil when the value is not such JSON.
func shareGPTCalls(value string) json.RawMessage {
	v := bytes.TrimSpace([]byte(value))
	if len(v) == 0 || !json.Valid(v) {
		return nil
	}
	if v[0] == '{' {
		v = append(append([]byte{'['}, v...), ']')
	}
	var in []struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(v, &in); err != nil || len(in) == 0 {
		return nil
	}
	type fn struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type call struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	out := make([]call, 0, len(in))
	for _, c := range in {
		if c.Name == "" {
			return nil
		}
		args := c.Arguments
		if isNull(args) {
			args = c.Parameters
		}
		if isNull(args) {
			args = json.RawMessage(`{}`)
		}
		out = append(out, call{Type: "function", Function: fn{Name: c.Name, Arguments: args}})
	}
	b, err := marshalNoEscape(out)
	if err != nil {
		return nil
	}
	return b
}

// parseID returns the row's id as text: a string as is, a number as its literal; "" when absent, null or empty.
func parseID(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var id string
	switch c := raw[0]; {
	case c == '"':
		if err := json.Unmarshal(raw, &id); err != nil {
			return "", lineErr(ReasonBadField, "id: %v", err)
		}
		id = strings.TrimSpace(id)
	case c == '-' || (c >= '0' && c <= '9'):
		id = string(raw)
	default:
		return "", lineErr(ReasonBadField, "\"id\" is a %s, want a string or a number", jsonKind(raw))
	}
	if len(id) > MaxIDBytes {
		return "", lineErr(ReasonBadField, "\"id\" is %d bytes, over the %d-byte limit", len(id), MaxIDBytes)
	}
	return id, nil
}

// ContentID returns the content-derived id of a conversation: HashIDPrefix and the first 24 hex digits of
// a SHA-256 over a canonical encoding of every normalised message (all of them, not only the prompt) and the
// tools. It depends only on the conversation, never on the dataset, file, line or input format (JSONL,
// ShareGPT, Parquet). The encoding (version 1) is compact JSON without HTML escaping,
//
//	{"v":1,"m":[{"r":role,"c":content,"rc":reasoning,"tc":tool_calls,"tid":tool_call_id,"n":name},...],"t":tools}
//
// with empty rc, tc, tid, n and t omitted, and every JSON object inside tool_calls and tools re-encoded with
// its keys sorted and number literals kept, so "hello" from a user alone is h-86c9dcad1ff17973e7396ada.
// Changing any of this changes every id: treat it as part of the data contract.
func ContentID(msgs []topics.Message, tools json.RawMessage) string {
	type canonMessage struct {
		Role       string          `json:"r"`
		Content    string          `json:"c"`
		Reasoning  string          `json:"rc,omitempty"`
		ToolCalls  json.RawMessage `json:"tc,omitempty"`
		ToolCallID string          `json:"tid,omitempty"`
		Name       string          `json:"n,omitempty"`
	}
	type canonConv struct {
		Version  int             `json:"v"`
		Messages []canonMessage  `json:"m"`
		Tools    json.RawMessage `json:"t,omitempty"`
	}
	c := canonConv{Version: 1, Messages: make([]canonMessage, len(msgs)), Tools: canonicalJSON(tools)}
	for i, m := range msgs {
		c.Messages[i] = canonMessage{Role: m.Role, Content: m.Content, Reasoning: m.ReasoningContent,
			ToolCalls: canonicalJSON(m.ToolCalls), ToolCallID: m.ToolCallID, Name: m.Name}
	}
	b, err := marshalNoEscape(c)
	if err != nil { // cannot happen: every field is a string or canonical JSON
		panic("ingest: canonical encoding: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return HashIDPrefix + hex.EncodeToString(sum[:12])
}

// canonicalJSON re-encodes JSON with object keys sorted and insignificant whitespace removed; numbers keep
// their literal text.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return compact(raw)
	}
	b, err := marshalNoEscape(v)
	if err != nil {
		return compact(raw)
	}
	return b
}

func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return append(json.RawMessage(nil), raw...)
	}
	return buf.Bytes()
}

// unwrapJSONString returns the JSON a string value holds when raw is a string (datasets sometimes store
// messages or tools double-encoded), else raw itself.
func unwrapJSONString(raw json.RawMessage, where string) (json.RawMessage, error) {
	if raw[0] != '"' {
		return raw, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, lineErr(ReasonBadField, "%s: %v", where, err)
	}
	inner := bytes.TrimSpace([]byte(s))
	if len(inner) == 0 || !json.Valid(inner) {
		return nil, lineErr(ReasonBadField, "%q is a string that does not hold JSON", where)
	}
	return inner, nil
}

func stringField(raw json.RawMessage, where string) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", lineErr(ReasonBadField, "%s is a %s, want a string", where, jsonKind(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", lineErr(ReasonBadField, "%s: %v", where, err)
	}
	return s, nil
}

func optString(raw json.RawMessage, where string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	return stringField(raw, where)
}

func optStringOrNumber(raw json.RawMessage, where string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if c := raw[0]; c == '-' || (c >= '0' && c <= '9') {
		return string(raw), nil
	}
	return stringField(raw, where)
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// jsonKind names the JSON type of a valid, trimmed value.
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "missing value"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "list"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func roleList(msgs []topics.Message) string {
	seen := map[string]bool{}
	var out []string
	for _, m := range msgs {
		if !seen[m.Role] {
			seen[m.Role] = true
			out = append(out, m.Role)
		}
	}
	return strings.Join(out, ", ")
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// loneSurrogate returns the offset of the first \uXXXX escape in valid JSON that is half of a UTF-16
// surrogate pair without its other half, or -1.
func loneSurrogate(b []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range b[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i < len(b); {
		if i+1 >= len(b) {
			break
		}
		if b[i+1] != 'u' {
			i += 2
		} else {
			r, _ := hex4(i)
			switch {
			case r >= 0xD800 && r <= 0xDBFF:
				if lo, ok := hex4(i + 6); !ok || lo < 0xDC00 || lo > 0xDFFF {
					return i
				}
				i += 12
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			default:
				i += 6
			}
		}
		next := bytes.IndexByte(b[i:], '\\')
		if next < 0 {
			break
		}
		i += next
	}
	return -1
}
