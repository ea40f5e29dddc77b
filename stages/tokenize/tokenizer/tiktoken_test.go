package tokenizer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
)

// writeTiktokenFromHF converts a byte-level tokenizer.json (gpt-oss: o200k in HF form) into a
// tiktoken rank file, returning its path and the special tokens.
func writeTiktokenFromHF(t *testing.T, tokPath string) (string, map[string]uint32) {
	t.Helper()
	data, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		AddedTokens []AddedToken `json:"added_tokens"`
		Model       struct {
			Vocab map[string]uint32 `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "o200k.tiktoken")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for tok, id := range j.Model.Vocab {
		raw, ok := byteLevelDecode(tok)
		if !ok {
			t.Fatalf("token %q outside the byte-level alphabet", tok)
		}
		fmt.Fprintf(w, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(raw)), id)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	specials := map[string]uint32{}
	for _, a := range j.AddedTokens {
		specials[a.Content] = a.ID
	}
	return path, specials
}

// TestTiktokenAgainstReference loads gpt-oss's vocabulary in tiktoken form with the o200k pattern
// and checks it against the reference encoding of the equivalent tokenizer.json.
func TestTiktokenAgainstReference(t *testing.T) {
	tokPath := fetchTokenizer(t, "gptoss")
	path, specials := writeTiktokenFromHF(t, tokPath)
	tk, err := LoadTiktoken(path, PatternO200K, specials)
	if err != nil {
		t.Fatal(err)
	}
	texts := append(corpusTexts(t), randomTexts(31, 1000)...)
	want := golden(t, tokPath, texts)
	for i, text := range texts {
		if compareIDs(t, fmt.Sprintf("tiktoken o200k text %d", i), text, tk.Encode(text), want.IDs[i]) {
			if d := tk.Decode(want.IDs[i]); d != want.Decoded[i] {
				t.Errorf("text %d: Decode = %q, want %q", i, d, want.Decoded[i])
			}
		}
	}
	if id, ok := tk.TokenID("<|endoftext|>"); !ok || id != specials["<|endoftext|>"] {
		t.Errorf("TokenID(<|endoftext|>) = %d, %v", id, ok)
	}
	// Kimi-K2's pattern (class intersection) loads through both matcher paths.
	for _, fast := range []bool{true, false} {
		k, err := builder{regexpOnly: !fast}.loadTiktoken(path, PatternKimiK2, specials)
		if err != nil {
			t.Fatalf("Kimi pattern (fast=%v): %v", fast, err)
		}
		text := "你好世界Hello WORLD's 123456 ſ"
		if got := k.Decode(k.Encode(text)); got != text {
			t.Errorf("Kimi pattern round trip (fast=%v) = %q", fast, got)
		}
	}
}

// tiktokenPinned reports whether requirements-test.txt pins tiktoken (then the tiktoken reference
// test is an asset test like the others; until then it runs only where tiktoken happens to exist).
func tiktokenPinned() bool {
	data, err := os.ReadFile("../../../requirements-test.txt")
	return err == nil && strings.Contains(string(data), "\ntiktoken")
}

// TestTiktokenLibraryReference compares LoadTiktoken with the tiktoken library itself (Rust,
// fancy-regex) for the o200k, cl100k and Kimi-K2 patterns over gpt-oss's rank file.
func TestTiktokenLibraryReference(t *testing.T) {
	if out, err := exec.Command("python3", "-c", "import tiktoken").CombinedOutput(); err != nil {
		if tiktokenPinned() && testassets.Required() {
			t.Fatalf("python3 with tiktoken unavailable: %v %s", err, out)
		}
		t.Skipf("python3 with tiktoken unavailable (make deps-python installs it): %v", err)
	}
	tokPath := fetchTokenizer(t, "gptoss")
	path, specials := writeTiktokenFromHF(t, tokPath)
	texts := append(corpusTexts(t), randomTexts(41, 1500)...)
	texts = append(texts, randomSpaceTexts(42, 500)...)
	for _, pat := range []struct{ name, pattern string }{
		{"o200k", PatternO200K}, {"cl100k", PatternCL100K}, {"kimi", PatternKimiK2}, {"tekken", PatternTekken},
	} {
		t.Run(pat.name, func(t *testing.T) {
			tk, err := LoadTiktoken(path, pat.pattern, specials)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := json.Marshal(map[string]any{"ranks": path, "pattern": pat.pattern, "specials": specials, "texts": texts})
			reqPath := filepath.Join(t.TempDir(), "req.json")
			outPath := filepath.Join(t.TempDir(), "out.json")
			if err := os.WriteFile(reqPath, req, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("python3", "testdata/tiktoken_golden.py", reqPath, outPath).CombinedOutput(); err != nil {
				t.Fatalf("tiktoken_golden.py: %v\n%s", err, out)
			}
			var want struct {
				IDs [][]uint32 `json:"ids"`
			}
			data, err := os.ReadFile(outPath)
			if err != nil || json.Unmarshal(data, &want) != nil || len(want.IDs) != len(texts) {
				t.Fatalf("tiktoken_golden.py output: %v", err)
			}
			bad := 0
			for i, text := range texts {
				if !compareIDs(t, fmt.Sprintf("tiktoken %s text %d", pat.name, i), text, tk.Encode(text), want.IDs[i]) {
					if bad++; bad > 5 {
						t.FailNow()
					}
				}
			}
		})
	}
}

func TestParseTiktokenErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "!!! 1\n", "YQ== x\n", "YQ==\n"} {
		if _, err := ParseTiktoken(strings.NewReader(in), PatternCL100K, nil); err == nil {
			t.Errorf("ParseTiktoken(%q): want error", in)
		}
	}
}
