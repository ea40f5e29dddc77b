package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

func loadBundled(t testing.TB) *Tokenizer {
	t.Helper()
	data, err := bundled.ReadFile("tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestBundledBasics checks the API on the bundled tokenizer without any external asset.
func TestBundledBasics(t *testing.T) {
	t.Parallel()
	tk := loadBundled(t)
	if got, want := tk.VocabSize(), 3027+8; got != want {
		t.Errorf("VocabSize = %d, want %d", got, want)
	}
	for i, tok := range []string{"<|begin_of_text|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"} {
		id, ok := tk.TokenID(tok)
		if !ok || id != uint32(3027+i) {
			t.Errorf("TokenID(%q) = %d, %v", tok, id, ok)
		}
	}
	if id, ok := tk.TokenID("Ġthe"); !ok || id < 256 {
		t.Errorf("TokenID(Ġthe) = %d, %v", id, ok)
	}
	if _, ok := tk.TokenID("no such token"); ok {
		t.Error("TokenID of an unknown token succeeded")
	}
	text := "<|im_start|>user\nHello, world! 你好 👋<|im_end|>\n<think>\nhmm\n</think>"
	ids := tk.Encode(text)
	if ids[0] != 3029 || !slices.Contains(ids, 3030) || !slices.Contains(ids, 3031) {
		t.Errorf("special tokens not matched: %v", ids)
	}
	if got := tk.Decode(ids); got != text {
		t.Errorf("Decode(Encode(x)) = %q, want %q", got, text)
	}
	if got := tk.DecodeSkipSpecial(ids); strings.Contains(got, "<|im_start|>") || !strings.Contains(got, "<think>") {
		t.Errorf("DecodeSkipSpecial = %q (specials dropped, <think> is not special)", got)
	}
	if got := tk.Encode(""); len(got) != 0 {
		t.Errorf("Encode(\"\") = %v", got)
	}
	if !tk.IsSpecial(3029) || tk.IsSpecial(3031) {
		t.Error("IsSpecial flags wrong")
	}
	// Invalid UTF-8 is encoded as U+FFFD.
	if got, want := tk.Encode("a\xffb"), tk.Encode("a\uFFFDb"); !slices.Equal(got, want) {
		t.Errorf("invalid UTF-8: %v, want %v", got, want)
	}
}

// TestRoundTripRandom: decoding the encoding gives back the text for a byte-level model.
func TestRoundTripRandom(t *testing.T) {
	t.Parallel()
	tk := loadBundled(t)
	for _, s := range randomTexts(3, 2000) {
		if got := tk.Decode(tk.Encode(s)); got != s {
			t.Fatalf("round trip of %q = %q", s, got)
		}
	}
}

// TestConcurrentEncode runs Encode from many goroutines (run with -race) and checks results are
// identical to the sequential ones.
func TestConcurrentEncode(t *testing.T) {
	t.Parallel()
	tk := loadBundled(t)
	texts := randomTexts(11, 300)
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s)
	}
	batch := tk.EncodeBatch(texts, 4)
	if len(batch) != len(texts) {
		t.Fatalf("EncodeBatch returned %d id lists for %d texts", len(batch), len(texts))
	}
	for i, got := range batch {
		if !slices.Equal(got, want[i]) {
			t.Fatalf("EncodeBatch text %d: %v, want %v", i, got, want[i])
		}
	}
	if got := tk.EncodeBatch(nil, 0); len(got) != 0 {
		t.Fatalf("EncodeBatch(nil) = %v", got)
	}
	tk2 := loadBundled(t) // cold cache, filled concurrently
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := range texts {
				i := (k + g*37) % len(texts)
				if got := tk2.Encode(texts[i]); !slices.Equal(got, want[i]) {
					t.Errorf("goroutine %d text %d: %v, want %v", g, i, got, want[i])
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestMergeStrategiesAgree checks the heap merge (long words) against the quadratic scan.
func TestMergeStrategiesAgree(t *testing.T) {
	t.Parallel()
	tk := loadBundled(t)
	m := tk.model
	r := rand.New(rand.NewPCG(1, 2))
	st := &scratch{}
	letters := "etaoinshrdlu thecodeing"
	for n := 0; n < 500; n++ {
		var b strings.Builder
		for k := r.IntN(300) + 2; k > 0; k-- {
			b.WriteByte(letters[r.IntN(len(letters))])
		}
		syms := m.initialSymbols(b.String(), nil)
		quad := m.mergeQuadratic(st, slices.Clone(syms))
		heap := m.mergeHeap(st, slices.Clone(syms))
		if !slices.Equal(quad, heap) {
			t.Fatalf("word %q: quadratic %v, heap %v", b.String(), quad, heap)
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"abc":                "abc",
		"a\xffb":             "a\uFFFDb",
		"\xe2\x82":           "\uFFFD",  // truncated 3-byte sequence: one maximal subpart
		"\xe2\x82A":          "\uFFFDA", // ditto, followed by ASCII
		"\xf0\x9f\x98":       "\uFFFD",
		"\xc0\xaf":           "\uFFFD\uFFFD", // overlong: each byte invalid
		"\xed\xa0\x80":       "\uFFFD\uFFFD\uFFFD",
		"ok\xf0\x9f\x98\x80": "ok😀",
	} {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnsupportedComponents: anything not implemented fails at load, naming the component.
func TestUnsupportedComponents(t *testing.T) {
	t.Parallel()
	cases := map[string]func(m map[string]any){
		"WordPiece":      func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" },
		"BertNormalizer": func(m map[string]any) { m["normalizer"] = raw(`{"type": "BertNormalizer"}`) },
		"Precompiled":    func(m map[string]any) { m["normalizer"] = raw(`{"type": "Precompiled", "precompiled_charsmap": ""}`) },
		"Punctuation":    func(m map[string]any) { m["pre_tokenizer"] = raw(`{"type": "Punctuation", "behavior": "Isolated"}`) },
		"CTC":            func(m map[string]any) { m["decoder"] = raw(`{"type": "CTC"}`) },
		"dropout":        func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 },
		"truncation":     func(m map[string]any) { m["truncation"] = raw(`{"max_length": 8}`) },
		"padding":        func(m map[string]any) { m["padding"] = raw(`{"pad_id": 0}`) },
		"ByteLevel before other pre-tokenizers": func(m map[string]any) {
			m["pre_tokenizer"] = raw(`{"type": "Sequence", "pretokenizers": [` + byteLevelPlain + `, ` + splitLlama3 + `]}`)
		},
		"add_prefix_space does not match": func(m map[string]any) {
			m["pre_tokenizer"] = raw(`{"type": "Metaspace", "replacement": "_", "add_prefix_space": false}`)
		},
		"Unigram": func(m map[string]any) { m["model"] = raw(`{"type": "Unigram", "vocab": [["a", 0.0]]}`) },
	}
	for want, edit := range cases {
		m := bundledJSON(t)
		edit(m)
		data, _ := json.Marshal(m)
		_, err := Parse(data)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Parse error = %v, want one naming %q", want, err, want)
		}
	}
}

// FuzzParse: Parse never panics on arbitrary input.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`))
	f.Add([]byte(`{"added_tokens": [{"id": 3, "content": "<s>", "special": true}], "model": {"vocab": {"a\u00e9\ud83d\ude00": 0}, "merges": [["a", "b"]]}}`))
	f.Add([]byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse(data)
		if err == nil {
			tk.Decode(tk.Encode("Hello <s> world 123"))
		}
	})
}
