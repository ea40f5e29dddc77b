// Command mkbundled trains the small byte-level BPE tokenizer bundled with draftflow (for runs and
// tests that need no downloaded model) and writes it, with a ChatML chat template, to
// stages/tokenize/tokenizer/bundled/model/.
//
// Usage (from the repository root): go run ./stages/tokenize/tokenizer/internal/mkbundled [-out DIR]
//
// The output is deterministic: the same source always produces byte-identical files.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// splitPattern is the Llama-3 / GPT-4 (cl100k) pre-tokenizer regex.
const splitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// specialTokens are appended after the BPE vocabulary; special marks tokens that
// skip_special_tokens drops (the reasoning and tool-call markers stay visible, as in Qwen3).
var specialTokens = []struct {
	content string
	special bool
}{
	{"<|begin_of_text|>", true},
	{"<|endoftext|>", true},
	{"<|im_start|>", true},
	{"<|im_end|>", true},
	{"<think>", false},
	{"</think>", false},
	{"<tool_call>", false},
	{"</tool_call>", false},
}

const maxMerges = 3000

func main() {
	out := flag.String("out", "stages/tokenize/tokenizer/bundled/model", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		slog.Error("mkbundled", "err", err)
		os.Exit(1)
	}
}

func run(out string) error {
	words, err := pretokenize(trainingText())
	if err != nil {
		return err
	}
	vocab, merges := train(words, maxMerges)
	files := map[string][]byte{
		"tokenizer.json":        tokenizerJSON(vocab, merges),
		"tokenizer_config.json": mustJSON(tokenizerConfig(len(vocab))),
		"config.json":           mustJSON(modelConfig(len(vocab))),
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return err
		}
	}
	slog.Info("mkbundled: wrote bundled tokenizer", "dir", out, "vocab", len(vocab), "merges", len(merges),
		"tokenizer_json_bytes", len(files["tokenizer.json"]))
	return nil
}

// byteRunes is the GPT-2 byte-level alphabet.
func byteRunes() [256]rune {
	var t [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}

// pretokenize splits text with the Llama-3 regex and maps each piece to the byte-level alphabet,
// returning piece counts.
func pretokenize(text string) (map[string]int, error) {
	re, err := regexp2.Compile(splitPattern, regexp2.None)
	if err != nil {
		return nil, err
	}
	alpha := byteRunes()
	counts := map[string]int{}
	m, err := re.FindStringMatch(text)
	for err == nil && m != nil {
		var b []byte
		for _, c := range []byte(m.String()) {
			b = utf8.AppendRune(b, alpha[c])
		}
		counts[string(b)]++
		m, err = re.FindNextMatch(m)
	}
	return counts, err
}

type word struct {
	syms  []int
	count int
}

// train runs classic BPE training: repeatedly merge the most frequent adjacent pair (ties broken
// by the smaller pair of ids) until maxMerges merges or no pair occurs twice.
func train(counts map[string]int, maxMerges int) (vocab []string, merges [][2]string) {
	alpha := byteRunes()
	ids := map[string]int{}
	for b := 0; b < 256; b++ {
		s := string(alpha[b])
		ids[s] = len(vocab)
		vocab = append(vocab, s)
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, 0, len(keys))
	for _, k := range keys {
		var syms []int
		for _, r := range k {
			syms = append(syms, ids[string(r)])
		}
		words = append(words, word{syms, counts[k]})
	}
	for len(merges) < maxMerges {
		pairs := map[[2]int]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]int{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		best, bestN := [2]int{}, 1
		for p, n := range pairs {
			if n > bestN || (n == bestN && n > 1 && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		merged := vocab[best[0]] + vocab[best[1]]
		newID, ok := ids[merged]
		if !ok {
			newID = len(vocab)
			ids[merged] = newID
			vocab = append(vocab, merged)
		}
		merges = append(merges, [2]string{vocab[best[0]], vocab[best[1]]})
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, newID)
					i++
				} else {
					out = append(out, s[i])
				}
			}
			words[wi].syms = out
		}
	}
	return vocab, merges
}

func mustJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n"))
}

// tokenizerJSON writes a Hugging Face tokenizer.json with the vocabulary in id order.
func tokenizerJSON(vocab []string, merges [][2]string) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [\n")
	for i, t := range specialTokens {
		sep := ","
		if i == len(specialTokens)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %t}%s\n",
			len(vocab)+i, jsonString(t.content), t.special, sep)
	}
	b.WriteString("  ],\n  \"normalizer\": null,\n")
	fmt.Fprintf(&b, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n", jsonString(splitPattern))
	b.WriteString("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n")
	b.WriteString("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n")
	b.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": true,\n    \"vocab\": {\n")
	for id, tok := range vocab {
		sep := ","
		if id == len(vocab)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "      %s: %d%s\n", jsonString(tok), id, sep)
	}
	b.WriteString("    },\n    \"merges\": [\n")
	for i, m := range merges {
		sep := ","
		if i == len(merges)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "      [%s, %s]%s\n", jsonString(m[0]), jsonString(m[1]), sep)
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.Bytes()
}
