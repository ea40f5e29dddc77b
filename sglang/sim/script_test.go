package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// scriptRows is a small dataset: an OpenAI-style row whose id needs rid
// escaping (a tool-call turn with non-ASCII reasoning and arguments, then a
// plain turn with non-ASCII content), a ShareGPT row with a numeric id and a
// function_call turn, and a row without id.
var scriptRows = []string{
	`{"id": "c%1;x", "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Weather in Zürich?"},` +
		` {"role": "assistant", "reasoning_content": "User wants weather ☀.", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"days\": 3}"}}]},` +
		` {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "It is 21 °C in Zürich."}],` +
		` "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}`,
	`{"id": 42, "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}, {"from": "human", "value": "look it up"},` +
		` {"from": "function_call", "value": "{\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}}"}, {"from": "observation", "value": "ok"}, {"from": "gpt", "value": "done"}]}`,
	`{"messages": [{"role": "user", "content": "no id"}, {"role": "assistant", "content": "unmatched"}]}`,
}

func writeConversations(t *testing.T, rows []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "conv.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// scriptedBody is a /generate body as the generate stage sends it.
func scriptedBody(rid string, maxNew int) map[string]any {
	return map[string]any{"input_ids": []int{1, 2, 3, 4}, "rid": rid,
		"sampling_params": map[string]any{"max_new_tokens": maxNew, "skip_special_tokens": false, "temperature": 0.7}}
}

func TestScriptedReplies(t *testing.T) {
	t.Parallel()
	conv := writeConversations(t, scriptRows)
	const (
		call0 = "c%251%3Bx#0.1;"
		text1 = "c%251%3Bx#1.3;" // a retry: the attempt does not matter
		share = "42#1.1;"
	)
	want := map[string]map[string]string{
		ReplyQwen3: {
			call0: "<think>\nUser wants weather \\u2600.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Z\\u00fcrich\",\"days\":3}}\n</tool_call>",
			text1: "<think>\nSimulated reasoning for assistant turn 1.\n</think>\n\nIt is 21 \\u00B0C in Z\\u00FCrich.",
			share: "<think>\nSimulated reasoning for assistant turn 1.\n</think>\n\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\":\"x\"}}\n</tool_call>",
		},
		ReplyKimiK2: {
			call0: "<think>User wants weather \\u2600.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\":\"Z\\u00fcrich\",\"days\":3}<|tool_call_end|><|tool_calls_section_end|>",
			text1: "<think>Simulated reasoning for assistant turn 1.</think>It is 21 \\u00B0C in Z\\u00FCrich.",
			share: "<think>Simulated reasoning for assistant turn 1.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.lookup:0<|tool_call_argument_begin|>{\"q\":\"x\"}<|tool_call_end|><|tool_calls_section_end|>",
		},
		ReplyLlama3: {
			call0: "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Z\\u00fcrich\",\"days\":3}}",
			text1: "It is 21 \\u00B0C in Z\\u00FCrich.",
		},
		ReplyDeepSeekV3: {
			call0: "<think>User wants weather \\u2600.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Z\\u00fcrich\",\"days\":3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			text1: "<think>Simulated reasoning for assistant turn 1.</think>It is 21 \\u00B0C in Z\\u00FCrich.",
		},
	}
	for _, format := range []string{ReplyQwen3, ReplyKimiK2, ReplyLlama3, ReplyDeepSeekV3} {
		t.Run(format, func(t *testing.T) {
			cfg := Config{Instant: true, Conversations: conv, ReplyFormat: format, Seed: 5}
			_, ts := newTestServer(t, cfg)
			for rid, w := range want[format] {
				if got, ok, err := ScriptedReply(cfg, rid); err != nil || !ok || got != w {
					t.Errorf("ScriptedReply(%q) = %q, %v, %v; want %q", rid, got, ok, err, w)
				}
				g := generate(t, ts.URL, scriptedBody(rid, 4096))
				if g.Text != w {
					t.Errorf("%s: text\n%q\nwant\n%q", rid, g.Text, w)
				}
				n := len(g.OutputIDs)
				if n != len(w)+1 || g.MetaInfo.CompletionTokens != n {
					t.Fatalf("%s: %d output ids (completion_tokens %d), want the script's %d bytes and EOS", rid, n, g.MetaInfo.CompletionTokens, len(w))
				}
				b := make([]byte, n-1)
				for i, id := range g.OutputIDs[:n-1] {
					b[i] = byte(id)
				}
				if string(b) != w {
					t.Errorf("%s: output_ids decode to %q", rid, b)
				}
				eos := g.OutputIDs[n-1]
				fr := g.MetaInfo.FinishReason
				if !slices.Contains(defaultEOSTokenIDs, int(eos)) || fr == nil || fr.Type != "stop" || fr.Matched == nil || *fr.Matched != int(eos) {
					t.Errorf("%s: last id %d, finish %+v; want EOS matched", rid, eos, fr)
				}
				// max_new_tokens shorter than the script cuts it.
				c := generate(t, ts.URL, scriptedBody(rid, 12))
				if c.Text != w[:12] || c.MetaInfo.FinishReason.Type != "length" {
					t.Errorf("%s cut at 12: %q %+v", rid, c.Text, c.MetaInfo.FinishReason)
				}
			}
		})
	}
}

// A scripted reply streams as SGLang streams it: cumulative chunks that are
// valid UTF-8 (DeepSeek's markers are multi-byte), ending in the whole text.
func TestScriptedReplyStream(t *testing.T) {
	t.Parallel()
	conv := writeConversations(t, scriptRows)
	cfg := Config{Instant: true, Conversations: conv, ReplyFormat: ReplyDeepSeekV3}
	_, ts := newTestServer(t, cfg)
	want, _, _ := ScriptedReply(cfg, "c%251%3Bx#0.1;")
	body := scriptedBody("c%251%3Bx#0.1;", 4096)
	body["stream"] = true
	resp, data := post(t, ts.URL+"/generate", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	var last GenerateResponse
	chunks := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || payload == "[DONE]" {
			continue
		}
		var c GenerateResponse
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(c.Text) || strings.ContainsRune(c.Text, utf8.RuneError) || !strings.HasPrefix(want, c.Text) {
			t.Fatalf("chunk %d text %q is not a clean prefix of the script", chunks, c.Text)
		}
		last = c
		chunks++
	}
	if chunks == 0 || last.Text != want {
		t.Fatalf("%d chunks, final text %q, want %q", chunks, last.Text, want)
	}
	// Mid-stream, text stops before a character whose bytes are not all out.
	s := &Server{cfg: Config{}.withDefaults()}
	r := &request{byteText: true}
	ids := TokenizeText(want)
	for n := range len(ids) + 1 {
		text := s.outputText(r, ids[:n], nil, 0, nil)
		if !utf8.ValidString(text) || !strings.HasPrefix(want, text) || n-len(text) >= utf8.UTFMax {
			t.Fatalf("after %d ids: %q", n, text)
		}
	}
}

// Requests whose rid names no scripted turn answer as a server without
// scripting does.
func TestScriptedUnknownRIDIsRandom(t *testing.T) {
	t.Parallel()
	conv := writeConversations(t, scriptRows)
	_, scripted := newTestServer(t, Config{Instant: true, Conversations: conv, ReplyFormat: ReplyQwen3, Seed: 9})
	_, plain := newTestServer(t, Config{Instant: true, Seed: 9})
	for _, rid := range []string{"nosuch#0.1;", "c%251%3Bx#2.1;", "42#3.1;", "c%1;x#0.1;", "c%251%3Bx#0.1", "free-form", "#0.1;"} {
		a := generate(t, scripted.URL, scriptedBody(rid, 64))
		b := generate(t, plain.URL, scriptedBody(rid, 64))
		if !reflect.DeepEqual(a.OutputIDs, b.OutputIDs) || a.Text != b.Text {
			t.Errorf("rid %q: scripted server answered %q, plain %q", rid, a.Text, b.Text)
		}
		if strings.HasPrefix(a.Text, "<think>") {
			t.Errorf("rid %q got a scripted reply", rid)
		}
	}
}

// Diverges predicts which scripted tool calls diverge; retries decide the
// same; a diverging call differs from the original in its arguments only.
func TestScriptedToolDivergence(t *testing.T) {
	t.Parallel()
	var rows []string
	for i := range 40 {
		rows = append(rows, fmt.Sprintf(`{"id": "row-%d", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok"},`+
			` {"role": "user", "content": "again"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"n": %d, "s": "v", "flag": true}}}]}]}`, i, i))
	}
	rows = append(rows, `{"id": "empty", "messages": [{"role": "assistant", "tool_calls": [{"name": "g", "arguments": {}}]}]}`)
	conv := writeConversations(t, rows)
	const seed, rate = 11, 0.5
	cfg := Config{Instant: true, Conversations: conv, ReplyFormat: ReplyQwen3, Seed: seed, ToolDivergenceRate: rate}
	_, ts := newTestServer(t, cfg)
	callOf := func(text string) map[string]any {
		_, rest, ok := strings.Cut(text, "<tool_call>\n")
		js, _, ok2 := strings.Cut(rest, "\n</tool_call>")
		if !ok || !ok2 {
			t.Fatalf("no tool call in %q", text)
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(js), &c); err != nil {
			t.Fatalf("call %q: %v", js, err)
		}
		return c
	}
	diverged := 0
	for i := range 40 {
		id := fmt.Sprintf("row-%d", i)
		div := Diverges(seed, rate, id, 1)
		if div {
			diverged++
		}
		for attempt := 1; attempt <= 2; attempt++ {
			g := generate(t, ts.URL, scriptedBody(fmt.Sprintf("%s#1.%d;", id, attempt), 4096))
			c := callOf(g.Text)
			orig := map[string]any{"n": float64(i), "s": "v", "flag": true}
			if c["name"] != "f" {
				t.Fatalf("%s: name %v", id, c["name"])
			}
			if same := reflect.DeepEqual(c["arguments"], orig); same == div {
				t.Errorf("%s attempt %d: Diverges=%v but arguments %v (original %v)", id, attempt, div, c["arguments"], orig)
			}
		}
		// A turn without tool calls never diverges.
		if g := generate(t, ts.URL, scriptedBody(id+"#0.1;", 4096)); !strings.HasSuffix(g.Text, "ok") {
			t.Errorf("%s turn 0: %q", id, g.Text)
		}
	}
	if diverged < 10 || diverged > 30 {
		t.Errorf("%d of 40 diverged at rate %v", diverged, rate)
	}
	// Rates 0 and 1 are never and always; an empty argument object gains a key.
	if Diverges(seed, 0, "row-1", 1) || !Diverges(seed, 1, "row-1", 1) {
		t.Error("rate 0 or 1 not honoured")
	}
	cfg.ToolDivergenceRate = 1
	_, all := newTestServer(t, cfg)
	if c := callOf(generate(t, all.URL, scriptedBody("empty#0.1;", 4096)).Text); !reflect.DeepEqual(c["arguments"], map[string]any{"sim_diverged": true}) {
		t.Errorf("empty arguments diverged to %v", c["arguments"])
	}
}

func TestParseRID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rid  string
		id   string
		turn int
		ok   bool
	}{
		{"abc#0.1;", "abc", 0, true},
		{"c%251%3Bx#12.3;", "c%1;x", 12, true},
		{"a#b.c#2.10;", "a#b.c", 2, true},
		{"abc#0.1", "", 0, false},
		{"abc#x.1;", "", 0, false},
		{"abc0.1;", "", 0, false},
		{"abc#0.;", "", 0, false},
		{"a;b#0.1;", "", 0, false},
		{"", "", 0, false},
	} {
		id, turn, ok := ParseRID(c.rid)
		if id != c.id || turn != c.turn || ok != c.ok {
			t.Errorf("ParseRID(%q) = %q, %d, %v; want %q, %d, %v", c.rid, id, turn, ok, c.id, c.turn, c.ok)
		}
	}
}

func TestConversationsWithoutIDSkipped(t *testing.T) {
	t.Parallel()
	scripts, noID, bad, err := loadConversations(writeConversations(t, append(slices.Clone(scriptRows), `{"id": "broken", "messages": [`)))
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || bad[0] != len(scriptRows)+1 {
		t.Fatalf("malformed lines %v, want the last one", bad)
	}
	if noID != 1 || len(scripts) != 2 || len(scripts["c%1;x"]) != 2 || len(scripts["42"]) != 3 {
		t.Fatalf("rows %d (turns %d, %d), without id %d", len(scripts), len(scripts["c%1;x"]), len(scripts["42"]), noID)
	}
	if _, err := New(Config{Instant: true, ReplyFormat: ReplyQwen3, Logger: discardLogger()}); err == nil {
		t.Error("ReplyFormat without Conversations accepted")
	}
	if _, err := New(Config{Instant: true, ReplyFormat: "gpt", Conversations: "x", Logger: discardLogger()}); err == nil {
		t.Error("unknown ReplyFormat accepted")
	}
	if _, err := New(Config{Instant: true, ReplyFormat: ReplyQwen3, Conversations: filepath.Join(t.TempDir(), "missing"), Logger: discardLogger()}); err == nil {
		t.Error("missing Conversations file accepted")
	}
}

// SGLang's text leaves out the matched stop token (trim_matched_stop) even
// with skip_special_tokens=false, unless no_stop_trim is set; output_ids keep it.
func TestTextTrimsMatchedStop(t *testing.T) {
	t.Parallel()
	_, ts := newTestServer(t, Config{Instant: true, OutputLenDistribution: DistFixed, OutputLenMean: 8, Seed: 3})
	for _, noTrim := range []bool{false, true} {
		body := map[string]any{"input_ids": []int{1, 2}, "rid": "trim", "sampling_params": map[string]any{
			"max_new_tokens": 64, "skip_special_tokens": false, "no_stop_trim": noTrim}}
		g := generate(t, ts.URL, body)
		eos := g.OutputIDs[len(g.OutputIDs)-1]
		if g.MetaInfo.FinishReason.Type != "stop" || len(g.OutputIDs) != 8 {
			t.Fatalf("finish %+v after %d ids", g.MetaInfo.FinishReason, len(g.OutputIDs))
		}
		tail := fmt.Sprintf("<|%d|>", eos)
		if strings.HasSuffix(g.Text, tail) != noTrim {
			t.Errorf("no_stop_trim=%v: text %q", noTrim, g.Text)
		}
		body["stream"] = true
		_, data := post(t, ts.URL+"/generate", body)
		if got := bytes.Contains(data, []byte(fmt.Sprintf("|%d|", eos))); got != noTrim {
			t.Errorf("no_stop_trim=%v stream: %s", noTrim, data)
		}
	}
}
