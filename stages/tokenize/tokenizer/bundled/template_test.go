package bundled

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
)

// TestChatTemplateRenders renders the bundled chat template with Python Jinja2 configured as
// transformers configures it and checks the exact ChatML output.
func TestChatTemplateRenders(t *testing.T) {
	if out, err := exec.Command("python3", "-c", "import jinja2").CombinedOutput(); err != nil {
		testassets.Unavailable(t, "python3 with jinja2: %v %s", err, out)
	}
	dir := t.TempDir()
	if err := WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{
			name: "plain",
			ctx: map[string]any{"add_generation_prompt": true, "messages": []map[string]any{
				{"role": "system", "content": "Be brief."},
				{"role": "user", "content": "Hi"},
			}},
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "tools_reasoning_no_thinking",
			ctx: map[string]any{
				"add_generation_prompt": true,
				"enable_thinking":       false,
				"tools":                 []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}},
				"messages": []map[string]any{
					{"role": "user", "content": "Weather in Paris?"},
					{"role": "assistant", "content": "", "reasoning_content": "\nNeed the tool.\n", "tool_calls": []map[string]any{
						{"type": "function", "function": map[string]any{"name": "get_weather", "arguments": map[string]any{"city": "Paris"}}},
					}},
					{"role": "tool", "content": "21°C"},
					{"role": "tool", "content": "sunny"},
					{"role": "assistant", "content": "21°C and sunny."},
					{"role": "user", "content": "Thanks"},
				},
			},
			want: "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"function": {"name": "get_weather", "parameters": {"type": "object"}}, "type": "function"}` + // Go sorts map keys

				"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
				"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nNeed the tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n21°C\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n21°C and sunny.<|im_end|>\n" +
				"<|im_start|>user\nThanks<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
	}
	for _, c := range cases {
		in, _ := json.Marshal(c.ctx)
		cmd := exec.Command("python3", "testdata/render.py", filepath.Join(dir, "tokenizer_config.json"))
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: render: %v\n%s", c.name, err, stderr.String())
		}
		if string(out) != c.want {
			t.Errorf("%s: rendered\n%q\nwant\n%q", c.name, out, c.want)
		}
	}
}
