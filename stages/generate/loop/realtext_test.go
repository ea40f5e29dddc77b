package loop

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer"
)

// realReply is one text a model could legitimately write, with where it comes from.
type realReply struct {
	kind, source, text string
}

// repoRoot is the module's root (this file is three levels down).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// assistantTexts collects what assistant messages of a JSONL conversation file hold: content (text parts
// too), reasoning_content and tool_calls (as the JSON a model writes them in).
func assistantTexts(t *testing.T, path string) []realReply {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []realReply
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var row map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &row) != nil {
			continue
		}
		var msgs []map[string]json.RawMessage
		_ = json.Unmarshal(row["messages"], &msgs)
		for _, m := range msgs {
			var role string
			_ = json.Unmarshal(m["role"], &role)
			if role != "assistant" {
				continue
			}
			var s string
			if json.Unmarshal(m["content"], &s) == nil && s != "" {
				out = append(out, realReply{"chat", path, s})
			}
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(m["content"], &parts) == nil {
				for _, p := range parts {
					if p.Text != "" {
						out = append(out, realReply{"chat", path, p.Text})
					}
				}
			}
			if json.Unmarshal(m["reasoning_content"], &s) == nil && s != "" {
				out = append(out, realReply{"reasoning", path, s})
			}
			if len(m["tool_calls"]) > 0 && string(m["tool_calls"]) != "null" {
				out = append(out, realReply{"tool-call", path, string(m["tool_calls"])})
			}
		}
	}
	return out
}

// realReplies is the text this repository holds that a model could write: the assistant turns of the
// sample and conformance conversations, the tokenizer conformance corpus, the project's docs (markdown
// with tables and code blocks) and its Go source (code, with its tables of test cases).
func realReplies(t *testing.T) []realReply {
	root := repoRoot()
	var out []realReply
	for _, p := range []string{"testdata/sample/conversations.jsonl", "stages/tokenize/chattemplate/testdata/conversations.jsonl",
		"stages/tokenize/testdata/kimi_conversations.jsonl"} {
		out = append(out, assistantTexts(t, filepath.Join(root, p))...)
	}
	add := func(kind, pattern string) {
		files, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, realReply{kind, f, string(data)})
		}
	}
	add("corpus", "stages/tokenize/tokenizer/testdata/corpus/*.txt")
	// long_words.txt is no reply: it is the tokenizer's stress test of runs thousands of characters long
	// ("aaaa...", "abab...", "9999...", "----..."), what a model writes only when it loops (the test
	// below checks that it is stopped).
	out = slices.DeleteFunc(out, func(r realReply) bool { return filepath.Base(r.source) == "long_words.txt" })
	add("markdown", "docs/*.md")
	add("markdown", "README.md")
	for _, dir := range []string{"sglang", "sglang/sim", "stages/generate", "stages/generate/admission", "topics", "sink", "shard", "bench/generate"} {
		add("code", filepath.Join(dir, "*.go"))
	}
	return out
}

// longestLoop is the longest periodic tail (period <= maxPeriod, at least minRepeats copies) anywhere in
// ids: the MinTokens at which a Detector with these settings would first stop this text.
func longestLoop(ids []uint32, maxPeriod, minRepeats int) (int, int) {
	lo, hi := 0, len(ids)+1 // fires at MinTokens lo (0: never tried), not at hi
	period := 0
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if l, ok, _ := Scan(Config{MaxPeriod: maxPeriod, MinRepeats: minRepeats, MinTokens: mid}, ids); ok {
			lo, period = mid, l.Period
		} else {
			hi = mid
		}
	}
	return lo, period
}

// TestNoFalseStopsOnRealText replays real text, tokenized with Qwen3's tokenizer, through a Detector at the
// default thresholds: none of it may be stopped. It logs, per kind of text, the longest repetition found
// (the MinTokens at which it would have been stopped, and its period) for the docs' false-stop figures.
func TestNoFalseStopsOnRealText(t *testing.T) {
	tk, err := tokenizer.Load(filepath.Join(testassets.Tokenizer(t, "qwen3"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	replies := realReplies(t)
	type worst struct {
		n, tokens, longest, period int
		source                     string
	}
	byKind := map[string]*worst{}
	stops := 0
	for _, r := range replies {
		ids := tk.Encode(r.text)
		if l, ok, _ := Scan(Config{}, ids); ok {
			stops++
			t.Errorf("%s (%s): stopped at the default thresholds: %+v: %q", r.source, r.kind, l,
				tk.Decode(ids[l.Start:l.End]))
		}
		w := byKind[r.kind]
		if w == nil {
			w = &worst{}
			byKind[r.kind] = w
		}
		w.n++
		w.tokens += len(ids)
		if longest, period := longestLoop(ids, DefaultMaxPeriod, DefaultMinRepeats); longest > w.longest {
			w.longest, w.period, w.source = longest, period, strings.TrimPrefix(r.source, repoRoot()+"/")
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	total := 0
	for _, k := range kinds {
		w := byKind[k]
		total += w.tokens
		t.Logf("%-10s %5d texts %8d tokens: longest repetition (period <= %d, >= %d copies) %d tokens, period %d (%s)",
			k, w.n, w.tokens, DefaultMaxPeriod, DefaultMinRepeats, w.longest, w.period, w.source)
	}
	t.Logf("%d texts, %d tokens, %d stopped at the defaults", len(replies), total, stops)
}

// TestStopsSyntheticRuns checks the other side on the tokenizer's stress corpus of long runs
// (long_words.txt): each line that repeats a unit over more than a thousand characters is stopped.
func TestStopsSyntheticRuns(t *testing.T) {
	tk, err := tokenizer.Load(filepath.Join(testassets.Tokenizer(t, "qwen3"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(), "stages/tokenize/tokenizer/testdata/corpus/long_words.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		head := line[:min(len(line), 8)]
		if len(line) < 1000 || strings.Count(line, head) < len(line)/len(head)/2 {
			continue // short, or not one unit repeated
		}
		ids := tk.Encode(line)
		if _, ok, _ := Scan(Config{}, ids); !ok && len(ids) >= 2*DefaultMinTokens {
			t.Errorf("a %d-character run (%d tokens) starting %q is not stopped", len(line), len(ids), head)
		}
	}
}
