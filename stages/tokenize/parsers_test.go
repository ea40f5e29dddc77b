package tokenize

import (
	"strings"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

// TestParsersOfRealTemplates: the reply parsers detected from real chat templates, and the flags that
// override them.
func TestParsersOfRealTemplates(t *testing.T) {
	m := bundledModel(t) // a Qwen3-style template: <think> and <tool_call>
	p, err := m.Parsers("", "")
	if err != nil || p != (topics.Parsers{Reasoning: "qwen3", Tools: "qwen25"}) {
		t.Fatalf("bundled model: %+v, %v", p, err)
	}
	if p, err := m.Parsers("none", "llama3"); err != nil || p != (topics.Parsers{Tools: "llama3"}) {
		t.Fatalf("flags: %+v, %v", p, err)
	}
	if _, err := m.Parsers("", "hermes2"); err == nil || !strings.Contains(err.Error(), "unknown tool-call parser") {
		t.Fatalf("unknown parser: %v", err)
	}
	km, err := LoadModel(kimiDir(t, "kimi-k2-thinking"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := km.Parsers("", ""); err != nil || p != (topics.Parsers{Reasoning: "kimi_k2", Tools: "kimi_k2"}) {
		t.Fatalf("Kimi-K2-Thinking: %+v, %v", p, err)
	}
	for src, want := range map[string]topics.Parsers{
		"{{'<｜Assistant｜><think>\\n'}}{{'<｜tool▁calls▁begin｜>' + '```json'}}": {Reasoning: "deepseek-r1", Tools: "deepseekv3"},
		"<|start_header_id|>ipython<|end_header_id|>Environment: ipython":     {Tools: "llama3"},
		"<|start|>assistant<|channel|>analysis<|message|>":                    {Reasoning: "gpt-oss", Tools: "gpt-oss"},
		"{{ message.content }}": {},
	} {
		if got := DetectParsers(src); got != want {
			t.Errorf("DetectParsers(%q) = %+v, want %+v", src, got, want)
		}
	}
	if !reasoningOpen("<|im_start|>assistant\n<think>\n") || reasoningOpen("<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Error("reasoningOpen")
	}
}
