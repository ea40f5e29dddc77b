package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// Chunking is the text cutting a Python tokenizer class does around its tiktoken encoder, which
// changes ids wherever a cut falls inside what the pre-tokenizer would have kept as one piece. It
// reproduces Kimi-K2's TikTokenTokenizer as transformers drives it: transformers first splits the
// text on its added tokens (PythonBackend.tokenize), then the class cuts each remaining span into
// windows of WindowRunes characters and each window wherever a run of whitespace or of
// non-whitespace characters (Python str.isspace) grows past MaxRun, and tiktoken encodes every piece
// on its own (special tokens written in a piece still match).
type Chunking struct {
	// Delimiters are the added tokens transformers splits on before the class sees the text; each
	// must be a special token of the tokenizer and encodes as its id.
	Delimiters []string
	// WindowRunes is the window length in characters (Kimi: TIKTOKEN_MAX_ENCODE_CHARS, 400,000);
	// 0 means no windows.
	WindowRunes int
	// MaxRun is the longest run of whitespace or non-whitespace characters encoded as one piece
	// (Kimi: MAX_NO_WHITESPACES_CHARS, 25,000); 0 means no limit.
	MaxRun int
}

type chunker struct {
	Chunking
	trie *tokenTrie
	toks []AddedToken
}

// WithChunking returns a tokenizer that encodes as t does after cutting the text as c says. It
// shares t's vocabulary and caches.
func (t *Tokenizer) WithChunking(c Chunking) (*Tokenizer, error) {
	ch := &chunker{Chunking: c, trie: newTokenTrie()}
	for _, d := range c.Delimiters {
		id, ok := t.addedIDs[d]
		if !ok {
			return nil, fmt.Errorf("tokenizer: chunking delimiter %q is not a special token", d)
		}
		ch.trie.add(d, int32(len(ch.toks)))
		ch.toks = append(ch.toks, AddedToken{ID: id, Content: d, Special: true})
	}
	out := &Tokenizer{
		added: t.added, addedIDs: t.addedIDs, special: t.special, rawTrie: t.rawTrie, normTrie: t.normTrie,
		normalize: t.normalize, pre: t.pre, model: t.model, dec: t.dec, idToToken: t.idToToken,
		hasID: t.hasID, vocabSize: t.vocabSize, chunk: ch,
	}
	return out, nil
}

// appendChunked is AppendEncode for a tokenizer with Chunking.
func (t *Tokenizer) appendChunked(dst []uint32, text string) []uint32 {
	c := t.chunk
	prev := 0
	for _, m := range findAdded(c.trie, c.toks, text, nil) {
		if m.start > prev {
			dst = t.appendSpan(dst, text[prev:m.start])
		}
		dst = append(dst, c.toks[m.tok].ID)
		prev = m.end
	}
	if prev < len(text) {
		dst = t.appendSpan(dst, text[prev:])
	}
	return dst
}

// appendSpan cuts one delimiter-free span into windows and runs and encodes each piece.
func (t *Tokenizer) appendSpan(dst []uint32, s string) []uint32 {
	c := t.chunk
	for s != "" {
		w := s
		if c.WindowRunes > 0 {
			w = s[:runePrefix(s, c.WindowRunes)]
		}
		s = s[len(w):]
		if c.MaxRun <= 0 {
			dst = t.appendPlain(dst, w)
			continue
		}
		for _, p := range splitRuns(w, c.MaxRun) {
			dst = t.appendPlain(dst, p)
		}
	}
	return dst
}

// runePrefix returns the byte length of the first n characters of s.
func runePrefix(s string, n int) int {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// splitRuns is Kimi's _split_whitespaces_or_nonwhitespaces: s is cut before the character that would
// make the current run of whitespace (or of non-whitespace) characters longer than max.
func splitRuns(s string, max int) []string {
	var out []string
	runLen, start := 0, 0
	first, _ := utf8.DecodeRuneInString(s)
	inSpace := s != "" && pyIsSpace(first)
	for i, r := range s {
		space := pyIsSpace(r)
		if space != inSpace {
			runLen, inSpace = 1, space
			continue
		}
		runLen++
		if runLen > max {
			out = append(out, s[start:i])
			start, runLen = i, 1
		}
	}
	return append(out, s[start:])
}

// pyIsSpace is Python's str.isspace for one character: general category Zs or bidirectional class
// WS, B or S.
func pyIsSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}
