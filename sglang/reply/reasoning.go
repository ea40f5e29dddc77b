package reply

import "strings"

// A reasoningParser splits text into (reasoning, normal), as
// ReasoningParser.parse_non_stream does. open is Options.ReasoningOpen.
type reasoningParser func(text string, open bool) (reasoning, normal string)

// thinkTags is one BaseReasoningFormatDetector configuration
// (sglang/srt/parser/reasoning_parser.py).
type thinkTags struct {
	start, end string
	// toolStart ends reasoning when it appears before the end tag
	// (tool_start_token; tool_start_at_line_start is false for all of these).
	toolStart string
	// force is the detector's force_reasoning whatever the request says:
	// forceOn for DeepSeekR1Detector (its __init__ passes True) and the
	// parsers ReasoningParser.__init__ forces (qwen3-thinking, minimax),
	// forceOff for KimiDetector (passes False).
	force int
}

const (
	forceRequest = iota
	forceOn
	forceOff
)

var (
	// Qwen3Detector: <think>…</think>, and <tool_call> closes reasoning
	// ("Qwen3.5 sometimes opens <tool_call> without closing </think>").
	qwen3Tags = thinkTags{start: "<think>", end: "</think>", toolStart: "<tool_call>"}
	// DeepSeekR1Detector: always starts in reasoning.
	r1Tags = thinkTags{start: "<think>", end: "</think>", force: forceOn}
	// KimiDetector: ◁think▷…◁/think▷, never forced.
	kimiTags = thinkTags{start: "◁think▷", end: "◁/think▷", force: forceOff}
	// KimiK2Detector: <think>…</think>; the tool-call section closes reasoning.
	kimiK2Tags = thinkTags{start: "<think>", end: "</think>", toolStart: "<|tool_calls_section_begin|>"}
)

func forced(t thinkTags) thinkTags { t.force = forceOn; return t }

// reasoningParsers maps SGLang's --reasoning-parser names
// (ReasoningParser.DetectorMap) to the ported detectors. Names whose detector
// differs from the ones below are not supported.
var reasoningParsers = map[string]reasoningParser{
	"qwen3":          qwen3Tags.parse,
	"qwen3-thinking": forced(qwen3Tags).parse, // ReasoningParser.__init__ forces it
	"minimax":        forced(qwen3Tags).parse, // ditto
	"dots":           qwen3Tags.parse,
	"nanbeige":       qwen3Tags.parse,
	"interns1":       qwen3Tags.parse,
	"deepseek-v3":    qwen3Tags.parse, // _DeepSeekV3Detector(Qwen3Detector)
	"mimo":           qwen3Tags.parse, // _MimoDetector(Qwen3Detector)
	"poolside_v1":    qwen3Tags.parse, // _PoolsideV1Detector(Qwen3Detector)
	"deepseek-r1":    r1Tags.parse,
	"step3":          r1Tags.parse,
	"step3p5":        r1Tags.parse,
	"gigachat35":     r1Tags.parse,
	"kimi":           kimiTags.parse,
	"kimi_k2":        kimiK2Tags.parse,
	"gpt-oss":        harmonyReasoning,
}

// parse is BaseReasoningFormatDetector._detect_and_parse_impl with no
// previous_content (continue_final_message is off) and
// force_nonempty_content off. Nothing is stripped: SGLang 0.5.23 keeps the
// whitespace around the tags.
func (t thinkTags) parse(text string, open bool) (reasoning, normal string) {
	in := open
	switch t.force {
	case forceOn:
		in = true
	case forceOff:
		in = false
	}
	// in_reasoning = self._in_reasoning or self.think_start_token in text
	if !in && !strings.Contains(text, t.start) {
		return "", text
	}
	// Only start tags at the very beginning are removed; one later in the
	// text stays part of the reasoning.
	for strings.HasPrefix(text, t.start) {
		text = text[len(t.start):]
	}
	before, after, found := strings.Cut(text, t.end)
	if found {
		return before, after
	}
	// No end tag: a tool-start token hands the rest to the tool parser,
	// otherwise the text is taken as truncated reasoning.
	if t.toolStart != "" {
		if i := strings.Index(text, t.toolStart); i >= 0 {
			return text[:i], text[i:]
		}
	}
	return text, ""
}
