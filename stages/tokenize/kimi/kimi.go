package kimi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/stages/tokenize/chattemplate"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer"
)

// The constants of TikTokenTokenizer.encode and __init__, the same in every known variant.
const (
	// VocabFile is the tiktoken rank file (VOCAB_FILES_NAMES).
	VocabFile = "tiktoken.model"
	// ReservedSpecialTokens is num_reserved_special_tokens: ids len(ranks) .. len(ranks)+255 are
	// special tokens, named by tokenizer_config.json's added_tokens_decoder or <|reserved_token_ID|>.
	ReservedSpecialTokens = 256
	// MaxEncodeChars is TIKTOKEN_MAX_ENCODE_CHARS.
	MaxEncodeChars = 400_000
	// MaxRunChars is MAX_NO_WHITESPACES_CHARS.
	MaxRunChars = 25_000
)

// LoadTokenizer loads dir's tiktoken.model with the class's pattern and special tokens, cutting text
// as transformers and the class do before tiktoken sees it (tokenizer.Chunking). Its Encode is
// apply_chat_template's tokenization of a rendered text (encode(text, add_special_tokens=False)).
func LoadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, VocabFile)
	base, err := countRanks(path)
	if err != nil {
		return nil, err
	}
	specials := make(map[string]uint32, ReservedSpecialTokens)
	for id := base; id < base+ReservedSpecialTokens; id++ {
		name := fmt.Sprintf("<|reserved_token_%d|>", id)
		if tok, ok := cfg.added[id]; ok {
			name = tok
		}
		if prev, dup := specials[name]; dup {
			return nil, fmt.Errorf("kimi: %s: special token %q names ids %d and %d", dir, name, prev, id)
		}
		specials[name] = uint32(id)
	}
	tok, err := tokenizer.LoadTiktoken(path, tokenizer.PatternKimiK2, specials)
	if err != nil {
		return nil, fmt.Errorf("kimi: %w", err)
	}
	// transformers splits on its added tokens (added_tokens_decoder, additional_special_tokens and
	// the named special tokens) before calling the class; a name outside the 256 specials would get a
	// new id from transformers, which this loader does not reproduce.
	var delims []string
	seen := map[string]bool{}
	for _, name := range cfg.hfAdded() {
		if seen[name] {
			continue
		}
		seen[name] = true
		if _, ok := specials[name]; !ok {
			return nil, fmt.Errorf("kimi: %s/tokenizer_config.json: token %q is not one of the %d reserved special tokens", dir, name, ReservedSpecialTokens)
		}
		delims = append(delims, name)
	}
	return tok.WithChunking(tokenizer.Chunking{Delimiters: delims, WindowRunes: MaxEncodeChars, MaxRun: MaxRunChars})
}

type config struct {
	added      map[int]string // added_tokens_decoder: id -> content
	additional []string       // additional_special_tokens
	named      []string       // bos, eos, unk, pad
}

func (c *config) hfAdded() []string {
	out := make([]string, 0, len(c.added)+len(c.additional)+len(c.named))
	for _, s := range c.added {
		out = append(out, s)
	}
	out = append(out, c.additional...)
	return append(out, c.named...)
}

func readConfig(dir string) (*config, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &config{added: map[int]string{}, additional: defaultAdditional}, nil
	} else if err != nil {
		return nil, fmt.Errorf("kimi: %w", err)
	}
	var raw struct {
		Added      map[string]json.RawMessage `json:"added_tokens_decoder"`
		Additional []json.RawMessage          `json:"additional_special_tokens"`
		BOS        json.RawMessage            `json:"bos_token"`
		EOS        json.RawMessage            `json:"eos_token"`
		UNK        json.RawMessage            `json:"unk_token"`
		PAD        json.RawMessage            `json:"pad_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("kimi: %s: %w", path, err)
	}
	c := &config{added: map[int]string{}}
	for k, v := range raw.Added {
		id, err := strconv.Atoi(k)
		s, ok := tokenText(v)
		if err != nil || !ok {
			return nil, fmt.Errorf("kimi: %s: added_tokens_decoder entry %q", path, k)
		}
		c.added[id] = s
	}
	if raw.Additional == nil {
		c.additional = defaultAdditional
	}
	for _, v := range raw.Additional {
		s, ok := tokenText(v)
		if !ok {
			return nil, fmt.Errorf("kimi: %s: additional_special_tokens entry %s", path, v)
		}
		c.additional = append(c.additional, s)
	}
	// __init__ defaults: bos [BOS], eos [EOS]; unk and pad None (then special_tokens[str(None)]
	// raises, so a loadable directory names them).
	for _, t := range []struct {
		raw json.RawMessage
		def string
	}{{raw.BOS, "[BOS]"}, {raw.EOS, "[EOS]"}, {raw.UNK, ""}, {raw.PAD, ""}} {
		s, ok := tokenText(t.raw)
		if !ok {
			s = t.def
		}
		if s == "" {
			return nil, fmt.Errorf("kimi: %s: unk_token and pad_token must be set (TikTokenTokenizer looks them up)", path)
		}
		c.named = append(c.named, s)
	}
	return c, nil
}

// defaultAdditional is __init__'s additional_special_tokens default.
var defaultAdditional = []string{"<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
	"<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"}

// tokenText reads a token given as a string or an AddedToken object.
func tokenText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

// countRanks returns the number of entries of a tiktoken rank file (len(mergeable_ranks)).
func countRanks(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("kimi: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n, nil
}

// PrepareChat applies the variant's apply_chat_template override to a render request: tools are
// deep-sorted (deep_sort_dict); the K2.5 variant also passes tools_ts_str (the TypeScript block, left
// out when the conversion fails, as the Python's except clause does) and the thinking=True and
// preserve_thinking=False defaults of its signature.
func (v *Variant) PrepareChat(in chattemplate.Input) (chattemplate.Input, error) {
	out := in
	out.Kwargs = maps.Clone(in.Kwargs)
	if out.Kwargs == nil {
		out.Kwargs = map[string]any{}
	}
	tools := strings.TrimSpace(string(in.Tools))
	if tools != "" && tools != "null" {
		sorted, err := DeepSort(in.Tools)
		if err != nil {
			return in, fmt.Errorf("tools: %w", err)
		}
		out.Tools = sorted
	}
	if !v.TypeScriptTools {
		return out, nil
	}
	if truthy(out.Tools) {
		if ts, err := ToolsTypeScript(out.Tools); err == nil {
			out.Kwargs["tools_ts_str"] = ts
		}
	}
	for k, def := range map[string]bool{"thinking": true, "preserve_thinking": false} {
		if _, set := out.Kwargs[k]; !set {
			out.Kwargs[k] = def
		}
	}
	return out, nil
}
