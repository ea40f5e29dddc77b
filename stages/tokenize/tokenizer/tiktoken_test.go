package tokenizer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		useFastMatchers = fast
		k, err := LoadTiktoken(path, PatternKimiK2, specials)
		useFastMatchers = true
		if err != nil {
			t.Fatalf("Kimi pattern (fast=%v): %v", fast, err)
		}
		text := "你好世界Hello WORLD's 123456 ſ"
		if got := k.Decode(k.Encode(text)); got != text {
			t.Errorf("Kimi pattern round trip (fast=%v) = %q", fast, got)
		}
	}
}

func TestParseTiktokenErrors(t *testing.T) {
	for _, in := range []string{"", "!!! 1\n", "YQ== x\n", "YQ==\n"} {
		if _, err := ParseTiktoken(strings.NewReader(in), PatternCL100K, nil); err == nil {
			t.Errorf("ParseTiktoken(%q): want error", in)
		}
	}
}
