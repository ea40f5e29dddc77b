package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
)

// Pre-tokenizer patterns of tiktoken-format models, for LoadTiktoken.
const (
	// PatternCL100K is the cl100k_base pattern (GPT-4, Llama 3).
	PatternCL100K = patCL100K
	// PatternO200K is the o200k_base pattern (GPT-4o, gpt-oss).
	PatternO200K = patO200K
	// PatternKimiK2 is Kimi-K2's pattern. It uses Oniguruma/fancy-regex class intersection
	// ([X&&[^\p{Han}]]), which regexp2 lacks: the hand-written matcher implements it directly and the
	// general regex path rewrites it to .NET class subtraction ([X-[\p{Han}]]), which is equivalent.
	PatternKimiK2 = patKimi
	// PatternTekken is Mistral's Tekken pattern.
	PatternTekken = patTekken
)

// LoadTiktoken loads a tiktoken-format vocabulary: one "base64(token bytes) rank" per line, the rank
// being the token id and the merge priority. pattern is the pre-tokenizer regex and specials maps
// special token text to id. Encoding follows tiktoken: a piece that is a whole token maps to it,
// otherwise the adjacent pair whose concatenation has the lowest rank is merged first. Special
// tokens written in the text are matched as tokens (as Encode does for every model).
func LoadTiktoken(path string, pattern string, specials map[string]uint32) (*Tokenizer, error) {
	return builder{}.loadTiktoken(path, pattern, specials)
}

func (b builder) loadTiktoken(path string, pattern string, specials map[string]uint32) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := b.parseTiktoken(f, pattern, specials)
	if err != nil {
		return nil, fmt.Errorf("%w (loading %s)", err, path)
	}
	return t, nil
}

// ParseTiktoken is LoadTiktoken reading the rank file from r.
func ParseTiktoken(r io.Reader, pattern string, specials map[string]uint32) (*Tokenizer, error) {
	return builder{}.parseTiktoken(r, pattern, specials)
}

func (b builder) parseTiktoken(r io.Reader, pattern string, specials map[string]uint32) (*Tokenizer, error) {
	ensureUnicode()
	ranks := map[string]uint32{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("tokenizer: tiktoken line %d: want \"base64 rank\"", line)
		}
		tok, err := base64.StdEncoding.DecodeString(string(fields[0]))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: tiktoken line %d: %w", line, err)
		}
		rank, err := strconv.ParseUint(string(fields[1]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: tiktoken line %d: %w", line, err)
		}
		ranks[string(tok)] = uint32(rank)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer: read tiktoken file: %w", err)
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("tokenizer: empty tiktoken vocabulary")
	}
	m, err := b.regex(pattern)
	if err != nil {
		return nil, err
	}
	model := &bpeModel{
		vocab:        ranks,
		byteLevel:    true,
		unkID:        -1,
		ignoreMerges: true,
		cache:        newWordCache(DefaultCacheWords),
		vocabLen:     len(ranks),
	}
	for b := 0; b < 256; b++ {
		model.byteID[b], model.fallbackID[b] = -1, -1
		if id, ok := ranks[string([]byte{byte(b)})]; ok {
			model.byteID[b] = int32(id)
		}
	}
	// Pair "merges" in tiktoken terms: any split of a token into two tokens merges with the rank of
	// the whole token.
	model.merges = newPairMap(len(ranks))
	for tok, id := range ranks {
		for k := 1; k < len(tok); k++ {
			a, okA := ranks[tok[:k]]
			b, okB := ranks[tok[k:]]
			if okA && okB {
				model.merges.put(uint64(a)<<32|uint64(b), uint64(id)<<32|uint64(id))
			}
		}
	}
	vocab := make(map[string]uint32, len(ranks))
	for tok, id := range ranks {
		vocab[byteLevelEncode(tok)] = id
	}
	t := &Tokenizer{
		pre:   &splitPreTokenizer{m: m, behavior: behaviorIsolated},
		model: model,
		dec:   byteLevelDecoder{},
	}
	t.setVocab(vocab)
	names := make([]string, 0, len(specials))
	for s := range specials {
		names = append(names, s)
	}
	sort.Slice(names, func(i, j int) bool { return specials[names[i]] < specials[names[j]] })
	added := make([]AddedToken, 0, len(names))
	for _, s := range names {
		if _, clash := ranks[s]; clash {
			return nil, fmt.Errorf("tokenizer: special token %q is also an ordinary token", s)
		}
		added = append(added, AddedToken{ID: specials[s], Content: s, Special: true})
	}
	if err := t.addSpecials(added); err != nil {
		return nil, err
	}
	return t, nil
}
