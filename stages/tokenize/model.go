package tokenize

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/draftflow/draftflow/stages/tokenize/chattemplate"
	"github.com/draftflow/draftflow/stages/tokenize/kimi"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer"
	"github.com/draftflow/draftflow/topics"
)

// Model is a model directory's tokenizer and chat template: what turns a conversation into the exact ids the
// target model expects.
type Model struct {
	// Name identifies the model in records and shard metadata (the directory name unless overridden).
	Name string
	// Dir is the model directory.
	Dir string
	// ContextLength is the model's context window in tokens as the directory gives it: config.json's
	// max_position_embeddings or max_seq_len, else a real tokenizer_config.json model_max_length; 0 if
	// the directory does not say (then ContextWindow needs it from --context-length).
	ContextLength int
	// Hash fingerprints the tokenizer files and chat template (sha256 of their bytes, 16 hex digits).
	Hash string
	// EOSTokenIDs are the ids that end a completion: tokenizer_config.json's eos_token and
	// generation_config.json's eos_token_id (one id or a list).
	EOSTokenIDs []uint32
	// SpecialTokenStart is the first id of the trailing block of added tokens (special or not, like Qwen's
	// <think>), 0 if the vocabulary does not end with one: ordinary text never encodes to ids at or above it.
	SpecialTokenStart int
	// Tokenizer encodes rendered text.
	Tokenizer *tokenizer.Tokenizer
	// Template renders conversations.
	Template *chattemplate.Template
	// CustomCode names the custom tokenizer code the directory ships and draftflow reproduces
	// (kimi.Variant.Name), empty for a plain tokenizer.json directory.
	CustomCode string
	// prepare is the custom code's apply_chat_template override, applied before rendering, or nil.
	prepare func(chattemplate.Input) (chattemplate.Input, error)
}

// LoadModel loads tokenizer.json, tokenizer_config.json (chat_template, bos/eos, model_max_length),
// chat_template.jinja if present, and config.json (max_position_embeddings) from dir; a config.json
// that is not a JSON object with numeric context fields is an error. A directory
// whose tokenizer is custom Python code (tokenizer_config.json auto_map, or tokenization_kimi.py
// without a tokenizer.json) loads only when draftflow reproduces that code (package kimi, which
// recognises it by content); any other custom code is an error naming the file.
func LoadModel(dir string) (*Model, error) {
	variant, err := customCode(dir)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	var tok *tokenizer.Tokenizer
	if variant != nil {
		tok, err = kimi.LoadTokenizer(dir)
	} else {
		tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	}
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	tmpl, err := chattemplate.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	h := sha256.New()
	files := []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", kimi.VocabFile, kimi.TokenizerFile, kimi.ToolsFile}
	extra, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	for _, e := range extra {
		files = append(files, filepath.Join("additional_chat_templates", filepath.Base(e)))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s:%d:", f, len(b))
		h.Write(b)
	}
	ctxLen, err := contextLength(dir)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	abs, _ := filepath.Abs(dir)
	var special int
	if variant != nil {
		special = specialBlockStart(tok)
	} else if special, err = addedTokenStart(filepath.Join(dir, "tokenizer.json"), tok.VocabSize()); err != nil {
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	m := &Model{
		Name:              filepath.Base(abs),
		Dir:               dir,
		ContextLength:     ctxLen,
		Hash:              hex.EncodeToString(h.Sum(nil))[:16],
		EOSTokenIDs:       eosTokenIDs(dir, tok),
		SpecialTokenStart: special,
		Tokenizer:         tok,
		Template:          tmpl,
	}
	if variant != nil {
		m.CustomCode, m.prepare = variant.Name, variant.PrepareChat
	}
	return m, nil
}

// customCode returns the known custom tokenizer code dir ships, nil when its tokenizer is a plain
// tokenizer.json, or an error for custom code draftflow does not reproduce.
func customCode(dir string) (*kimi.Variant, error) {
	var cfg struct {
		AutoMap struct {
			AutoTokenizer json.RawMessage `json:"AutoTokenizer"`
		} `json:"auto_map"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	var refs []*string
	var one string
	if json.Unmarshal(cfg.AutoMap.AutoTokenizer, &refs) != nil && json.Unmarshal(cfg.AutoMap.AutoTokenizer, &one) == nil {
		refs = []*string{&one}
	}
	for _, r := range refs {
		if r == nil || *r == "" {
			continue
		}
		// "module.Class", or "repo--module.Class" for code taken from another repository.
		ref := *r
		if _, after, ok := strings.Cut(ref, "--"); ok {
			ref = after
		}
		module := ref
		if i := strings.LastIndexByte(ref, '.'); i >= 0 {
			module = ref[:i]
		}
		file := module + ".py"
		if file != kimi.TokenizerFile {
			return nil, fmt.Errorf("custom tokenizer code %s (auto_map %q) is not supported: draftflow reproduces only %s (%s)",
				filepath.Join(dir, file), *r, kimi.TokenizerFile, variantNames())
		}
		return kimi.Recognize(dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, kimi.TokenizerFile)); err == nil {
			return kimi.Recognize(dir)
		}
	}
	return nil, nil
}

func variantNames() string {
	vs := kimi.Variants()
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.Name
	}
	return strings.Join(names, "; ")
}

// specialBlockStart returns the first id of the block of special tokens that ends the vocabulary.
func specialBlockStart(tok *tokenizer.Tokenizer) int {
	start := tok.VocabSize()
	for start > 0 && tok.IsSpecial(uint32(start-1)) {
		start--
	}
	if start == tok.VocabSize() {
		return 0
	}
	return start
}

// addedTokenStart returns the first id of the contiguous block of added tokens that ends the vocabulary, or 0.
func addedTokenStart(path string, vocabSize int) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var tj struct {
		AddedTokens []struct {
			ID int `json:"id"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	added := make(map[int]bool, len(tj.AddedTokens))
	for _, t := range tj.AddedTokens {
		added[t.ID] = true
	}
	start := vocabSize
	for start > 0 && added[start-1] {
		start--
	}
	if start == vocabSize {
		return 0, nil
	}
	return start, nil
}

// eosTokenIDs collects the end-of-sequence ids a model directory declares.
func eosTokenIDs(dir string, tok *tokenizer.Tokenizer) []uint32 {
	seen := map[uint32]bool{}
	var ids []uint32
	add := func(id uint32) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	var gen struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil && json.Unmarshal(b, &gen) == nil {
		var one uint32
		var many []uint32
		if json.Unmarshal(gen.EOS, &one) == nil {
			add(one)
		} else if json.Unmarshal(gen.EOS, &many) == nil {
			for _, id := range many {
				add(id)
			}
		}
	}
	var tc struct {
		EOS json.RawMessage `json:"eos_token"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil && json.Unmarshal(b, &tc) == nil {
		var text string
		var obj struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(tc.EOS, &text) != nil && json.Unmarshal(tc.EOS, &obj) == nil {
			text = obj.Content
		}
		if id, ok := tok.TokenID(text); ok && text != "" {
			add(id)
		}
	}
	return ids
}

// maxRealContext bounds a believable model_max_length: transformers writes a placeholder (1e30, or
// int(1e30)) when the model's window is unknown.
const maxRealContext = 1 << 30

// contextLength reads the context window from config.json (max_position_embeddings, else max_seq_len,
// at the top level or, for multimodal models, in text_config), falling back to tokenizer_config.json's model_max_length when that is a real number. It returns 0
// when the directory does not say, and an error for a config.json or tokenizer_config.json that does
// not parse.
func contextLength(dir string) (int, error) {
	type lengths struct {
		MaxPositionEmbeddings int `json:"max_position_embeddings"`
		MaxSeqLen             int `json:"max_seq_len"`
	}
	var cfg struct {
		lengths
		TextConfig lengths `json:"text_config"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &cfg); err != nil {
			return 0, fmt.Errorf("config.json: %w", err)
		}
		for _, l := range []lengths{cfg.lengths, cfg.TextConfig} {
			if l.MaxPositionEmbeddings > 0 {
				return l.MaxPositionEmbeddings, nil
			}
			if l.MaxSeqLen > 0 {
				return l.MaxSeqLen, nil
			}
		}
	case !errors.Is(err, os.ErrNotExist):
		return 0, err
	}
	var tc struct {
		ModelMaxLength float64 `json:"model_max_length"`
	}
	b, err = os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &tc); err != nil {
			return 0, fmt.Errorf("tokenizer_config.json: %w", err)
		}
		if tc.ModelMaxLength >= 1 && tc.ModelMaxLength < maxRealContext {
			return int(tc.ModelMaxLength), nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return 0, err
	}
	return 0, nil
}

// ContextWindow returns the context window the too-long check uses: override when positive (the
// --context-length flag), else the model directory's ContextLength. A model whose directory does not
// give a usable one is an error that says to pass --context-length: the check is never switched off.
func (m *Model) ContextWindow(override int) (int, error) {
	switch {
	case override < 0:
		return 0, fmt.Errorf("--context-length %d: must be positive", override)
	case override > 0:
		return override, nil
	case m.ContextLength > 0:
		return m.ContextLength, nil
	}
	return 0, fmt.Errorf("model %s: no usable context length (config.json has no max_position_embeddings or max_seq_len, "+
		"and tokenizer_config.json's model_max_length is missing or a placeholder such as 1e30): give the model's "+
		"context window with --context-length", m.Dir)
}

// Fits reports whether a prompt of n ids leaves room for maxNew generated tokens in a context window
// of ctxLen tokens. SGLang refuses input + max_new_tokens >= context length, so the boundary case
// does not fit.
func Fits(n, maxNew, ctxLen int) bool { return n+maxNew < ctxLen }

// Encode renders a prompt with the chat template (add_generation_prompt=True, the prompt's tools and
// template kwargs) and tokenizes the result without adding special tokens: the ids Hugging Face
// apply_chat_template(..., tokenize=True) returns.
func (m *Model) Encode(p *topics.Prompt) ([]uint32, error) {
	_, ids, err := m.encode(p)
	return ids, err
}

// encode is Encode, also returning the rendered text.
func (m *Model) encode(p *topics.Prompt) (string, []uint32, error) {
	text, err := m.Render(chattemplate.Input{
		Messages:            templateMessages(p.Messages),
		Tools:               p.Tools,
		AddGenerationPrompt: true,
		Kwargs:              p.Sampling.TemplateKwargs,
	})
	if err != nil {
		return "", nil, err
	}
	return text, m.Tokenizer.Encode(text), nil
}

// IgnoresTools reports whether the chat template leaves a prompt's tools out: rendered without them, the
// prompt is text, its rendering with them. A prompt without tools never shows it.
func (m *Model) IgnoresTools(p *topics.Prompt, text string) bool {
	if t := strings.TrimSpace(string(p.Tools)); t == "" || t == "null" || t == "[]" {
		return false
	}
	without, err := m.Render(chattemplate.Input{Messages: templateMessages(p.Messages), AddGenerationPrompt: true, Kwargs: p.Sampling.TemplateKwargs})
	return err == nil && without == text
}

// templateMessages converts a prompt's messages to the chat template's. The two types have the same
// fields by design (a conversion, so a field added to one and not the other fails to compile); what a
// message field means to a template is chattemplate's to say, how it travels is topics'.
func templateMessages(ms []topics.Message) []chattemplate.Message {
	out := make([]chattemplate.Message, len(ms))
	for i, m := range ms {
		out[i] = chattemplate.Message(m)
	}
	return out
}

// Render renders a request with the chat template as the model's apply_chat_template(...,
// tokenize=False) does, including a custom override (CustomCode).
func (m *Model) Render(in chattemplate.Input) (string, error) {
	if m.prepare != nil {
		var err error
		if in, err = m.prepare(in); err != nil {
			return "", fmt.Errorf("chat template: %w", err)
		}
	}
	text, err := m.Template.Render(in)
	var re *chattemplate.RaiseError
	var rn *chattemplate.RenderError
	switch {
	case err == nil:
		return text, nil
	case errors.As(err, &re) || errors.As(err, &rn):
		return "", err // says "chat template" itself
	}
	return "", fmt.Errorf("chat template: %w", err)
}
