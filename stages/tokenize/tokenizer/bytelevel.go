package tokenizer

import "unicode/utf8"

// GPT-2 byte-level alphabet: every byte maps to a printable rune; printable Latin-1 bytes map to
// themselves, the others to U+0100 onwards in byte order.
var (
	byteToRune [256]rune
	byteToStr  [256]string
	// runeByte[r] is 1+the byte of alphabet rune r (< 0x144), 0 when r is not in the alphabet.
	runeByte [0x144]uint16
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeByte[byteToRune[b]] = uint16(b) + 1
		byteToStr[b] = string(byteToRune[b])
	}
}

// byteLevelEncode maps raw bytes to the byte-level alphabet.
func byteLevelEncode(s string) string {
	out := make([]byte, 0, len(s)*2)
	for i := 0; i < len(s); i++ {
		out = utf8.AppendRune(out, byteToRune[s[i]])
	}
	return string(out)
}

// runeToByte returns the byte of a byte-level alphabet rune.
func runeToByte(r rune) (byte, bool) {
	if r < 0 || r >= 0x144 || runeByte[r] == 0 {
		return 0, false
	}
	return byte(runeByte[r] - 1), true
}

// byteLevelDecode maps a byte-level alphabet string back to raw bytes; ok is false when s holds a
// rune outside the alphabet.
func byteLevelDecode(s string) (raw string, ok bool) {
	var stack [64]byte
	out := stack[:0]
	for _, r := range s {
		b, ok := runeToByte(r)
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}

// lossyUTF8 converts bytes to a string the way Rust's String::from_utf8_lossy does: every maximal
// ill-formed subsequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = append(out, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return string(out)
}

// maximalSubpart returns the length of the maximal prefix of b (which starts with an invalid
// sequence) that is a prefix of some well-formed UTF-8 sequence, at least 1.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}
