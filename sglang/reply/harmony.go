package reply

import (
	"encoding/json"
	"regexp"
	"strings"
)

// gpt-oss's harmony format, ported from sglang/srt/parser/harmony_parser.py
// (HarmonyParser, CanonicalStrategy, TextStrategy), GptOssDetector in
// parser/reasoning_parser.py and GptOssDetector in
// function_call/gpt_oss_detector.py. Channel analysis is reasoning, final
// is content, commentary ending in <|call|> is a tool call
// ("to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>"), other
// commentary is content.

type hEvent struct {
	kind    string // "normal", "reasoning", "tool_call"
	content string
	raw     string
}

type hToken struct {
	kind       string // TEXT START CHANNEL MESSAGE CONSTRAIN END CALL RETURN
	start, end int
}

var harmonyLiterals = []struct{ lit, kind string }{
	{"<|start|>", "START"},
	{"<|channel|>", "CHANNEL"},
	{"<|message|>", "MESSAGE"},
	{"<|constrain|>", "CONSTRAIN"},
	{"<|end|>", "END"},
	{"<|call|>", "CALL"},
	{"<|return|>", "RETURN"},
}

func harmonyGuards() []string {
	g := make([]string, len(harmonyLiterals))
	for i, l := range harmonyLiterals {
		g[i] = l.lit
	}
	return g
}

// prefixHold is harmony_parser.py prefix_hold: hold back the longest suffix
// of text that could begin one of tokens (all ASCII, so bytes are
// characters here).
func prefixHold(text string, tokens []string) (emit, hold string) {
	if text == "" {
		return "", ""
	}
	maxHold := 0
	for _, tok := range tokens {
		for k := min(len(tok)-1, len(text)); k > 0; k-- {
			if strings.HasPrefix(tok, text[len(text)-k:]) {
				maxHold = max(maxHold, k)
				break
			}
		}
	}
	if maxHold == 0 {
		return text, ""
	}
	return text[:len(text)-maxHold], text[len(text)-maxHold:]
}

// iterTokens is harmony_parser.py iter_tokens.
func iterTokens(text string) []hToken {
	var out []hToken
	pos := 0
	unknown := false
	for pos < len(text) {
		rel := strings.Index(text[pos:], "<|")
		if rel < 0 {
			break
		}
		mp := pos + rel
		if mp > pos {
			out = append(out, hToken{"TEXT", pos, mp})
		}
		found := false
		for _, l := range harmonyLiterals {
			if strings.HasPrefix(text[mp:], l.lit) {
				out = append(out, hToken{l.kind, mp, mp + len(l.lit)})
				pos = mp + len(l.lit)
				found = true
				break
			}
		}
		if found {
			continue
		}
		tail := text[mp:]
		partial := false
		for _, l := range harmonyLiterals {
			if strings.HasPrefix(l.lit, tail) {
				partial = true
				break
			}
		}
		if partial {
			out = append(out, hToken{"TEXT", mp, len(text)})
			pos = len(text)
			break
		}
		unknown = true
		out = append(out, hToken{"TEXT", mp, mp + 2})
		closeRel := strings.Index(text[mp+2:], "|>")
		if closeRel < 0 {
			pos = mp + 2
			continue
		}
		cp := mp + 2 + closeRel
		if nextRel := strings.Index(text[cp+2:], "<|"); nextRel >= 0 {
			out = append(out, hToken{"TEXT", mp + 2, cp + 2 + nextRel})
			pos = cp + 2 + nextRel
		} else {
			out = append(out, hToken{"TEXT", mp + 2, len(text)})
			pos = len(text)
			break
		}
	}
	if pos < len(text) {
		out = append(out, hToken{"TEXT", pos, len(text)})
	} else if pos == len(text) && unknown {
		for _, l := range harmonyLiterals {
			if strings.HasSuffix(text, l.lit) {
				out = append(out, hToken{"TEXT", pos, pos})
				break
			}
		}
	}
	return out
}

// canonicalParse is CanonicalStrategy.parse.
func canonicalParse(text string) ([]hEvent, string) {
	var events []hEvent
	toks := iterTokens(text)
	if len(toks) == 0 {
		return events, ""
	}
	pos := 0
	for pos < len(toks) {
		t := toks[pos]
		switch {
		case t.kind == "TEXT" && pos == len(toks)-1:
			emit, hold := prefixHold(text[t.start:t.end], harmonyGuards())
			if emit != "" {
				events = append(events, hEvent{kind: "normal", content: emit})
			}
			return events, hold
		case t.kind == "START" || t.kind == "CHANNEL":
			ev, next, ok := parseBlock(text, toks, pos)
			if !ok {
				if ev, rest, ok := parsePartialAnalysis(text, toks, pos); ok {
					return append(events, ev), rest
				}
				return events, text[toks[pos].start:]
			}
			if ev != nil {
				events = append(events, *ev)
			}
			pos = next
		default: // TEXT not last, or another structural token
			if !commentaryFiller(text, toks, pos) {
				content := text[t.start:t.end]
				if !standaloneStructural(content) {
					events = append(events, hEvent{kind: "normal", content: content})
				}
			}
			pos++
		}
	}
	return events, ""
}

// headerSpan finds, from start (skipping a <|start|>), the first CHANNEL
// and the first MESSAGE after it, as _parse_block and
// _parse_partial_analysis do; -1 when absent.
func headerSpan(toks []hToken, start int) (channel, message int) {
	pos := start
	if pos < len(toks) && toks[pos].kind == "START" {
		pos++
	}
	channel, message = -1, -1
	for i := pos; i < len(toks); i++ {
		if toks[i].kind == "CHANNEL" && channel < 0 {
			channel = i
		} else if toks[i].kind == "MESSAGE" {
			message = i
			break
		}
	}
	return channel, message
}

// parsePartialAnalysis is CanonicalStrategy._parse_partial_analysis.
func parsePartialAnalysis(text string, toks []hToken, start int) (hEvent, string, bool) {
	ch, msg := headerSpan(toks, start)
	if ch < 0 || msg < 0 {
		return hEvent{}, "", false
	}
	hs := toks[ch].end
	if ch+1 < len(toks) {
		hs = toks[ch+1].start
	}
	if channelType(text[hs:toks[msg].start]) != "analysis" {
		return hEvent{}, "", false
	}
	cs := toks[msg].end
	return hEvent{kind: "reasoning", content: text[cs:]}, text[toks[start].start:cs], true
}

// channelType is CanonicalStrategy._extract_channel_type.
func channelType(header string) string {
	h := strings.ToLower(pyStrip(header))
	for _, c := range []string{"analysis", "commentary", "final"} {
		if strings.HasPrefix(h, c) {
			return c
		}
	}
	return ""
}

// parseBlock is CanonicalStrategy._parse_block; ok false means incomplete
// (Python's None).
func parseBlock(text string, toks []hToken, start int) (*hEvent, int, bool) {
	ch, msg := headerSpan(toks, start)
	if msg < 0 {
		return nil, 0, false
	}
	if ch < 0 {
		// A tool response: <|message|> straight after <|start|>.
		for i := msg + 1; i < len(toks); i++ {
			if k := toks[i].kind; k == "END" || k == "CALL" || k == "RETURN" {
				return &hEvent{kind: "normal", content: text[toks[msg].end:toks[i].start]}, i + 1, true
			}
		}
		return nil, 0, false
	}
	pos := ch + 1
	hs := toks[pos-1].end
	if pos < len(toks) {
		hs = toks[pos].start
	}
	ct := channelType(text[hs:toks[msg].start])
	if ct == "" {
		return nil, 0, false
	}
	cs := toks[msg].end
	end := msg + 1
	for end < len(toks) {
		k := toks[end].kind
		if (ct == "final" && k == "RETURN") || (ct != "final" && (k == "END" || k == "CALL")) {
			break
		}
		end++
	}
	if end >= len(toks) {
		if ct == "final" {
			return &hEvent{kind: "normal", content: text[cs:]}, end, true
		}
		return nil, 0, false
	}
	et := toks[end]
	content := text[cs:et.start]
	switch ct {
	case "analysis", "commentary":
		if et.kind == "CALL" {
			return &hEvent{kind: "tool_call", content: pyStrip(content), raw: text[toks[start].start:et.end]}, end + 1, true
		}
		if ct == "analysis" {
			return &hEvent{kind: "reasoning", content: content}, end + 1, true
		}
		return &hEvent{kind: "normal", content: content}, end + 1, true
	default: // final
		if et.kind == "RETURN" && end+1 < len(toks) && toks[end+1].kind == "TEXT" {
			n := toks[end+1]
			return &hEvent{kind: "normal", content: content + text[n.start:n.end]}, end + 2, true
		}
		return &hEvent{kind: "normal", content: content}, end + 1, true
	}
}

// commentaryFiller is CanonicalStrategy._is_commentary_filler_between_blocks.
func commentaryFiller(text string, toks []hToken, pos int) bool {
	cur := toks[pos]
	curText := strings.ToLower(pyStrip(text[cur.start:cur.end]))
	if pos > 0 && pos+1 < len(toks) && toks[pos-1].kind == "CALL" && toks[pos+1].kind == "CHANNEL" && curText == "commentary" {
		return true
	}
	if pos > 0 && toks[pos-1].kind == "CALL" {
		if cur.kind == "MESSAGE" || (cur.kind == "TEXT" && curText == "commentary") {
			return true
		}
	}
	return false
}

// standaloneStructural is CanonicalStrategy._is_standalone_structural_token.
func standaloneStructural(content string) bool {
	c := pyStrip(content)
	for _, l := range harmonyLiterals {
		if c == l.lit {
			return true
		}
	}
	return false
}

var (
	textAnalysisThenFinal = regexp.MustCompile(`(?is)^[` + pySpace + `]*(?:assistant)?[` + pySpace + `]*(analysis|commentary)(.*?)[` + pySpace + `]*assistantfinal[` + pySpace + `]*(.*)[` + pySpace + `]*$`)
	textFinalOnly         = regexp.MustCompile(`(?is)^[` + pySpace + `]*assistantfinal[` + pySpace + `]*(.*)[` + pySpace + `]*$`)
	textAnalysisOnly      = regexp.MustCompile(`(?is)^[` + pySpace + `]*(?:assistant)?[` + pySpace + `]*(analysis|commentary)(.*)[` + pySpace + `]*$`)
	textChannelWord       = regexp.MustCompile(`(?i)(?:^|[` + pySpace + `])(?:assistant)?[` + pySpace + `]*(analysis|commentary)`)
	textStrategyTrigger   = regexp.MustCompile(`(?i)(?:^|[` + pySpace + `])(?:assistant)?[` + pySpace + `]*(analysis|commentary|assistantfinal)`)
)

// textParse is TextStrategy.parse, the fallback for harmony text whose
// special tokens were stripped ("analysis…assistantfinal…").
func textParse(text string) ([]hEvent, string) {
	var events []hEvent
	if m := textAnalysisThenFinal.FindStringSubmatch(text); m != nil {
		ch, reasoning, final := strings.ToLower(m[1]), pyStrip(m[2]), pyStrip(m[3])
		if ch == "analysis" && reasoning != "" {
			events = append(events, hEvent{kind: "reasoning", content: reasoning})
		} else if ch == "commentary" && reasoning != "" {
			events = append(events, hEvent{kind: "normal", content: reasoning})
		}
		if final != "" {
			events = append(events, hEvent{kind: "normal", content: final})
		}
		return events, ""
	}
	if textChannelWord.MatchString(text) {
		low := strings.ToLower(text)
		if strings.Contains(low, "assistantfin") && !strings.Contains(low, "assistantfinal") {
			return events, text
		}
	}
	if m := textFinalOnly.FindStringSubmatch(text); m != nil {
		if f := pyStrip(m[1]); f != "" {
			events = append(events, hEvent{kind: "normal", content: f})
		}
		return events, ""
	}
	if m := textAnalysisOnly.FindStringSubmatchIndex(text); m != nil {
		ch := strings.ToLower(text[m[2]:m[3]])
		head := text[:m[4]]
		emit, hold := prefixHold(text[m[4]:m[5]], []string{"assistantfinal"})
		if ch == "analysis" && emit != "" {
			events = append(events, hEvent{kind: "reasoning", content: emit})
			if hold != "" {
				return events, head + hold
			}
			return events, text[m[2]:m[3]]
		}
		if ch == "commentary" && emit != "" {
			out := emit
			if hold == "" {
				out = pyStrip(emit)
			}
			events = append(events, hEvent{kind: "normal", content: out})
			if hold != "" {
				return events, head + hold
			}
			return events, ""
		}
		return events, head + hold
	}
	emit, hold := prefixHold(text, []string{"analysis", "commentary", "assistantfinal"})
	if emit != "" {
		events = append(events, hEvent{kind: "normal", content: emit})
	}
	return events, hold
}

// harmonyParser is HarmonyParser: it picks a strategy on first sight and
// filters the "commentary" filler that follows a call.
type harmonyParser struct {
	strategy      func(string) ([]hEvent, string)
	buffer        string
	filterComment bool
	partialComm   string
}

func (h *harmonyParser) parse(chunk string) []hEvent {
	h.buffer += chunk
	if h.strategy == nil {
		switch {
		case strings.Contains(h.buffer, "<|channel|>") || strings.Contains(h.buffer, "<|start|>"):
			h.strategy = canonicalParse
		case textStrategyTrigger.MatchString(h.buffer):
			h.strategy = textParse
		default:
			return nil // not yet determined: held
		}
	}
	events, remaining := h.strategy(h.buffer)
	callEnded := strings.HasSuffix(strings.TrimRightFunc(h.buffer, pyIsSpace), "<|call|>")
	h.buffer = remaining
	var out []hEvent
	for _, e := range events {
		if e.kind == "normal" {
			if h.filterComment || h.partialComm != "" {
				pc := h.partialComm + strings.ToLower(pyStrip(e.content))
				switch {
				case pc == "commentary":
					h.partialComm, h.filterComment = "", false
					continue
				case strings.HasPrefix("commentary", pc):
					h.partialComm = pc
					continue
				default:
					h.partialComm, h.filterComment = "", false
				}
			} else {
				h.partialComm = ""
			}
		}
		if e.kind == "tool_call" {
			h.filterComment, h.partialComm = true, ""
		} else if callEnded {
			h.filterComment = true
		}
		out = append(out, e)
	}
	return out
}

// harmonyOneShot is parse(text) then parse("") on a fresh HarmonyParser, as
// both GptOssDetectors' detect_and_parse do.
func harmonyOneShot(text string) []hEvent {
	events, _ := harmonyOneShotRest(text)
	return events
}

// harmonyOneShotRest is harmonyOneShot, also returning what the parser still
// holds at the end: an incomplete block.
func harmonyOneShotRest(text string) ([]hEvent, string) {
	var h harmonyParser
	events := append(h.parse(text), h.parse("")...)
	return events, h.buffer
}

// harmonyReasoning is the gpt-oss reasoning parser (reasoning_parser.py
// GptOssDetector.detect_and_parse): analysis is reasoning; normal text and
// tool calls (raw, with their markers, for the tool parser) are the normal
// text. A text with no harmony markers and no channel words yields nothing
// at all: HarmonyParser holds it, waiting for a strategy.
func harmonyReasoning(text string, _ bool) (string, string) {
	var reasoning, normal strings.Builder
	for _, e := range harmonyOneShot(text) {
		switch e.kind {
		case "reasoning":
			reasoning.WriteString(e.content)
		case "normal":
			normal.WriteString(e.content)
		case "tool_call":
			if e.raw != "" {
				normal.WriteString(e.raw)
			} else {
				normal.WriteString(e.content)
			}
		}
	}
	return reasoning.String(), normal.String()
}

// harmonyCallStart is the gpt-oss tool detector's bot_token: a call is seen
// only when the assistant's commentary message starts with <|start|>.
const harmonyCallStart = "<|start|>assistant<|channel|>commentary"

// GptOssDetector.tool_extract_pattern.
var harmonyCall = regexp.MustCompile(`(?s)to=([a-zA-Z_][a-zA-Z0-9_.-]*)[` + pySpace + `]*<\|constrain\|>json<\|message\|>(.*?)(?:<\|call\|>|$)`)

// harmonyHeldCall reports a call block the harmony parser still holds at
// the end (no <|call|>): SGLang drops it, from the reasoning parser's normal
// text already, so the tool parser never sees it.
func harmonyHeldCall(rest string) error {
	if strings.Contains(rest, "commentary") && strings.Contains(rest, "to=") {
		return parseErr("gpt-oss", rest, "tool call without <|call|> (was the stop token trimmed?)")
	}
	return nil
}

func harmonyHas(text string) bool { return strings.Contains(text, harmonyCallStart) }

// harmonyParse is gpt_oss_detector.py GptOssDetector.detect_and_parse: the
// normal events joined with " " and stripped are the normal text;
// reasoning events are dropped; each tool_call event is a call named by the
// last dot-part of its "to=" recipient, with empty arguments read as {}.
func harmonyParse(text string, _ Options) (string, []Call, error) {
	const p = "gpt-oss"
	var normal []string
	var calls []Call
	events, rest := harmonyOneShotRest(text)
	if err := harmonyHeldCall(rest); err != nil {
		return "", nil, err
	}
	for _, e := range events {
		switch e.kind {
		case "normal":
			normal = append(normal, e.content)
		case "tool_call":
			src := e.raw
			if src == "" {
				src = e.content
			}
			m := harmonyCall.FindStringSubmatch(src)
			if m == nil {
				return "", nil, parseErr(p, src, "tool call has no to=NAME <|constrain|>json<|message|> header")
			}
			name := m[1]
			if i := strings.LastIndex(name, "."); i >= 0 {
				name = name[i+1:]
			}
			args := json.RawMessage("{}")
			if pyStrip(m[2]) != "" {
				if !json.Valid([]byte(m[2])) {
					return "", nil, parseErr(p, m[2], "tool call arguments are not valid JSON")
				}
				args = json.RawMessage(m[2])
			}
			a, err := objectArgs(p, m[2], args)
			if err != nil {
				return "", nil, err
			}
			if name == "" {
				return "", nil, parseErr(p, src, "a tool call has no name")
			}
			calls = append(calls, Call{Name: name, Arguments: a})
		}
	}
	return pyStrip(strings.Join(normal, " ")), calls, nil
}
