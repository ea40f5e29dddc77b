// Package tokenizer is draftflow's pure-Go implementation of Hugging Face `tokenizers` encoding: it
// loads a tokenizer.json (or a tiktoken vocabulary) and turns text into exactly the token ids the
// reference library produces with encode(text, add_special_tokens=False), and back.
//
// It owns the whole encode path: added/special token extraction (with the lstrip, rstrip,
// single_word and normalized flags), normalizers, pre-tokenizers (Split regexes with Oniguruma
// semantics, ByteLevel, Digits, Metaspace), the BPE model (merges, ignore_merges, byte_fallback,
// unknown-token fusing) and the decoders used by the supported model families: byte-level BPE
// (Llama 3.x, Qwen2.5/3, DeepSeek-V3/R1, gpt-oss), sentencepiece-style BPE with byte fallback
// (Llama 2, Mistral, Gemma 3) and tiktoken rank files (Kimi-K2, o200k/cl100k, Tekken).
//
// Exactness rules: any component of a tokenizer.json this package does not implement makes Load
// fail with an error naming it; there is no silent fallback. Regex pre-tokenizers use hand-written
// matchers for the known model patterns (verified against the general regex path by fuzzing) and
// github.com/dlclark/regexp2 for any other pattern. Unicode classes (\p{L}, \p{N}, ...) follow the
// tables of the Oniguruma engine the reference uses (Unicode 16), not Go's older unicode package.
//
// The post-processor of a tokenizer.json is not applied: Encode corresponds to
// add_special_tokens=False, which is what chat-template rendering needs.
//
// A Tokenizer is immutable after loading and safe for concurrent use; a bounded word cache speeds
// up repeated words.
package tokenizer
