package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// decoder turns token strings back into text (HF `decoders`, decode_chain semantics).
type decoder interface {
	decodeChain(tokens []string) []string
}

type seqDecoder []decoder

func (q seqDecoder) decodeChain(tokens []string) []string {
	for _, d := range q {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		mark := len(buf)
		ok := true
		for _, r := range t {
			b, in := runeToByte(r)
			if !in {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:mark], t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

type replaceDecoder struct{ pattern, content string }

func (d replaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = strings.ReplaceAll(t, d.pattern, d.content)
	}
	return out
}

type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decodeChain(tokens []string) []string {
	var out []string
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := parseByteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// parseByteToken parses "<0xNN>".
func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(t[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rs := []rune(t)
		startCut := 0
		for k := 0; k < d.start && k < len(rs); k++ {
			if rs[k] != d.content {
				break
			}
			startCut = k + 1
		}
		stopCut := len(rs)
		for k := 0; k < d.stop && k < len(rs); k++ {
			idx := len(rs) - k - 1
			if rs[idx] != d.content {
				break
			}
			stopCut = idx
		}
		if stopCut < startCut {
			stopCut = startCut
		}
		out[i] = string(rs[startCut:stopCut])
	}
	return out
}

type metaspaceDecoder struct {
	replacement rune
	prepend     bool // prepend_scheme != "never"
}

func (d metaspaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var b strings.Builder
		for _, r := range t {
			if r == d.replacement {
				if i == 0 && d.prepend {
					continue
				}
				b.WriteByte(' ')
				continue
			}
			b.WriteRune(r)
		}
		out[i] = b.String()
	}
	return out
}
