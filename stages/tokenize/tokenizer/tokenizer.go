package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and back exactly as Hugging Face `tokenizers` does for the
// loaded tokenizer.json. It is immutable after loading and safe for concurrent use.
type Tokenizer struct {
	added     []AddedToken
	addedIDs  map[string]uint32 // added token content -> id
	special   map[uint32]bool
	rawTrie   *tokenTrie // non-normalized added tokens, matched on the input
	normTrie  *tokenTrie // normalized added tokens, matched on normalized text
	normalize normalizer
	pre       preTokenizer
	model     *bpeModel
	dec       decoder
	idToToken []string // id -> token text as written in the vocabulary / added tokens
	hasID     []bool
	vocabSize int
	pool      sync.Pool
	chunk     *chunker // text cutting of a Python tokenizer class (WithChunking), or nil
}

// DefaultCacheWords is the capacity of the per-tokenizer word cache.
const DefaultCacheWords = 1 << 16

// Load reads and parses a tokenizer.json file.
func Load(path string) (*Tokenizer, error) { return builder{}.load(path) }

func (b builder) load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := b.parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (loading %s)", err, path)
	}
	return t, nil
}

type jsonTokenizer struct {
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

type jsonModel struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"-"` // decoded by parseModelJSON
	MergePairs              [][2]string       `json:"-"`
}

// Parse builds a Tokenizer from the contents of a tokenizer.json file. Any component it does not
// implement is an error naming that component. Added token ids are assigned as HF assigns them when
// it loads the file (a token already in the vocabulary keeps its id, others are numbered after the
// vocabulary in file order); a mismatch with the ids written in the file is logged.
func Parse(data []byte) (*Tokenizer, error) { return builder{}.parse(data) }

func (b builder) parse(data []byte) (*Tokenizer, error) {
	ensureUnicode()
	j, jm, err := parseTokenizerJSON(data)
	if err != nil {
		return nil, err
	}
	if !isNull(j.Truncation) {
		return nil, errUnsupported("setting", "truncation")
	}
	if !isNull(j.Padding) {
		return nil, errUnsupported("setting", "padding")
	}
	if jm.Type != "BPE" && !(jm.Type == "" && jm.Vocab != nil && jm.MergePairs != nil) {
		return nil, errUnsupported("model", jm.Type)
	}
	norm, err := b.normalizer(j.Normalizer)
	if err != nil {
		return nil, err
	}
	pre, byteLevel, err := b.preTokenizer(j.PreTokenizer, true)
	if err != nil {
		return nil, err
	}
	dec, err := buildDecoder(j.Decoder)
	if err != nil {
		return nil, err
	}
	if jm.Vocab == nil {
		return nil, fmt.Errorf("tokenizer: model has no vocab")
	}
	bpe := &bpeConfig{
		vocab:        jm.Vocab,
		merges:       jm.MergePairs,
		byteLevel:    byteLevel,
		fuseUnk:      jm.FuseUnk,
		byteFallback: jm.ByteFallback,
		ignoreMerges: jm.IgnoreMerges,
	}
	if jm.Dropout != nil && *jm.Dropout != 0 {
		return nil, errUnsupported("BPE option", "dropout")
	}
	if jm.UnkToken != nil {
		bpe.unk = *jm.UnkToken
	}
	if jm.ContinuingSubwordPrefix != nil {
		bpe.prefix = *jm.ContinuingSubwordPrefix
	}
	if jm.EndOfWordSuffix != nil {
		bpe.suffix = *jm.EndOfWordSuffix
	}
	model, err := bpe.build()
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{normalize: norm, pre: pre, model: model, dec: dec}
	t.setVocab(jm.Vocab)
	if err := t.addTokens(j.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// cutMerge splits a legacy "a b" merge.
func cutMerge(m string) (string, string, bool) {
	a, b, ok := strings.Cut(m, " ")
	if !ok || strings.Contains(b, " ") {
		return "", "", false
	}
	return a, b, true
}

// bpeConfig holds a BPE model in tokenizer.json terms (tokens as written in the vocabulary).
type bpeConfig struct {
	vocab                               map[string]uint32
	merges                              [][2]string
	byteLevel                           bool
	unk, prefix, suffix                 string
	fuseUnk, byteFallback, ignoreMerges bool
	rankMerges                          bool // tiktoken: pair rank = rank of the merged token
}

func (c *bpeConfig) build() (*bpeModel, error) {
	m := &bpeModel{
		byteLevel:    c.byteLevel,
		unkID:        -1,
		fuseUnk:      c.fuseUnk,
		byteFallback: c.byteFallback,
		ignoreMerges: c.ignoreMerges,
		cache:        newWordCache(DefaultCacheWords),
		vocabLen:     len(c.vocab),
	}
	toModel := func(tok string) (string, bool) {
		if !c.byteLevel {
			return tok, true
		}
		return byteLevelDecode(tok)
	}
	m.vocab = c.vocab
	if c.byteLevel {
		m.vocab = make(map[string]uint32, len(c.vocab))
	}
	for tok, id := range c.vocab {
		if !c.byteLevel {
			break
		}
		if k, ok := toModel(tok); ok {
			m.vocab[k] = id
		} else {
			if m.extraVocab == nil {
				m.extraVocab = map[string]uint32{}
			}
			m.extraVocab[tok] = id
		}
	}
	for b := 0; b < 256; b++ {
		m.byteID[b], m.fallbackID[b] = -1, -1
		if id, ok := m.vocab[string([]byte{byte(b)})]; ok && c.byteLevel {
			m.byteID[b] = int32(id)
		}
		if id, ok := c.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallbackID[b] = int32(id)
		}
	}
	if !c.byteLevel {
		m.runeID = make([]int32, 0x10000)
		for i := range m.runeID {
			m.runeID[i] = -1
		}
		for tok, id := range m.vocab {
			if r, n := utf8.DecodeRuneInString(tok); n == len(tok) && r < 0x10000 && r != utf8.RuneError {
				m.runeID[r] = int32(id)
			}
		}
	}
	if c.unk != "" {
		id, ok := c.vocab[c.unk]
		if !ok {
			return nil, fmt.Errorf("tokenizer: unk_token %q is not in the vocabulary", c.unk)
		}
		m.unkID = int32(id)
	}
	var ok bool
	if m.prefix, ok = toModel(c.prefix); !ok {
		return nil, fmt.Errorf("tokenizer: continuing_subword_prefix %q outside the byte-level alphabet", c.prefix)
	}
	if m.suffix, ok = toModel(c.suffix); !ok {
		return nil, fmt.Errorf("tokenizer: end_of_word_suffix %q outside the byte-level alphabet", c.suffix)
	}
	m.merges = newPairMap(len(c.merges))
	prefixLen := len(c.prefix)
	var buf []byte
	for rank, mg := range c.merges {
		a, okA := c.vocab[mg[0]]
		b, okB := c.vocab[mg[1]]
		if !okA || !okB {
			return nil, fmt.Errorf("tokenizer: merge %d (%q %q) uses a token missing from the vocabulary", rank, mg[0], mg[1])
		}
		right := mg[1]
		if prefixLen > 0 && strings.HasPrefix(right, c.prefix) {
			right = right[prefixLen:]
		}
		buf = append(append(buf[:0], mg[0]...), right...)
		id, okN := c.vocab[string(buf)]
		if !okN {
			return nil, fmt.Errorf("tokenizer: merge %d (%q %q) produces a token missing from the vocabulary", rank, mg[0], mg[1])
		}
		r := uint64(rank)
		if c.rankMerges {
			r = uint64(id)
		}
		m.merges.put(uint64(a)<<32|uint64(b), r<<32|uint64(id))
	}
	return m, nil
}

func (t *Tokenizer) setVocab(vocab map[string]uint32) {
	maxID := -1
	for _, id := range vocab {
		maxID = max(maxID, int(id))
	}
	t.idToToken = make([]string, maxID+1)
	t.hasID = make([]bool, maxID+1)
	for tok, id := range vocab {
		t.idToToken[id] = tok
		t.hasID[id] = true
	}
	t.vocabSize = maxID + 1
}

// addTokens registers the added tokens the way HF AddedVocabulary::add_tokens does: a token whose
// content already has an id keeps it, others get ids after the model vocabulary.
func (t *Tokenizer) addTokens(toks []AddedToken) error {
	t.addedIDs = map[string]uint32{}
	t.special = map[uint32]bool{}
	nextID := uint32(t.model.vocabLen)
	mismatched, firstMismatch := 0, ""
	defer func() {
		if mismatched > 0 {
			slog.Warn("tokenizer: added token ids differ from tokenizer.json; using the ids the reference assigns",
				"tokens", mismatched, "first", firstMismatch)
		}
	}()
	byID := map[uint32]int{}
	for _, tok := range toks {
		if tok.Content == "" {
			continue
		}
		id, ok := t.addedIDs[tok.Content]
		if !ok {
			id, ok = t.modelTokenID(tok.Content)
		}
		if !ok {
			id = nextID
			nextID++
		}
		if id != tok.ID {
			if mismatched == 0 {
				firstMismatch = fmt.Sprintf("%q json id %d, assigned %d", tok.Content, tok.ID, id)
			}
			mismatched++
		}
		tok.ID = id
		t.addedIDs[tok.Content] = id
		if tok.Special {
			t.special[id] = true
		}
		if k, dup := byID[id]; dup {
			t.added[k] = tok
		} else {
			byID[id] = len(t.added)
			t.added = append(t.added, tok)
		}
	}
	for _, tok := range t.added {
		if int(tok.ID) >= len(t.idToToken) {
			grow := int(tok.ID) + 1 - len(t.idToToken)
			t.idToToken = append(t.idToToken, make([]string, grow)...)
			t.hasID = append(t.hasID, make([]bool, grow)...)
		}
		t.idToToken[tok.ID] = tok.Content
		t.hasID[tok.ID] = true
	}
	t.vocabSize = len(t.idToToken)
	for i, tok := range t.added {
		if tok.Normalized {
			pattern := tok.Content
			if t.normalize != nil {
				pattern = t.normalize.normalize(pattern)
				// Decoding uses the normalized form (HF simple_id_to_token).
				t.idToToken[tok.ID] = pattern
			}
			if t.normTrie == nil {
				t.normTrie = newTokenTrie()
			}
			t.normTrie.add(pattern, int32(i))
		} else {
			if t.rawTrie == nil {
				t.rawTrie = newTokenTrie()
			}
			t.rawTrie.add(tok.Content, int32(i))
		}
	}
	return nil
}

// addSpecials registers added tokens with fixed ids (tiktoken specials).
func (t *Tokenizer) addSpecials(toks []AddedToken) error {
	t.addedIDs = map[string]uint32{}
	t.special = map[uint32]bool{}
	for _, tok := range toks {
		if tok.Content == "" {
			return fmt.Errorf("tokenizer: empty special token")
		}
		t.addedIDs[tok.Content] = tok.ID
		if tok.Special {
			t.special[tok.ID] = true
		}
		t.added = append(t.added, tok)
		if int(tok.ID) >= len(t.idToToken) {
			grow := int(tok.ID) + 1 - len(t.idToToken)
			t.idToToken = append(t.idToToken, make([]string, grow)...)
			t.hasID = append(t.hasID, make([]bool, grow)...)
		}
		t.idToToken[tok.ID] = tok.Content
		t.hasID[tok.ID] = true
	}
	t.vocabSize = len(t.idToToken)
	for i, tok := range t.added {
		if t.rawTrie == nil {
			t.rawTrie = newTokenTrie()
		}
		t.rawTrie.add(tok.Content, int32(i))
	}
	return nil
}

// modelTokenID looks a token (as written in tokenizer.json) up in the model vocabulary.
func (t *Tokenizer) modelTokenID(tok string) (uint32, bool) {
	k := tok
	if t.model.byteLevel {
		var ok bool
		if k, ok = byteLevelDecode(tok); !ok {
			id, ok := t.model.extraVocab[tok]
			return id, ok
		}
	}
	id, ok := t.model.vocab[k]
	if ok && t.model.byteLevel && t.idToToken[id] != tok {
		return 0, false
	}
	return id, ok
}

// TokenID returns the id of a token as written in tokenizer.json (added tokens first, then the
// model vocabulary, as HF token_to_id).
func (t *Tokenizer) TokenID(token string) (uint32, bool) {
	if id, ok := t.addedIDs[token]; ok {
		return id, true
	}
	return t.modelTokenID(token)
}

// VocabSize is the number of ids: the largest id (model vocabulary or added token) plus one.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// Token returns the text of a token id as written in the vocabulary, and whether the id exists.
func (t *Tokenizer) Token(id uint32) (string, bool) {
	if int(id) >= len(t.idToToken) || !t.hasID[id] {
		return "", false
	}
	return t.idToToken[id], true
}

// IsSpecial reports whether id is an added token flagged special.
func (t *Tokenizer) IsSpecial(id uint32) bool { return t.special[id] }

func (t *Tokenizer) getScratch() *scratch {
	if st, ok := t.pool.Get().(*scratch); ok {
		return st
	}
	return &scratch{}
}

// Encode returns the ids of text, equal to HF tokenizer.encode(text, add_special_tokens=False).ids:
// added and special tokens written in the text are matched as tokens. Invalid UTF-8 is replaced by
// U+FFFD first (the reference only accepts valid Unicode).
func (t *Tokenizer) Encode(text string) []uint32 {
	return t.AppendEncode(make([]uint32, 0, len(text)/3+1), text)
}

// AppendEncode appends the ids of text to dst (see Encode).
func (t *Tokenizer) AppendEncode(dst []uint32, text string) []uint32 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	if t.chunk != nil {
		return t.appendChunked(dst, text)
	}
	return t.appendPlain(dst, text)
}

// appendPlain encodes valid UTF-8 text without Chunking.
func (t *Tokenizer) appendPlain(dst []uint32, text string) []uint32 {
	st := t.getScratch()
	defer t.pool.Put(st)
	var raw []addedMatch
	if t.rawTrie != nil {
		raw = findAdded(t.rawTrie, t.added, text, nil)
	}
	prev := 0
	for _, m := range raw {
		if m.start > prev {
			dst = t.encodeSegment(st, dst, text[prev:m.start], prev == 0)
		}
		dst = append(dst, t.added[m.tok].ID)
		prev = m.end
	}
	if prev < len(text) || len(text) == 0 {
		dst = t.encodeSegment(st, dst, text[prev:], prev == 0)
	}
	return dst
}

// encodeSegment normalizes a span free of non-normalized added tokens, extracts normalized added
// tokens, pre-tokenizes and runs the model.
func (t *Tokenizer) encodeSegment(st *scratch, dst []uint32, s string, first bool) []uint32 {
	if t.normalize != nil {
		s = t.normalize.normalize(s)
	}
	if t.normTrie == nil {
		return t.encodeNormalized(st, dst, s, first)
	}
	prev := 0
	for _, m := range findAdded(t.normTrie, t.added, s, nil) {
		if m.start > prev {
			dst = t.encodeNormalized(st, dst, s[prev:m.start], first && prev == 0)
		}
		dst = append(dst, t.added[m.tok].ID)
		prev = m.end
	}
	if prev < len(s) {
		dst = t.encodeNormalized(st, dst, s[prev:], first && prev == 0)
	}
	return dst
}

func (t *Tokenizer) encodeNormalized(st *scratch, dst []uint32, s string, first bool) []uint32 {
	if s == "" {
		return dst
	}
	if t.pre == nil {
		return t.model.encodeWord(st, s, dst)
	}
	pieces := t.pre.apply(st, st.out[:0], piece{s, first})
	st.out = pieces
	for _, p := range pieces {
		dst = t.model.encodeWord(st, p.s, dst)
	}
	return dst
}

// Decode turns ids back into text like HF decode(ids, skip_special_tokens=False): special tokens
// are kept. Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []uint32) string {
	return t.decode(ids, false)
}

// DecodeSkipSpecial is Decode with skip_special_tokens=True.
func (t *Tokenizer) DecodeSkipSpecial(ids []uint32) string {
	return t.decode(ids, true)
}

func (t *Tokenizer) decode(ids []uint32, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.Token(id)
		if !ok || (skipSpecial && t.special[id]) {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.dec == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.dec.decodeChain(tokens), "")
}

// EncodeBatch encodes texts concurrently on up to workers goroutines (GOMAXPROCS when workers <= 0);
// result i is Encode(texts[i]).
func (t *Tokenizer) EncodeBatch(texts []string, workers int) [][]uint32 {
	out := make([][]uint32, len(texts))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(texts))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(texts) {
					return
				}
				out[i] = t.Encode(texts[i])
			}
		}()
	}
	wg.Wait()
	return out
}
