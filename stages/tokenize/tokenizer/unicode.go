package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Unicode class bits, as the reference regex engine (Oniguruma, Unicode 16) classifies code points.
const (
	clL uint16 = 1 << iota
	clLu
	clLl
	clLt
	clLm
	clLo
	clM
	clN
	clP
	clS
	clSpace
	clHan
	clWord    // \w of the Rust regex crate (single_word added tokens): Alphabetic, M, Nd, Pc, Join_Control
	clOniWord // \w of Oniguruma
	clDigit   // \d of Oniguruma
)

// classNames maps the generated table names to class bits.
var classNames = map[string]uint16{
	"L": clL, "Lu": clLu, "Ll": clLl, "Lt": clLt, "Lm": clLm, "Lo": clLo, "M": clM, "N": clN,
	"P": clP, "S": clS, "Space": clSpace, "Han": clHan, "Word": clOniWord, "Digit": clDigit,
}

// inRanges reports whether r is in a sorted list of inclusive [lo, hi] pairs.
func inRanges(rs []uint32, r rune) bool {
	lo, hi := 0, len(rs)/2
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case uint32(r) < rs[2*m]:
			hi = m
		case uint32(r) > rs[2*m+1]:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}

// classPattern returns regexp2 class content (ranges, no brackets) for the code points whose class
// bits intersect mask, or their complement when negate is set.
func classPattern(mask uint16, negate bool) string {
	ensureUnicode()
	var b strings.Builder
	start := rune(-1)
	flush := func(end rune) {
		if start < 0 {
			return
		}
		writeClassRune(&b, start)
		if end > start {
			b.WriteByte('-')
			writeClassRune(&b, end)
		}
		start = -1
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		in := uclass(r)&mask != 0
		if r >= 0xD800 && r < 0xE000 {
			in = false
		}
		if in != negate && !(r >= 0xD800 && r < 0xE000) {
			if start < 0 {
				start = r
			}
		} else {
			flush(r - 1)
		}
	}
	flush(unicode.MaxRune)
	return b.String()
}

func writeClassRune(b *strings.Builder, r rune) {
	fmt.Fprintf(b, "\\x{%X}", r)
}

var (
	uniOnce   sync.Once
	uniIndex  []uint16      // code point >> 8 -> block number
	uniBlocks [][256]uint16 // deduplicated blocks of class bits
	uniASCII  [128]uint16
)

func buildUnicodeTables() {
	all := make([]uint16, unicode.MaxRune+1)
	for name, bit := range classNames {
		rs := oniRanges[name]
		for i := 0; i+1 < len(rs); i += 2 {
			for c := rs[i]; c <= rs[i+1]; c++ {
				all[c] |= bit
			}
		}
	}
	word := []*unicode.RangeTable{unicode.Nl, unicode.Other_Alphabetic, unicode.Pc, unicode.Join_Control}
	for c := range all {
		if all[c]&(clL|clM|clDigit) != 0 || unicode.In(rune(c), word...) {
			all[c] |= clWord
		}
	}
	seen := map[[256]uint16]uint16{}
	uniIndex = make([]uint16, len(all)>>8)
	for b := range uniIndex {
		var blk [256]uint16
		copy(blk[:], all[b<<8:(b+1)<<8])
		n, ok := seen[blk]
		if !ok {
			n = uint16(len(uniBlocks))
			uniBlocks = append(uniBlocks, blk)
			seen[blk] = n
		}
		uniIndex[b] = n
	}
	copy(uniASCII[:], all[:128])
}

// uclass returns the class bits of r. Tables are built on first use by ensureUnicode.
func uclass(r rune) uint16 {
	if r < 128 {
		return uniASCII[r]
	}
	if r > unicode.MaxRune || r < 0 {
		return 0
	}
	return uniBlocks[uniIndex[r>>8]][r&0xFF]
}

func ensureUnicode() { uniOnce.Do(buildUnicodeTables) }

// decodeRune decodes the rune at s[i:] (s is valid UTF-8) with an ASCII fast path.
func decodeRune(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// oniExtra returns, for a Unicode general category name, the code points Oniguruma puts in it that
// Go's unicode tables (an older Unicode version) lack. Used to rewrite regexes for regexp2.
func oniExtra(name string) []uint32 {
	rs := oniRanges[name]
	tab := unicode.Categories[name]
	if tab == nil {
		return nil
	}
	var out []uint32
	for i := 0; i+1 < len(rs); i += 2 {
		for c := rs[i]; c <= rs[i+1]; c++ {
			if !unicode.Is(tab, rune(c)) {
				if n := len(out); n > 0 && out[n-1] == c-1 {
					out[n-1] = c
				} else {
					out = append(out, c, c)
				}
			}
		}
	}
	return out
}
