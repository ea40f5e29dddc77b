package tokenize

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
	"github.com/draftflow/draftflow/stages/tokenize/chattemplate"
	"github.com/draftflow/draftflow/stages/tokenize/kimi"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer"
	"github.com/draftflow/draftflow/topics"
)

// Conformance of Kimi-K2-family directories (no tokenizer.json; tokenization_kimi.py and, for K2.5,
// tool_declaration_ts.py) with transformers running that code (trust_remote_code=True). The model
// files are the copies in ../shared/models (see its README); reference ids come from
// testdata/kimi_reference.py with the pinned transformers, cached in $DRAFTFLOW_CACHE/golden/kimi.

var kimiModels = []string{"kimi-k2.5", "kimi-k2-thinking"}

func kimiDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "shared", "models", name)
	if _, err := os.Stat(filepath.Join(dir, kimi.VocabFile)); err != nil {
		testassets.Unavailable(t, "%s: %v", dir, err)
	}
	return dir
}

// copyDir copies a model directory into a writable temporary one.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestLoadKimiDirectories(t *testing.T) {
	for _, name := range kimiModels {
		t.Run(name, func(t *testing.T) {
			m, err := LoadModel(kimiDir(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if m.CustomCode == "" || m.SpecialTokenStart != 163584 || m.Tokenizer.VocabSize() != 163840 {
				t.Fatalf("custom code %q, special start %d, vocab %d", m.CustomCode, m.SpecialTokenStart, m.Tokenizer.VocabSize())
			}
			if id, ok := m.Tokenizer.TokenID("<|im_end|>"); !ok || id != 163586 {
				t.Fatalf("<|im_end|> = %d, %v", id, ok)
			}
			if id, ok := m.Tokenizer.TokenID("<|reserved_token_163600|>"); !ok || id != 163600 {
				t.Fatalf("reserved token 163600 = %d, %v", id, ok)
			}
		})
	}
}

// Custom code is recognised by content: other comments load, other code fails naming the file.
func TestKimiUnrecognizedCodeFails(t *testing.T) {
	src := kimiDir(t, "kimi-k2.5")
	edit := func(t *testing.T, file string, f func(string) string) string {
		dir := copyDir(t, src)
		p := filepath.Join(dir, file)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f(string(data))), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("comments", func(t *testing.T) {
		dir := edit(t, kimi.TokenizerFile, func(s string) string { return "# a new comment\n\n" + s + "\n# end\n" })
		if _, err := LoadModel(dir); err != nil {
			t.Fatalf("comment-only change refused: %v", err)
		}
	})
	for _, tc := range []struct{ name, file, old, new string }{
		{"run limit", kimi.TokenizerFile, "MAX_NO_WHITESPACES_CHARS = 25_000", "MAX_NO_WHITESPACES_CHARS = 30_000"},
		{"ts code", kimi.ToolsFile, `_TS_INDENT = "  "`, `_TS_INDENT = "    "`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := edit(t, tc.file, func(s string) string { return strings.Replace(s, tc.old, tc.new, 1) })
			_, err := LoadModel(dir)
			if err == nil || !strings.Contains(err.Error(), tc.file) || !strings.Contains(err.Error(), "kimi-k2.5") {
				t.Fatalf("modified %s: error %v, want one naming the file and the supported variants", tc.file, err)
			}
		})
	}
	t.Run("other module", func(t *testing.T) {
		dir := edit(t, "tokenizer_config.json", func(s string) string {
			return strings.Replace(s, "tokenization_kimi.TikTokenTokenizer", "tokenization_other.TikTokenTokenizer", 1)
		})
		_, err := LoadModel(dir)
		if err == nil || !strings.Contains(err.Error(), "tokenization_other.py") {
			t.Fatalf("unknown module: error %v", err)
		}
	})
}

// kimiTexts is the plain-text corpus: the tokenizer corpus (each file whole and line by line), runs
// around the 25,000-character limit and the 400,000-character window, special-token text, and seeded
// random strings.
func kimiTexts(t testing.TB) []string {
	t.Helper()
	files, _ := filepath.Glob("tokenizer/testdata/corpus/*.txt")
	if len(files) == 0 {
		t.Fatal("no corpus files")
	}
	var texts []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(data))
		for _, line := range strings.SplitAfter(string(data), "\n") {
			if line != "" {
				texts = append(texts, line)
			}
		}
	}
	rep := strings.Repeat
	texts = append(texts,
		rep("a", 25000), rep("a", 25001), rep("a", 60000), rep(" ", 25001), rep(" ", 50003)+"x",
		rep("ab", 20000)+" "+rep("cd", 13000), rep("\n", 30000)+"end", rep("7", 25005),
		rep("x", 24990)+"<|im_end|>"+rep("y", 20), rep("x", 24990)+"<|reserved_token_163600|>"+rep("y", 20),
		rep("x", 24995)+"<|reserved_token_163600|>", rep("\u3000", 25010)+"漢字"+rep("\u00a0", 25001),
		rep("é", 26000), rep("日本", 13000), rep("\x1c", 25002)+"z", rep("word ", 90000), rep("w", 400_010),
		"<|im_user|>user<|im_middle|>hi<|im_end|><think></think>[EOS][PAD]<|reserved_token_163700|>",
		"", " ", "\n", "a  b   123 4567  ",
	)
	atoms := []string{" ", "  ", "\n", "\r\n", "\t", "a", "Hello", "'s", "'LL", "123", "4567", "日本", "語", "😀",
		"👩‍👩‍👧", "é", "e\u0301", "ß", "İ", "ǅ", "<|im_end|>", "<think>", "[EOS]", "<|reserved_token_163800|>",
		"\u00a0", "\u3000", "!", "...", "{\"k\": 1}", "ـ", "ก", "\u1c89", "\x1c"}
	r := rand.New(rand.NewPCG(12, 25000))
	for i := 0; i < 500; i++ {
		var b strings.Builder
		for n := r.IntN(20) + 1; n > 0; n-- {
			b.WriteString(atoms[r.IntN(len(atoms))])
		}
		texts = append(texts, b.String())
	}
	return texts
}

type kimiCase struct {
	ID                  string            `json:"id"`
	Messages            []json.RawMessage `json:"messages"`
	Tools               json.RawMessage   `json:"tools,omitempty"`
	Kwargs              json.RawMessage   `json:"kwargs,omitempty"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt,omitempty"`
	Models              []string          `json:"models,omitempty"`
}

// kimiCases is the conversation corpus: the chat template corpus plus the Kimi one (tools with
// nested schemas, $defs, failing TypeScript conversions, tool calls with big integers, reasoning,
// thinking on and off, content as a list of parts).
func kimiCases(t testing.TB) []kimiCase {
	t.Helper()
	var out []kimiCase
	for _, f := range []string{"chattemplate/testdata/conversations.jsonl", "testdata/kimi_conversations.jsonl"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var c kimiCase
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(c.Models) == 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

func (c kimiCase) input(t testing.TB) chattemplate.Input {
	in := chattemplate.Input{Tools: c.Tools, AddGenerationPrompt: c.AddGenerationPrompt == nil || *c.AddGenerationPrompt}
	for _, raw := range c.Messages {
		var m topics.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
		in.Messages = append(in.Messages, chattemplate.Message(m))
	}
	if len(c.Kwargs) > 0 {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(c.Kwargs, &kw); err != nil {
			t.Fatal(err)
		}
		in.Kwargs = map[string]any{}
		for k, v := range kw {
			in.Kwargs[k] = v
		}
	}
	return in
}

type kimiRef struct {
	Pattern string     `json:"pattern"`
	Texts   [][]uint32 `json:"texts"`
	Results []struct {
		ID    string   `json:"id"`
		Text  *string  `json:"text"`
		IDs   []uint32 `json:"ids"`
		Error string   `json:"error"`
	} `json:"results"`
}

func kimiReference(t testing.TB, dir string, texts []string, cases []kimiCase) *kimiRef {
	t.Helper()
	type request struct {
		ModelDir string     `json:"model_dir"`
		Want     string     `json:"want_transformers"`
		Texts    []string   `json:"texts"`
		Cases    []kimiCase `json:"cases"`
	}
	req := request{Want: transformersPin(t), Texts: texts, Cases: cases}
	out := pythonReference(t, "kimi", "testdata/kimi_reference.py", "transformers, tiktoken", dir, nil, req,
		func() any { r := req; r.ModelDir = copyDir(t, dir); return r })
	var ref kimiRef
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	return &ref
}

// TestKimiMatchesTransformers: ids of plain texts, renders and ids of conversations, identical to
// transformers running the directory's own Python code.
func TestKimiMatchesTransformers(t *testing.T) {
	texts := kimiTexts(t)
	cases := kimiCases(t)
	for _, name := range kimiModels {
		t.Run(name, func(t *testing.T) {
			dir := kimiDir(t, name)
			m, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			ref := kimiReference(t, dir, texts, cases)
			if ref.Pattern != tokenizer.PatternKimiK2 {
				t.Errorf("pat_str differs from tokenizer.PatternKimiK2:\n%s", ref.Pattern)
			}
			same := 0
			for i, text := range texts {
				got := m.Tokenizer.Encode(text)
				if slices.Equal(got, ref.Texts[i]) || (len(got) == 0 && len(ref.Texts[i]) == 0) {
					same++
				} else if same+5 > i {
					t.Errorf("text %d (%d chars, %.40q): %s", i, len(text), text, firstDiff(ref.Texts[i], got))
				}
			}
			t.Logf("%s plain text: %d/%d identical ids", name, same, len(texts))
			if same != len(texts) {
				t.Errorf("plain text: %d of %d differ", len(texts)-same, len(texts))
			}
			renders, idsSame := 0, 0
			for i, c := range cases {
				r := ref.Results[i]
				got, err := m.Render(c.input(t))
				switch {
				case r.Error != "":
					if err == nil {
						t.Errorf("%s: Python raised %q, Go rendered", c.ID, r.Error)
						continue
					}
					renders++
					idsSame++
					continue
				case err != nil:
					t.Errorf("%s: %v", c.ID, err)
					continue
				case got != *r.Text:
					t.Errorf("%s: render differs: %s", c.ID, textDiff(*r.Text, got))
					continue
				}
				renders++
				if ids := m.Tokenizer.Encode(got); slices.Equal(ids, r.IDs) {
					idsSame++
				} else {
					t.Errorf("%s: ids differ: %s", c.ID, firstDiff(r.IDs, ids))
				}
			}
			t.Logf("%s conversations: %d/%d identical renders, %d/%d identical ids", name, renders, len(cases), idsSame, len(cases))
		})
	}
}

func firstDiff(want, got []uint32) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	return fmt.Sprintf("first difference at %d (want %d ids, got %d): want %v, got %v", i, len(want), len(got),
		want[i:min(len(want), i+8)], got[i:min(len(got), i+8)])
}

func textDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(0, i-60)
	return fmt.Sprintf("at byte %d:\n  want %q\n  got  %q", i, want[lo:min(len(want), i+80)], got[lo:min(len(got), i+80)])
}
