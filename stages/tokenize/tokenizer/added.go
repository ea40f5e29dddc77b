package tokenizer

import "unicode/utf8"

// AddedToken is one entry of a tokenizer.json "added_tokens" list.
type AddedToken struct {
	ID      uint32 `json:"id"`      // id (HF re-derives it; see Parse)
	Content string `json:"content"` // text matched in the input
	// SingleWord: match only when not adjacent to word characters.
	SingleWord bool `json:"single_word"`
	LStrip     bool `json:"lstrip"`     // absorb whitespace before the token
	RStrip     bool `json:"rstrip"`     // absorb whitespace after the token
	Normalized bool `json:"normalized"` // match on normalized text instead of the raw input
	Special    bool `json:"special"`    // dropped by DecodeSkipSpecial
}

// tokenTrie finds added tokens with Aho-Corasick LeftmostLongest semantics: the match starting
// earliest, and the longest one among those.
type tokenTrie struct {
	start [256]bool        // bytes that can begin a token
	next  map[uint64]int32 // node<<8|byte -> child node
	value []int32          // node -> index into tokens, or -1
}

func newTokenTrie() *tokenTrie {
	return &tokenTrie{next: map[uint64]int32{}, value: []int32{-1}}
}

func (t *tokenTrie) add(pattern string, idx int32) {
	if pattern == "" {
		return
	}
	t.start[pattern[0]] = true
	node := int32(0)
	for i := 0; i < len(pattern); i++ {
		k := uint64(node)<<8 | uint64(pattern[i])
		child, ok := t.next[k]
		if !ok {
			child = int32(len(t.value))
			t.value = append(t.value, -1)
			t.next[k] = child
		}
		node = child
	}
	t.value[node] = idx
}

// longestAt returns the longest token starting at s[i:], as (token index, end), or (-1, 0).
func (t *tokenTrie) longestAt(s string, i int) (int32, int) {
	node, best, end := int32(0), int32(-1), 0
	for j := i; j < len(s); j++ {
		child, ok := t.next[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = child
		if v := t.value[node]; v >= 0 {
			best, end = v, j+1
		}
	}
	return best, end
}

// addedMatch is one added-token occurrence: the token index and the byte span it consumes
// (including whitespace absorbed by lstrip/rstrip).
type addedMatch struct {
	tok        int32
	start, end int
}

// findAdded implements HF AddedVocabulary::find_matches for one trie.
func findAdded(t *tokenTrie, toks []AddedToken, s string, dst []addedMatch) []addedMatch {
	if t == nil || s == "" {
		return dst
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !t.start[s[i]] {
			i++
			continue
		}
		idx, stop := t.longestAt(s, i)
		if idx < 0 {
			i++
			continue
		}
		start := i
		i = stop // the automaton resumes after the raw match
		tok := &toks[idx]
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			ns := start
			for ns > 0 {
				r, n := utf8.DecodeLastRuneInString(s[:ns])
				if !isWhiteSpace(r) {
					break
				}
				ns -= n
			}
			start = max(ns, startOffset)
		}
		if tok.RStrip {
			for stop < len(s) {
				r, n := decodeRune(s, stop)
				if !isWhiteSpace(r) {
					break
				}
				stop += n
			}
		}
		dst = append(dst, addedMatch{idx, start, stop})
		startOffset = stop
	}
	return dst
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return uclass(r)&clWord != 0
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return uclass(r)&clWord != 0
}
