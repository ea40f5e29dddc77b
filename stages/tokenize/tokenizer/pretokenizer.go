package tokenizer

import "strings"

// piece is a span of normalized text on its way to the model.
type piece struct {
	s string
	// first is set when the piece starts at offset 0 of the original input (Metaspace "first").
	first bool
}

// preTokenizer splits a piece into smaller pieces, appending the non-empty ones to dst (HF
// `pre_tokenizers`).
type preTokenizer interface {
	apply(st *scratch, dst []piece, p piece) []piece
}

// scratch holds per-call buffers, pooled by the Tokenizer.
type scratch struct {
	out     []piece
	bufs    [][2][]piece // per Sequence nesting depth
	depth   int
	matches [][2]int
	spans   []span
	syms    []uint32
	ranks   []uint32
	prev    []int32
	next    []int32
	heap    candHeap
}

type span struct {
	start, end int
	match      bool
}

type seqPreTokenizer []preTokenizer

func (q seqPreTokenizer) apply(st *scratch, dst []piece, p piece) []piece {
	d := st.depth
	if d == len(st.bufs) {
		st.bufs = append(st.bufs, [2][]piece{})
	}
	st.depth++
	cur := append(st.bufs[d][0][:0], p)
	next := st.bufs[d][1][:0]
	for _, pt := range q {
		next = next[:0]
		for _, x := range cur {
			next = pt.apply(st, next, x)
		}
		cur, next = next, cur
	}
	st.bufs[d] = [2][]piece{cur, next}
	st.depth--
	return append(dst, cur...)
}

// Split behaviors (HF SplitDelimiterBehavior).
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

type splitPreTokenizer struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (sp *splitPreTokenizer) apply(st *scratch, dst []piece, p piece) []piece {
	s := p.s
	st.matches = sp.m.findAll(s, st.matches[:0])
	if sp.behavior == behaviorIsolated {
		// Matches and gaps alike become pieces; inversion does not change the cut points.
		prev := 0
		for _, m := range st.matches {
			if m[0] > prev {
				dst = append(dst, piece{s[prev:m[0]], p.first && prev == 0})
			}
			if m[1] > m[0] {
				dst = append(dst, piece{s[m[0]:m[1]], p.first && m[0] == 0})
			}
			prev = m[1]
		}
		if prev < len(s) {
			dst = append(dst, piece{s[prev:], p.first && prev == 0})
		}
		return dst
	}
	// General path: the list of (offsets, is_match) covering s, as HF's Pattern::find_matches.
	spans := st.spans[:0]
	if s == "" {
		spans = append(spans, span{0, 0, false})
	} else {
		prev := 0
		for _, m := range st.matches {
			if m[0] != prev {
				spans = append(spans, span{prev, m[0], false})
			}
			spans = append(spans, span{m[0], m[1], true})
			prev = m[1]
		}
		if prev != len(s) {
			spans = append(spans, span{prev, len(s), false})
		}
	}
	if sp.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	st.spans = spans
	emit := func(a, b int) {
		if b > a {
			dst = append(dst, piece{s[a:b], p.first && a == 0})
		}
	}
	switch sp.behavior {
	case behaviorRemoved:
		for _, x := range spans {
			if !x.match {
				emit(x.start, x.end)
			}
		}
	case behaviorContiguous:
		for i := 0; i < len(spans); {
			j := i
			for j+1 < len(spans) && spans[j+1].match == spans[i].match {
				j++
			}
			emit(spans[i].start, spans[j].end)
			i = j + 1
		}
	case behaviorMergedWithPrevious:
		var out [][2]int
		prevMatch := false
		for _, x := range spans {
			if x.match && !prevMatch && len(out) > 0 {
				out[len(out)-1][1] = x.end
			} else {
				out = append(out, [2]int{x.start, x.end})
			}
			prevMatch = x.match
		}
		for _, o := range out {
			emit(o[0], o[1])
		}
	case behaviorMergedWithNext:
		var out [][2]int
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			x := spans[i]
			if x.match && !prevMatch && len(out) > 0 {
				out[len(out)-1][0] = x.start
			} else {
				out = append(out, [2]int{x.start, x.end})
			}
			prevMatch = x.match
		}
		for i := len(out) - 1; i >= 0; i-- {
			emit(out[i][0], out[i][1])
		}
	}
	return dst
}

// byteLevelPreTokenizer is HF's ByteLevel pre-tokenizer. It must be the last step: it leaves the
// piece as raw bytes and the BPE model works on bytes directly (its vocabulary is decoded from the
// byte-level alphabet at load), which is equivalent to mapping every byte to its alphabet rune.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	regex          matcher // GPT-2 split when use_regex; nil otherwise
}

func (bl *byteLevelPreTokenizer) apply(st *scratch, dst []piece, p piece) []piece {
	if bl.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	if bl.regex == nil {
		if p.s != "" {
			dst = append(dst, p)
		}
		return dst
	}
	isolated := splitPreTokenizer{m: bl.regex, behavior: behaviorIsolated}
	return isolated.apply(st, dst, p)
}

// digitsPreTokenizer splits numeric runs (or every numeric rune) from the rest (HF Digits).
type digitsPreTokenizer struct{ individual bool }

func (d digitsPreTokenizer) apply(st *scratch, dst []piece, p piece) []piece {
	s := p.s
	prev := 0
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		if uclass(r)&clN == 0 {
			i += n
			continue
		}
		j := i + n
		if !d.individual {
			for j < len(s) {
				r2, n2 := decodeRune(s, j)
				if uclass(r2)&clN == 0 {
					break
				}
				j += n2
			}
		}
		if i > prev {
			dst = append(dst, piece{s[prev:i], p.first && prev == 0})
		}
		dst = append(dst, piece{s[i:j], p.first && i == 0})
		prev, i = j, j
	}
	if prev < len(s) {
		dst = append(dst, piece{s[prev:], p.first && prev == 0})
	}
	return dst
}

// metaspacePreTokenizer is HF's Metaspace: spaces become the replacement rune, a replacement is
// prepended per prepend_scheme, and pieces optionally split before each replacement.
type metaspacePreTokenizer struct {
	replacement string
	prepend     string // "always", "first" or "never"
	split       bool
}

func (ms *metaspacePreTokenizer) apply(st *scratch, dst []piece, p piece) []piece {
	s := strings.ReplaceAll(p.s, " ", ms.replacement)
	if !strings.HasPrefix(s, ms.replacement) && (ms.prepend == "always" || (ms.prepend == "first" && p.first)) {
		s = ms.replacement + s
	}
	if !ms.split {
		if s != "" {
			dst = append(dst, piece{s, p.first})
		}
		return dst
	}
	merged := splitPreTokenizer{m: literalMatcher{ms.replacement}, behavior: behaviorMergedWithNext}
	return merged.apply(st, dst, piece{s, p.first})
}

// whitespaceSplitPreTokenizer splits on whitespace, removing it (HF WhitespaceSplit).
type whitespaceSplitPreTokenizer struct{}

func (whitespaceSplitPreTokenizer) apply(st *scratch, dst []piece, p piece) []piece {
	s := p.s
	start := -1
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		if isWhiteSpace(r) {
			if start >= 0 {
				dst = append(dst, piece{s[start:i], p.first && start == 0})
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += n
	}
	if start >= 0 {
		dst = append(dst, piece{s[start:], p.first && start == 0})
	}
	return dst
}
