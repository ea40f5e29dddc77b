package tokenize

import (
	"fmt"
	"strings"

	"github.com/draftflow/draftflow/topics"
)

// Reasoning and tool-call parser names, as SGLang names its --reasoning-parser and --tool-call-parser
// choices. They travel in topics.Parsers so that generate splits each reply the way the model writes it.
var (
	reasoningParsers = []string{"qwen3", "deepseek-r1", "kimi_k2", "gpt-oss"}
	toolParsers      = []string{"qwen25", "llama3", "kimi_k2", "deepseekv3", "gpt-oss"}
)

// DetectParsers names the reasoning and tool-call parsers of a chat template from the markup it writes:
// Kimi-K2's <|tool_calls_section_begin|> sections, DeepSeek-V3's <｜tool▁calls▁begin｜> with ```json
// arguments (DeepSeek-V3.1's calls, without them, are not parsed: its tool turns end as divergences), gpt-oss's harmony channels, Qwen/Hermes <tool_call> blocks, Llama 3.1's
// ipython environment; <think> blocks for reasoning. A template that writes none of them gets "" (the
// reply is all content, and a turn whose source called tools ends as a tool divergence).
func DetectParsers(template string) topics.Parsers {
	has := func(s string) bool { return strings.Contains(template, s) }
	var p topics.Parsers
	switch {
	case has("<|channel|>"):
		p.Tools, p.Reasoning = "gpt-oss", "gpt-oss"
		return p
	case has("<|tool_calls_section_begin|>"):
		p.Tools = "kimi_k2"
	case has("<｜tool▁calls▁begin｜>") && has("```json"):
		p.Tools = "deepseekv3"
	case has("<tool_call>"):
		p.Tools = "qwen25"
	case has("<|python_tag|>") || has("Environment: ipython"):
		p.Tools = "llama3"
	}
	if has("<think>") {
		switch {
		case has("<|im_middle|>"): // Kimi's role markup
			p.Reasoning = "kimi_k2"
		case has("<｜Assistant｜>"):
			p.Reasoning = "deepseek-r1"
		default:
			p.Reasoning = "qwen3"
		}
	}
	return p
}

// reasoningOpen reports whether a rendered prompt ends inside a reasoning block the template opened
// (DeepSeek-R1 and Qwen3-Thinking templates end the generation prompt with "<think>\n"), so the reply
// starts with reasoning and has no opening tag of its own.
func reasoningOpen(rendered string) bool {
	return strings.HasSuffix(strings.TrimRight(rendered, " \n"), "<think>")
}

// pickParser returns the parser named by a flag (an SGLang name, or "none" for none), else the detected one.
func pickParser(flagValue, detected string, known []string, what string) (string, error) {
	switch flagValue {
	case "":
		return detected, nil
	case "none":
		return "", nil
	}
	for _, k := range known {
		if flagValue == k {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown %s %q (want one of %s, or none)", what, flagValue, strings.Join(known, ", "))
}

// Parsers returns the reply parsers of the model's chat template (DetectParsers over the template used
// with tools), each replaced by the named one when given (an SGLang name, or "none").
func (m *Model) Parsers(reasoning, tools string) (topics.Parsers, error) {
	src, err := m.Template.Source(true)
	if err != nil {
		if src, err = m.Template.Source(false); err != nil {
			return topics.Parsers{}, fmt.Errorf("model %s: %w", m.Dir, err)
		}
	}
	p := DetectParsers(src)
	if p.Reasoning, err = pickParser(reasoning, p.Reasoning, reasoningParsers, "reasoning parser"); err != nil {
		return topics.Parsers{}, err
	}
	if p.Tools, err = pickParser(tools, p.Tools, toolParsers, "tool-call parser"); err != nil {
		return topics.Parsers{}, err
	}
	return p, nil
}
