package chattemplate

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests need neither Python nor downloaded assets; the expected strings were produced by
// CPython 3.11 / Jinja2 3.1.6 / transformers 5.25.0.

func TestPyFloatRepr(t *testing.T) {
	t.Parallel()
	for f, want := range map[float64]string{
		1: "1.0", -0.5: "-0.5", 0.30000000000000004: "0.30000000000000004", 1e16: "1e+16", 1e15: "1000000000000000.0",
		1.5e-5: "1.5e-05", 0.0001: "0.0001", 123456789.123: "123456789.123", 1e21: "1e+21", 2.5e-300: "2.5e-300",
		math.Inf(1): "inf", math.Copysign(0, -1): "-0.0", 100: "100.0", 1.7976931348623157e308: "1.7976931348623157e+308",
	} {
		if got := pyFloatRepr(f); got != want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestJSONDumpsMatchesPython(t *testing.T) {
	t.Parallel()
	v, err := decodeJSON([]byte(`{"z": 1, "a": [1.0, 2.5e-7, "<&>é\u2028\u0007", null, true, {}], "n": -0.0}`))
	if err != nil {
		t.Fatal(err)
	}
	two := "  "
	for _, tc := range []struct {
		o    jsonOptions
		want string
	}{
		{jsonOptions{itemSep: ", ", keySep: ": "}, `{"z": 1, "a": [1.0, 2.5e-07, "<&>é` + "\u2028" + `\u0007", null, true, {}], "n": -0.0}`},
		{jsonOptions{itemSep: ",", keySep: ":", ensureASCII: true}, `{"z":1,"a":[1.0,2.5e-07,"<&>\u00e9\u2028\u0007",null,true,{}],"n":-0.0}`},
		{jsonOptions{itemSep: ",", keySep: ": ", indent: &two, sortKeys: true}, "{\n  \"a\": [\n    1.0,\n    2.5e-07,\n    \"<&>é\u2028\\u0007\",\n    null,\n    true,\n    {}\n  ],\n  \"n\": -0.0,\n  \"z\": 1\n}"},
	} {
		got, err := pyJSONDumps(v, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("json.dumps: %s", diffExcerpt(tc.want, got))
		}
	}
}

func render(t *testing.T, src string, in Input) (string, error) {
	t.Helper()
	tmpl, err := Parse(src, "<s>", "</s>")
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return tmpl.Render(in)
}

func user(s string) []Message { return []Message{{Role: "user", Content: s}} }

func TestRenderBasics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}", "<s>[user] hi\n[assistant]"},
		{"{{ tools }}|{{ documents }}|{{ unk_token is defined }}", "None|None|False"},
		{"{% for m in messages %}{{ m|tojson }}{% endfor %}", `{"role": "user", "content": "hi"}`},
		{"{%- if true %}\n  a\n{%- endif %}\n", "  a"},
	} {
		got, err := render(t, tc.src, Input{Messages: user("hi"), AddGenerationPrompt: true})
		if err != nil || got != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}

func TestMessageMappingLikeTransformers(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{Role: "assistant", Content: "", ReasoningContent: "think", ToolCalls: json.RawMessage(`[{"type":"function","function":{"name":"f","arguments":{"b":1,"a":2.0}}}]`)},
		{Role: "tool", Content: "r", ToolCallID: "c1", Name: "f"},
	}
	got, err := render(t, "{% for m in messages %}{{ m|tojson }}\n{% endfor %}", Input{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role": "assistant", "content": "", "reasoning_content": "think", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": 2.0}}}]}` + "\n" +
		`{"role": "tool", "content": "r", "tool_call_id": "c1", "name": "f"}` + "\n"
	if got != want {
		t.Fatalf("%s", diffExcerpt(want, got))
	}
}

func TestKwargsAndTools(t *testing.T) {
	t.Parallel()
	src := "{{ enable_thinking }}|{{ cfg|tojson }}|{{ tools|length }}|{{ tools[0].function.name }}|{{ eos_token }}"
	got, err := render(t, src, Input{
		Messages: user("x"),
		Tools:    json.RawMessage(`[{"type":"function","function":{"name":"get","parameters":{}}}]`),
		Kwargs:   map[string]any{"enable_thinking": false, "cfg": json.RawMessage(`{"z":1,"a":[1.5]}`), "eos_token": "<eos>"},
	})
	if want := `False|{"z": 1, "a": [1.5]}|1|get|<eos>`; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	for _, in := range []Input{
		{Messages: user("x"), Kwargs: map[string]any{"messages": 1}},
		{Messages: user("x"), Tools: json.RawMessage(`{"not": "a list"}`)},
		{Messages: user("x"), Tools: json.RawMessage(`[1]`)},
		{Messages: nil},
	} {
		if _, err := render(t, "x", in); err == nil {
			t.Errorf("Render(%+v) succeeded, want an error", in)
		}
	}
}

func TestRaiseExceptionIsTyped(t *testing.T) {
	t.Parallel()
	_, err := render(t, "{% if messages[0].role != 'system' %}{{ raise_exception('need a system prompt') }}{% endif %}", Input{Messages: user("x")})
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != "need a system prompt" {
		t.Fatalf("err = %v, want RaiseError", err)
	}
}

func TestStrictnessWherePythonRaises(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"{{ messages[5].content }}", "{{ 'a' + 1 }}", "{{ messages.append(1) }}", "{{ nope() }}",
		"{% for x in 3 %}{% endfor %}", "{{ undefined_thing|tojson }}",
	} {
		if out, err := render(t, src, Input{Messages: user("x")}); err == nil {
			t.Errorf("%q rendered %q, want an error", src, out)
		}
	}
}

func TestUnsupportedConstructsFailAtParse(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"{% include 'x.jinja' %}", "{% extends 'base' %}", "{{ x|truncate(3) }}", "{{ x is nosuchtest }}",
		"{% for a, b, c in x %}{% endfor %}", "{% for x in y recursive %}{% endfor %}", "{% set a, b = 1, 2 %}",
		"{{ f(*args) }}", "{% if x %}", "{% endfor %}", "{{ 'open }}", "{% break %}",
	} {
		if _, err := Parse(src, "", ""); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", src)
		} else if !errors.As(err, new(*SyntaxError)) {
			t.Errorf("Parse(%q) error %v is not a *SyntaxError", src, err)
		}
	}
}

func TestStrftimeNow(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse("{{ strftime_now('%d %b %Y|%-d %B|%H:%M:%S %p|%a %A|%j %y %%') }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	tmpl.now = func() time.Time { return time.Date(2026, 7, 4, 15, 4, 5, 0, time.UTC) }
	got, err := tmpl.Render(Input{Messages: user("x")})
	if want := "04 Jul 2026|4 July|15:04:05 PM|Sat Saturday|185 26 %"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadVariants(t *testing.T) {
	t.Parallel()
	listCfg := `{"bos_token": {"__type": "AddedToken", "content": "<B>", "lstrip": false}, "eos_token": "<E>", "pad_token": null,
		"extra_special_tokens": {"image_token": "<img>"},
		"chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ image_token }}"}, {"name": "tool_use", "template": "T{{ tools|length }}"}]}`
	dir := writeFiles(t, map[string]string{"tokenizer_config.json": listCfg})
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render(Input{Messages: user("x")}); got != "D<B><img>" {
		t.Errorf("default template rendered %q", got)
	}
	if got, _ := tmpl.Render(Input{Messages: user("x"), Tools: json.RawMessage(`[{"a":1}]`)}); got != "T1" {
		t.Errorf("tool_use template rendered %q", got)
	}
	if sp := tmpl.SpecialTokens(); sp["bos_token"] != "<B>" || sp["eos_token"] != "<E>" || sp["pad_token"] != "" {
		t.Errorf("special tokens %v", sp)
	}

	// chat_template.jinja wins over the config entry; a trailing newline is dropped as in Jinja2.
	dir = writeFiles(t, map[string]string{
		"tokenizer_config.json": `{"chat_template": "from config", "eos_token": "<E>"}`,
		"chat_template.jinja":   "from file {{ eos_token }}\n",
	})
	if tmpl, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render(Input{Messages: user("x")}); got != "from file <E>" {
		t.Errorf("chat_template.jinja rendered %q", got)
	}

	dir = writeFiles(t, map[string]string{"tokenizer_config.json": `{"eos_token": "<E>"}`})
	if _, err := Load(dir); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("Load without template: %v", err)
	}
	dir = writeFiles(t, map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "other", "template": "x"}]}`})
	if tmpl, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(Input{Messages: user("x")}); err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("no default template: %v", err)
	}
}

func TestGoValueKwargs(t *testing.T) {
	t.Parallel()
	v, err := goValue(map[string]any{"b": []int{1, 2}, "a": 1.5, "n": nil})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := pyRepr(v)
	if s != "{'a': 1.5, 'b': [1, 2], 'n': None}" {
		t.Fatalf("got %s", s)
	}
	if _, err := goValue(struct{}{}); err == nil {
		t.Fatal("struct accepted")
	}
	if !boolV(true).IsTruthy() {
		t.Fatal("truthiness")
	}
}

func TestConcurrentRenders(t *testing.T) {
	t.Parallel()
	src := "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ loop.index }}{{ m.content|upper }}{{ (m.role, 1) }}{% endfor %}{{ ns.n }}{{ [1, 2]|tojson }}"
	tmpl, err := Parse(src, "", "")
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Messages: []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}}
	want, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 50 {
				got, err := tmpl.Render(in)
				if err == nil && got != want {
					err = errors.New("concurrent render differs: " + got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if want != "1A('user', 1)2B('assistant', 1)2[1, 2]" {
		t.Fatalf("got %q", want)
	}
}
