package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a pattern in s, leftmost first, the way Oniguruma's
// find_iter does, appending [start, end) byte offsets to dst.
type matcher interface {
	findAll(s string, dst [][2]int) [][2]int
}

// literalMatcher matches a fixed string (Split / Replace with a "String" pattern).
type literalMatcher struct{ lit string }

func (m literalMatcher) findAll(s string, dst [][2]int) [][2]int {
	if m.lit == "" {
		return dst
	}
	for i := 0; ; {
		j := strings.Index(s[i:], m.lit)
		if j < 0 {
			return dst
		}
		dst = append(dst, [2]int{i + j, i + j + len(m.lit)})
		i += j + len(m.lit)
	}
}

// regexpMatcher is the general path: any Oniguruma pattern regexp2 can express.
type regexpMatcher struct {
	re *regexp2.Regexp
}

func (m *regexpMatcher) findAll(s string, dst [][2]int) [][2]int {
	if s == "" {
		return dst
	}
	runes := []rune(s)
	// byteAt[i] is the byte offset of rune i.
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, r := range runes {
		byteAt[i] = off
		off += utf8.RuneLen(r)
	}
	byteAt[len(runes)] = off
	mt, err := m.re.FindRunesMatch(runes)
	for err == nil && mt != nil {
		dst = append(dst, [2]int{byteAt[mt.Index], byteAt[mt.Index+mt.Length]})
		mt, err = m.re.FindNextMatch(mt)
	}
	return dst
}

// compileRegex compiles an Oniguruma pattern for the general path: Unicode general categories are
// widened to Oniguruma's (newer) tables and class intersections of the form [X&&[^Y]] are rewritten
// to .NET class subtraction [X-[Y]], which regexp2 supports. Any other intersection is an error.
func compileRegex(pattern string) (*regexpMatcher, error) {
	ensureUnicode()
	rewritten, err := rewritePattern(pattern)
	if err != nil {
		return nil, err
	}
	re, err := regexp2.Compile(rewritten, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	return &regexpMatcher{re: re}, nil
}

// foldOrbit returns the members of r's Unicode simple case-fold orbit when it has more than the two
// cases ignore-case matching gives anyway, else "".
func foldOrbit(r rune) string {
	if !unicode.IsLetter(r) {
		return ""
	}
	orbit := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		orbit = append(orbit, f)
	}
	if len(orbit) <= 2 {
		return ""
	}
	return string(orbit)
}

// shorthandClass maps \w, \W, \d, \D to class bits.
func shorthandClass(c byte) (mask uint16, negate, ok bool) {
	switch c {
	case 'w':
		return clOniWord, false, true
	case 'W':
		return clOniWord, true, true
	case 'd':
		return clDigit, false, true
	case 'D':
		return clDigit, true, true
	}
	return 0, false, false
}

// rewritePattern turns an Oniguruma pattern (as tokenizer.json writes them) into one regexp2 reads
// the same way: Oniguruma's Unicode tables for \p{...}, \w and \d, class intersections, and its case
// folding in (?i:...) groups, where a letter outside a class also matches the other members of its Unicode simple
// case-fold orbit (s also matches U+017F LATIN SMALL LETTER LONG S, k U+212A KELVIN SIGN), which
// regexp2's ignore-case (lower-casing both sides) misses.
func rewritePattern(p string) (string, error) {
	var b strings.Builder
	depth := 0        // character class nesting
	var groups []bool // per open group outside classes: case-insensitive
	ci := func() bool { return len(groups) > 0 && groups[len(groups)-1] }
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '(' && depth == 0:
			if strings.HasPrefix(p[i:], "(?i:") {
				groups = append(groups, true)
				b.WriteString("(?i:")
				i += 4
				continue
			}
			groups = append(groups, ci())
		case c == ')' && depth == 0 && len(groups) > 0:
			groups = groups[:len(groups)-1]
		case c < utf8.RuneSelf && depth == 0 && ci() && foldOrbit(rune(c)) != "":
			b.WriteString("[" + foldOrbit(rune(c)) + "]")
			i++
			continue
		case c == '\\' && i+1 < len(p):
			if (p[i+1] == 'p') && i+2 < len(p) && p[i+2] == '{' {
				end := strings.IndexByte(p[i:], '}')
				if end < 0 {
					return "", fmt.Errorf("regex %q: unterminated \\p{", p)
				}
				name := p[i+3 : i+end]
				extra := oniExtra(name)
				if len(extra) == 0 {
					b.WriteString(p[i : i+end+1])
				} else {
					if depth == 0 {
						b.WriteByte('[')
					}
					b.WriteString(p[i : i+end+1])
					for k := 0; k+1 < len(extra); k += 2 {
						b.WriteRune(rune(extra[k]))
						if extra[k+1] != extra[k] {
							b.WriteByte('-')
							b.WriteRune(rune(extra[k+1]))
						}
					}
					if depth == 0 {
						b.WriteByte(']')
					}
				}
				i += end + 1
				continue
			}
			if mask, neg, ok := shorthandClass(p[i+1]); ok {
				// Oniguruma's \w and \d follow its own (newer) Unicode tables.
				if depth == 0 {
					b.WriteByte('[')
				}
				b.WriteString(classPattern(mask, neg))
				if depth == 0 {
					b.WriteByte(']')
				}
				i += 2
				continue
			}
			_, n := utf8.DecodeRuneInString(p[i+1:])
			b.WriteString(p[i : i+1+n])
			i += 1 + n
			continue
		case c == '[':
			depth++
		case c == ']' && depth > 0:
			depth--
		case c == '&' && depth > 0 && strings.HasPrefix(p[i:], "&&"):
			if !strings.HasPrefix(p[i:], "&&[^") {
				return "", fmt.Errorf("regex %q: class intersection other than [X&&[^Y]] is not supported", p)
			}
			b.WriteString("-[")
			i += 4
			depth++
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), nil
}
