package reply

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func call(name, args string) Call { return Call{Name: name, Arguments: json.RawMessage(args)} }

func TestSameCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b []Call
		want bool
	}{
		{"both empty", nil, []Call{}, true},
		{"key order", []Call{call("f", `{"a":1,"b":2}`)}, []Call{call("f", `{"b":2,"a":1}`)}, true},
		{"1 vs 1.0 vs 1e0", []Call{call("f", `{"n":1,"m":1.0}`)}, []Call{call("f", `{"n":1e0,"m":10e-1}`)}, true},
		{"negative zero", []Call{call("f", `{"n":0}`)}, []Call{call("f", `{"n":-0.0}`)}, true},
		{"big integers exact", []Call{call("f", `{"n":12345678901234567890}`)}, []Call{call("f", `{"n":12345678901234567891}`)}, false},
		{"big integers equal", []Call{call("f", `{"n":12345678901234567890}`)}, []Call{call("f", `{"n":1.2345678901234567890e19}`)}, true},
		{"nested", []Call{call("f", `{"a":{"b":[1,{"c":null,"d":true}]}}`)}, []Call{call("f", `{"a":{"b":[1.0,{"d":true,"c":null}]}}`)}, true},
		{"nested differs", []Call{call("f", `{"a":{"b":[1,2]}}`)}, []Call{call("f", `{"a":{"b":[2,1]}}`)}, false},
		{"string vs number", []Call{call("f", `{"a":"1"}`)}, []Call{call("f", `{"a":1}`)}, false},
		{"null vs absent", []Call{call("f", `{"a":null}`)}, []Call{call("f", `{}`)}, false},
		{"bool vs number", []Call{call("f", `{"a":true}`)}, []Call{call("f", `{"a":1}`)}, false},
		{"unicode escapes", []Call{call("f", `{"a":"é"}`)}, []Call{call("f", `{"a":"\u00e9"}`)}, true},
		{"different names", []Call{call("f", `{}`)}, []Call{call("g", `{}`)}, false},
		{"different count", []Call{call("f", `{}`)}, []Call{call("f", `{}`), call("f", `{}`)}, false},
		{"order matters", []Call{call("f", `{}`), call("g", `{}`)}, []Call{call("g", `{}`), call("f", `{}`)}, false},
		{"ids ignored", []Call{{Name: "f", Arguments: json.RawMessage(`{}`), ID: "a"}}, []Call{{Name: "f", Arguments: json.RawMessage(`{}`), ID: "b"}}, true},
		{"absent arguments are {}", []Call{{Name: "f"}}, []Call{call("f", `{}`)}, true},
		{"invalid never equal", []Call{call("f", `{"a":`)}, []Call{call("f", `{"a":`)}, false},
		{"trailing data invalid", []Call{call("f", `{} {}`)}, []Call{call("f", `{}`)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameCalls(tc.a, tc.b); got != tc.want {
				t.Errorf("SameCalls = %v, want %v", got, tc.want)
			}
			if got := SameCalls(tc.b, tc.a); got != tc.want {
				t.Errorf("SameCalls reversed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCallsOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []Call
		wantErr  bool
	}{
		{"null", `null`, nil, false},
		{"empty input", ``, nil, false},
		{"empty list", `[]`, []Call{}, false},
		{"openai string arguments", `[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]`,
			[]Call{{Name: "f", Arguments: json.RawMessage(`{"a":1}`), ID: "call_1"}}, false},
		{"openai object arguments", `[{"type":"function","function":{"name":"f","arguments":{"a":[1,2]}}}]`,
			[]Call{call("f", `{"a":[1,2]}`)}, false},
		{"bare entry", `[{"name":"g","arguments":{"x":"y"}}]`, []Call{call("g", `{"x":"y"}`)}, false},
		{"missing arguments", `[{"function":{"name":"f"}}]`, []Call{call("f", `{}`)}, false},
		{"empty string arguments", `[{"function":{"name":"f","arguments":""}}]`, []Call{call("f", `{}`)}, false},
		{"two calls in order", `[{"function":{"name":"a","arguments":"{}"}},{"name":"b","arguments":{}}]`, []Call{call("a", `{}`), call("b", `{}`)}, false},
		{"not a list", `{"function":{"name":"f"}}`, nil, true},
		{"malformed json", `[{"function":`, nil, true},
		{"string arguments not json", `[{"function":{"name":"f","arguments":"{a: 1}"}}]`, nil, true},
		{"array arguments", `[{"function":{"name":"f","arguments":[1]}}]`, nil, true},
		{"string arguments holding an array", `[{"function":{"name":"f","arguments":"[1]"}}]`, nil, true},
		{"no name", `[{"function":{"arguments":{}}}]`, nil, true},
		{"neither shape", `[{"id":"x"}]`, nil, true},
		{"entry not an object", `[1]`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CallsOf(json.RawMessage(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("CallsOf = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) || !SameCalls(got, tc.want) {
				t.Fatalf("CallsOf = %s, want %s", callsString(got), callsString(tc.want))
			}
			for i := range got {
				if got[i].ID != tc.want[i].ID {
					t.Errorf("call %d id = %q, want %q", i, got[i].ID, tc.want[i].ID)
				}
			}
		})
	}
}

func TestMessageShape(t *testing.T) {
	t.Parallel()
	r := Reply{Reasoning: "think", Content: "ok", Calls: []Call{call("f", `{"a":1}`), call("g", `{}`), {Name: "h", Arguments: json.RawMessage(`{}`), ID: "functions.h:2"}}}
	m := r.Message([]string{"id0"})
	if m.Role != "assistant" || m.Content != "ok" || m.ReasoningContent != "think" {
		t.Fatalf("message = %+v", m)
	}
	var calls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
		t.Fatalf("tool_calls %s: %v", m.ToolCalls, err)
	}
	if len(calls) != 3 {
		t.Fatalf("tool_calls = %s", m.ToolCalls)
	}
	if calls[0].ID != "id0" || calls[2].ID != "functions.h:2" {
		t.Errorf("ids = %q, %q; want the given id and the call's own", calls[0].ID, calls[2].ID)
	}
	if !strings.HasPrefix(calls[1].ID, "call_") || len(calls[1].ID) != len("call_")+24 {
		t.Errorf("default id = %q, want call_ and 24 hex digits", calls[1].ID)
	}
	if again := r.Message([]string{"id0"}); string(again.ToolCalls) != string(m.ToolCalls) {
		t.Errorf("default ids are not deterministic: %s vs %s", again.ToolCalls, m.ToolCalls)
	}
	for i, c := range calls {
		if c.Type != "function" || c.Function.Name != r.Calls[i].Name || !strings.HasPrefix(string(c.Function.Arguments), "{") {
			t.Errorf("call %d = %+v, want type function, name %s and an object", i, c, r.Calls[i].Name)
		}
	}
	// The message's calls read back as the same calls.
	back, err := CallsOf(m.ToolCalls)
	if err != nil || !SameCalls(back, r.Calls) {
		t.Errorf("CallsOf(Message) = %v, %v", back, err)
	}
	if plain := (Reply{Content: "hi"}).Message(nil); plain.ToolCalls != nil {
		t.Errorf("no calls gave tool_calls %s", plain.ToolCalls)
	}
}

func TestKnown(t *testing.T) {
	t.Parallel()
	if err := Known("", ""); err != nil {
		t.Error(err)
	}
	for _, r := range ReasoningParsers() {
		for _, tp := range ToolParsers() {
			if err := Known(r, tp); err != nil {
				t.Error(err)
			}
		}
	}
	var pe *ParseError
	if err := Known("qwen4", ""); !errors.As(err, &pe) || !strings.Contains(err.Error(), "qwen4") {
		t.Errorf("Known(qwen4) = %v", err)
	}
	if err := Known("", "hermes2"); !errors.As(err, &pe) {
		t.Errorf("Known(hermes2) = %v", err)
	}
	if _, err := Parse("x", Options{Tools: "nope"}); !errors.As(err, &pe) {
		t.Errorf("Parse with an unknown parser = %v", err)
	}
}

func TestParseExamples(t *testing.T) {
	t.Parallel()
	r, err := Parse("<think>\nweather?\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		Options{Reasoning: "qwen3", Tools: "qwen25"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reasoning != "\nweather?\n" || r.Content != "Checking." || !SameCalls(r.Calls, []Call{call("get_weather", `{"city":"Paris"}`)}) {
		t.Errorf("qwen3+qwen25 = %+v", r)
	}
	r, err = Parse(kSec+kimiCallText("functions.search:3", `{"q":"x"}`)+kSecE, Options{Tools: "kimi_k2"})
	if err != nil || len(r.Calls) != 1 || r.Calls[0].ID != "functions.search:3" || r.Calls[0].Name != "search" {
		t.Errorf("kimi_k2 = %+v, %v", r, err)
	}
	r, err = Parse(kSec+kimiCallText("functions.a:0", `{}`), Options{Tools: "kimi_k2", Functions: []string{"b"}})
	if err != nil || len(r.Calls) != 0 {
		t.Errorf("kimi_k2 unknown function = %+v, %v; want the call dropped", r, err)
	}
	if _, err := Parse(kSec+kimiCallText("7", `{}`), Options{Tools: "kimi_k2"}); err == nil {
		t.Error("a bare counter id with no Functions parsed")
	}
}

// FuzzParse: Parse never panics; a reply it returns is valid (UTF-8 where the
// text was, calls named with object arguments), its Message reads back
// through CallsOf as the same calls, and without parsers the text is the
// content unchanged.
func FuzzParse(f *testing.F) {
	for _, c := range corpus {
		f.Add(c.Text, c.Reasoning, c.Tools, c.Open)
	}
	f.Add("<think>x", "qwen3", "qwen25", true)
	f.Add("<|channel|>analysis<|message|>", "gpt-oss", "gpt-oss", false)
	f.Fuzz(func(t *testing.T, text, reasoning, tools string, open bool) {
		o := Options{Reasoning: reasoning, Tools: tools, ReasoningOpen: open}
		r, err := Parse(text, o)
		if Known(reasoning, tools) != nil {
			if err == nil {
				t.Fatalf("unknown parsers %q/%q accepted", reasoning, tools)
			}
			return
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		if reasoning == "" && tools == "" && (r.Content != text || r.Reasoning != "" || r.Calls != nil) {
			t.Fatalf("no parsers changed the text: %+v", r)
		}
		if utf8.ValidString(text) && (!utf8.ValidString(r.Content) || !utf8.ValidString(r.Reasoning)) {
			t.Fatalf("invalid UTF-8 out of valid text: %+v", r)
		}
		for _, c := range r.Calls {
			if c.Name == "" || len(c.Arguments) == 0 || c.Arguments[0] != '{' || !json.Valid(c.Arguments) {
				t.Fatalf("bad call %+v", c)
			}
		}
		m := r.Message(nil)
		if m.Role != "assistant" || m.Content != r.Content || m.ReasoningContent != r.Reasoning {
			t.Fatalf("message %+v from %+v", m, r)
		}
		back, err := CallsOf(m.ToolCalls)
		if err != nil || !SameCalls(back, r.Calls) {
			t.Fatalf("CallsOf(Message(r)) = %v, %v; want %v", back, err, r.Calls)
		}
		again, err := Parse(text, o)
		if err != nil || again.Content != r.Content || again.Reasoning != r.Reasoning || !SameCalls(again.Calls, r.Calls) {
			t.Fatalf("Parse is not deterministic")
		}
	})
}

func TestSameCallsHugeExponent(t *testing.T) {
	t.Parallel()
	if SameCalls([]Call{call("f", `{"n":1e999999999}`)}, []Call{call("f", `{"n":1e999999998}`)}) {
		t.Error("huge exponents compared equal")
	}
	if !SameCalls([]Call{call("f", `{"n":1e4096}`)}, []Call{call("f", `{"n":10e4095}`)}) {
		t.Error("1e4096 != 10e4095")
	}
}
