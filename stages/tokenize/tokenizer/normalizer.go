package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a segment of input text before pre-tokenization (HF `normalizers`).
type normalizer interface {
	normalize(s string) string
}

type seqNormalizer []normalizer

func (q seqNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// unicodeNormalizer applies NFC/NFD/NFKC/NFKD. The reference's normalization tables predate
// Unicode 12.1, so code points it leaves alone but Go's (Unicode 15) tables decompose are kept
// verbatim: the text is normalized in segments between them (such code points are starters that
// were unassigned in the reference's Unicode version, so nothing composes or reorders across them).
type unicodeNormalizer struct {
	form   norm.Form
	decomp norm.Form // NFD or NFKD: the decomposition the form starts with
	ref    []uint32  // code point ranges the reference's decomposition changes
}

func newUnicodeNormalizer(form norm.Form) unicodeNormalizer {
	n := unicodeNormalizer{form: form, decomp: norm.NFD, ref: oniRanges["NFDChanged"]}
	if form == norm.NFKC || form == norm.NFKD {
		n.decomp, n.ref = norm.NFKD, oniRanges["NFKDChanged"]
	}
	return n
}

func (n unicodeNormalizer) protected(r rune) bool {
	var buf [utf8.UTFMax]byte
	k := utf8.EncodeRune(buf[:], r)
	p := n.decomp.Properties(buf[:k])
	if len(p.Decomposition()) == 0 && !(r >= 0xAC00 && r <= 0xD7A3) {
		return false
	}
	return !inRanges(n.ref, r)
}

func (n unicodeNormalizer) normalize(s string) string {
	if isASCII(s) {
		return s
	}
	var b strings.Builder
	prev := 0
	for i, r := range s {
		if r < utf8.RuneSelf || !n.protected(r) {
			continue
		}
		b.WriteString(n.form.String(s[prev:i]))
		b.WriteRune(r)
		prev = i + utf8.RuneLen(r)
	}
	if prev == 0 {
		return n.form.String(s)
	}
	b.WriteString(n.form.String(s[prev:]))
	return b.String()
}

type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

type replaceNormalizer struct {
	m       matcher
	content string
}

func (n replaceNormalizer) normalize(s string) string {
	if lm, ok := n.m.(literalMatcher); ok {
		return strings.ReplaceAll(s, lm.lit, n.content)
	}
	ms := n.m.findAll(s, nil)
	if len(ms) == 0 {
		return s
	}
	var b strings.Builder
	prev := 0
	for _, m := range ms {
		b.WriteString(s[prev:m[0]])
		b.WriteString(n.content)
		prev = m[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

// lowercaseNormalizer lowercases rune by rune like Rust's char::to_lowercase (no context rules),
// from the reference's table for non-ASCII code points.
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r >= utf8.RuneSelf {
			if l, ok := oniLower[r]; ok {
				b.WriteString(l)
				continue
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, isWhiteSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, isWhiteSpace)
	}
	return s
}

type byteLevelNormalizer struct{}

func (byteLevelNormalizer) normalize(s string) string { return byteLevelEncode(s) }

func isWhiteSpace(r rune) bool { return unicode.Is(unicode.White_Space, r) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
