package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

// TestBundledAgainstReference checks the bundled tokenizer against the Python reference.
func TestBundledAgainstReference(t *testing.T) {
	data, err := bundled.ReadFile("tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	texts := append(corpusTexts(t), randomTexts(99, 1000)...)
	want := golden(t, path, texts)
	for i, text := range texts {
		if compareIDs(t, fmt.Sprintf("bundled text %d", i), text, tk.Encode(text), want.IDs[i]) {
			if d := tk.Decode(want.IDs[i]); d != want.Decoded[i] {
				t.Errorf("bundled text %d: Decode = %q, want %q", i, d, want.Decoded[i])
			}
		}
	}
}

// bundledJSON returns the bundled tokenizer.json as a generic JSON object to derive variants from.
func bundledJSON(t *testing.T) map[string]any {
	t.Helper()
	data, err := bundled.ReadFile("tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func raw(s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		panic(fmt.Sprintf("%v: %s", err, s))
	}
	return v
}

const splitLlama3 = `{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}`

const byteLevelPlain = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}`

// variants derive tokenizers from the bundled one that exercise components the real models do
// not: added-token flags, normalizers, Split behaviors, Digits, Metaspace, ByteLevel options.
var variants = map[string]func(m map[string]any){
	"added_flags_lowercase": func(m map[string]any) {
		added := m["added_tokens"].([]any)
		flags := []string{"lstrip", "rstrip", "single_word", "normalized"}
		for i, f := range flags {
			added[4+i].(map[string]any)[f] = true
		}
		added[0].(map[string]any)["lstrip"] = true
		added[0].(map[string]any)["rstrip"] = true
		n := len(m["model"].(map[string]any)["vocab"].(map[string]any)) + len(added)
		added = append(added,
			raw(fmt.Sprintf(`{"id": %d, "content": "<MiXeD>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false}`, n)),
			raw(fmt.Sprintf(`{"id": %d, "content": "hello", "single_word": true, "lstrip": false, "rstrip": false, "normalized": true, "special": false}`, n+1)),
			raw(fmt.Sprintf(`{"id": %d, "content": " the", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": false}`, n+2)))
		m["added_tokens"] = added
		m["normalizer"] = raw(`{"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}`)
	},
	"normalizers": func(m map[string]any) {
		m["normalizer"] = raw(`{"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Strip", "strip_left": true, "strip_right": true}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, {"type": "Prepend", "prepend": "^"}, {"type": "Replace", "pattern": {"String": "e"}, "content": "E"}]}`)
	},
	"split_behaviors": func(m map[string]any) {
		m["pre_tokenizer"] = raw(`{"type": "Sequence", "pretokenizers": [
			{"type": "Split", "pattern": {"String": "\n"}, "behavior": "MergedWithPrevious", "invert": false},
			{"type": "Split", "pattern": {"Regex": "[,.;]"}, "behavior": "MergedWithNext", "invert": false},
			{"type": "Split", "pattern": {"Regex": "\\p{Lu}+"}, "behavior": "Contiguous", "invert": true},
			{"type": "Split", "pattern": {"Regex": "\\s{3,}"}, "behavior": "Removed", "invert": false},
			{"type": "Digits", "individual_digits": true},
			` + splitLlama3 + `, ` + byteLevelPlain + `]}`)
	},
	"split_removed_invert": func(m map[string]any) {
		m["pre_tokenizer"] = raw(`{"type": "Sequence", "pretokenizers": [
			{"type": "Split", "pattern": {"Regex": "\\w+|[^\\w\\s]+"}, "behavior": "Removed", "invert": true},
			{"type": "Digits", "individual_digits": false},
			` + byteLevelPlain + `]}`)
	},
	"bytelevel_regex_prefix": func(m map[string]any) {
		m["pre_tokenizer"] = raw(`{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`)
	},
	"metaspace_first": func(m map[string]any) {
		m["normalizer"] = raw(`{"type": "ByteLevel"}`)
		m["pre_tokenizer"] = raw(`{"type": "Metaspace", "replacement": "Ġ", "prepend_scheme": "first", "split": true}`)
		m["decoder"] = raw(`{"type": "Sequence", "decoders": [{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}]}`)
	},
	"metaspace_always_nosplit": func(m map[string]any) {
		m["normalizer"] = raw(`{"type": "ByteLevel"}`)
		m["pre_tokenizer"] = raw(`{"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "Ġ", "prepend_scheme": "always", "split": false}]}`)
	},
	"metaspace_legacy_no_prefix": func(m map[string]any) {
		m["normalizer"] = raw(`{"type": "ByteLevel"}`)
		m["pre_tokenizer"] = raw(`{"type": "Metaspace", "replacement": "Ġ", "add_prefix_space": false, "prepend_scheme": "never", "split": false}`)
		m["decoder"] = raw(`{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`)
	},
	"metaspace_decoder_first": func(m map[string]any) {
		m["normalizer"] = raw(`{"type": "ByteLevel"}`)
		m["pre_tokenizer"] = raw(`{"type": "Metaspace", "replacement": "Ġ", "prepend_scheme": "always", "split": true}`)
		m["decoder"] = raw(`{"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "Ġ", "prepend_scheme": "first", "split": true}, {"type": "Strip", "content": "x", "start": 2, "stop": 0}]}`)
	},
	"no_ignore_merges": func(m map[string]any) {
		m["model"].(map[string]any)["ignore_merges"] = false
	},
}

// TestVariantsAgainstReference compares each derived tokenizer with the Python reference.
func TestVariantsAgainstReference(t *testing.T) {
	texts := append(corpusTexts(t), randomTexts(5, 500)...)
	texts = append(texts, "hello Hello HELLO <MiXeD> <mixed>x a hello_b hello, the  the\tthe <think>  x  </think>  y",
		"x<tool_call>y <tool_call> z", " <|begin_of_text|> a<|begin_of_text|>b ", "a,b.c;d\n\ne   f    g", "")
	for name, edit := range variants {
		t.Run(name, func(t *testing.T) {
			m := bundledJSON(t)
			edit(m)
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			tk, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			want := golden(t, path, texts)
			bad := 0
			for i, text := range texts {
				if !compareIDs(t, fmt.Sprintf("%s text %d", name, i), text, tk.Encode(text), want.IDs[i]) {
					if bad++; bad > 5 {
						t.FailNow()
					}
					continue
				}
				if d := tk.Decode(want.IDs[i]); d != want.Decoded[i] {
					t.Errorf("%s text %d: Decode = %q, want %q", name, i, d, want.Decoded[i])
				}
			}
		})
	}
}
