package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The lexer follows jinja2/lexer.py with the settings transformers uses: default delimiters,
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newline_sequence "\n".

// tokKind classifies a token inside a tag.
type tokKind int

const (
	tName tokKind = iota
	tString
	tInt
	tFloat
	tOp
	tEOF
)

// token is one lexical token inside a {{ }} or {% %} tag.
type token struct {
	kind tokKind
	text string // name, operator, or the decoded string literal
	i    int64
	f    float64
	line int
}

func (t token) String() string {
	switch t.kind {
	case tString:
		return strconv.Quote(t.text)
	case tInt:
		return strconv.FormatInt(t.i, 10)
	case tFloat:
		return pyFloatRepr(t.f)
	case tEOF:
		return "end of tag"
	}
	return t.text
}

// itemKind classifies a lexed template item.
type itemKind int

const (
	itemText itemKind = iota
	itemVar
	itemBlock
)

// item is text (whitespace control already applied) or the tokens of one tag.
type item struct {
	kind itemKind
	text string
	toks []token
	line int
}

// SyntaxError reports a template that does not lex or parse, or uses a construct this package does
// not implement.
type SyntaxError struct {
	// Line is the 1-based template line of the offending tag.
	Line int
	// Msg says what is wrong.
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("chat template line %d: %s", e.Line, e.Msg)
}

func syntaxErr(line int, format string, args ...any) error {
	return &SyntaxError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// normalizeSource applies Jinja2's newline normalisation and drops one trailing newline.
func normalizeSource(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	return strings.TrimSuffix(src, "\n")
}

type lexer struct {
	src          string
	pos          int
	lineStarting bool
	items        []item
}

func (lx *lexer) line(pos int) int { return strings.Count(lx.src[:pos], "\n") + 1 }

// lex splits a template into text and tag items.
func lex(source string) ([]item, error) {
	lx := &lexer{src: normalizeSource(source), lineStarting: true}
	for lx.pos < len(lx.src) {
		if err := lx.next(); err != nil {
			return nil, err
		}
	}
	return lx.items, nil
}

func rstripPy(s string) string {
	return strings.TrimRightFunc(s, pyIsSpace)
}

func allPySpace(s string) bool {
	for _, r := range s {
		if !pyIsSpace(r) {
			return false
		}
	}
	return s != ""
}

// skipSpace returns the position after any whitespace at p.
func (lx *lexer) skipSpace(p int) int {
	for p < len(lx.src) {
		r, n := utf8.DecodeRuneInString(lx.src[p:])
		if !pyIsSpace(r) {
			break
		}
		p += n
	}
	return p
}

// stripText applies "-" and lstrip_blocks to the text before a tag.
func (lx *lexer) stripText(text, sign string, isVar bool) string {
	if sign == "-" {
		return rstripPy(text)
	}
	if sign != "+" && !isVar {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if (lpos > 0 || lx.lineStarting) && allPySpace(text[lpos:]) {
			return text[:lpos]
		}
	}
	return text
}

func (lx *lexer) emitText(s string) {
	if s != "" {
		lx.items = append(lx.items, item{kind: itemText, text: s})
	}
}

func (lx *lexer) next() error {
	src := lx.src
	idx := -1
	for i := lx.pos; i+1 < len(src); i++ {
		if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
			idx = i
			break
		}
	}
	if idx < 0 {
		lx.emitText(src[lx.pos:])
		lx.pos = len(src)
		return nil
	}
	text := src[lx.pos:idx]
	kind := src[idx+1]
	p := idx + 2
	sign := ""
	if p < len(src) && (src[p] == '-' || src[p] == '+') {
		sign = src[p : p+1]
		p++
	}
	line := lx.line(idx)
	if kind == '%' {
		if end, ok := lx.rawBegin(p); ok {
			lx.emitText(lx.stripText(text, sign, false))
			lx.lineStarting = src[end-1] == '\n'
			return lx.raw(end, line)
		}
	}
	lx.emitText(lx.stripText(text, sign, kind == '{'))
	lx.lineStarting = false
	switch kind {
	case '#':
		for q := p; q < len(src); q++ {
			switch {
			case strings.HasPrefix(src[q:], "+#}"):
				lx.pos = q + 3
			case strings.HasPrefix(src[q:], "-#}"):
				lx.pos = lx.skipSpace(q + 3)
			case strings.HasPrefix(src[q:], "#}"):
				lx.pos = q + 2
				if lx.pos < len(src) && src[lx.pos] == '\n' {
					lx.pos++
				}
			default:
				continue
			}
			lx.lineStarting = src[lx.pos-1] == '\n'
			return nil
		}
		return syntaxErr(line, "missing end of comment tag")
	default:
		toks, end, err := lx.tagTokens(p, kind == '%', line)
		if err != nil {
			return err
		}
		k := itemVar
		if kind == '%' {
			k = itemBlock
		}
		lx.items = append(lx.items, item{kind: k, toks: toks, line: line})
		lx.pos = end
		lx.lineStarting = end > 0 && src[end-1] == '\n'
		return nil
	}
}

// rawBegin matches `\s*raw\s*(-%}\s*|%})` at p (after "{%" and its sign).
func (lx *lexer) rawBegin(p int) (int, bool) {
	q := lx.skipSpace(p)
	if !strings.HasPrefix(lx.src[q:], "raw") {
		return 0, false
	}
	q = lx.skipSpace(q + 3)
	switch {
	case strings.HasPrefix(lx.src[q:], "-%}"):
		return lx.skipSpace(q + 3), true
	case strings.HasPrefix(lx.src[q:], "%}"):
		return q + 2, true
	}
	return 0, false
}

// raw consumes a raw block's body and its endraw tag.
func (lx *lexer) raw(p, line int) error {
	src := lx.src
	for q := p; q+1 < len(src); q++ {
		if src[q] != '{' || src[q+1] != '%' {
			continue
		}
		r := q + 2
		sign := ""
		if r < len(src) && (src[r] == '-' || src[r] == '+') {
			sign = src[r : r+1]
			r++
		}
		r = lx.skipSpace(r)
		if !strings.HasPrefix(src[r:], "endraw") {
			continue
		}
		r = lx.skipSpace(r + len("endraw"))
		var end int
		switch {
		case strings.HasPrefix(src[r:], "+%}"):
			end = r + 3
		case strings.HasPrefix(src[r:], "-%}"):
			end = lx.skipSpace(r + 3)
		case strings.HasPrefix(src[r:], "%}"):
			end = r + 2
			if end < len(src) && src[end] == '\n' {
				end++
			}
		default:
			continue
		}
		lx.emitText(lx.stripText(src[p:q], sign, false))
		lx.pos = end
		lx.lineStarting = src[end-1] == '\n'
		return nil
	}
	return syntaxErr(line, "missing end of raw directive")
}

var operators = []string{"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// tagTokens lexes the inside of a tag starting at p until its closer; it returns the tokens and the
// position after the closer (and after whatever whitespace control consumed).
func (lx *lexer) tagTokens(p int, block bool, line int) ([]token, int, error) {
	src := lx.src
	var toks []token
	var stack []byte
	for {
		if p >= len(src) {
			if block {
				return nil, 0, syntaxErr(line, "unexpected end of template, expected end of statement block")
			}
			return nil, 0, syntaxErr(line, "unexpected end of template, expected end of print statement")
		}
		rest := src[p:]
		if len(stack) == 0 {
			if block {
				switch {
				case strings.HasPrefix(rest, "+%}"):
					return toks, p + 3, nil
				case strings.HasPrefix(rest, "-%}"):
					return toks, lx.skipSpace(p + 3), nil
				case strings.HasPrefix(rest, "%}"):
					end := p + 2
					if end < len(src) && src[end] == '\n' {
						end++
					}
					return toks, end, nil
				}
			} else {
				switch {
				case strings.HasPrefix(rest, "-}}"):
					return toks, lx.skipSpace(p + 3), nil
				case strings.HasPrefix(rest, "}}"):
					return toks, p + 2, nil
				}
			}
		}
		tl := lx.line(p)
		r, n := utf8.DecodeRuneInString(rest)
		switch {
		case pyIsSpace(r):
			p += n
			continue
		case r >= '0' && r <= '9':
			tok, m, err := lexNumber(rest, p > 0 && src[p-1] == '.')
			if err != nil {
				return nil, 0, syntaxErr(tl, "%v", err)
			}
			tok.line = tl
			toks = append(toks, tok)
			p += m
			continue
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
			m := 1
			for m < len(rest) && isIdentByte(rest[m]) {
				m++
			}
			toks = append(toks, token{kind: tName, text: rest[:m], line: tl})
			p += m
			continue
		case r == '\'' || r == '"':
			body, m, ok := scanString(rest)
			if !ok {
				return nil, 0, syntaxErr(tl, "unexpected char %q (unterminated string)", r)
			}
			s, err := unescapeString(body)
			if err != nil {
				return nil, 0, syntaxErr(tl, "%v", err)
			}
			toks = append(toks, token{kind: tString, text: s, line: tl})
			p += m
			continue
		}
		op := ""
		for _, o := range operators {
			if strings.HasPrefix(rest, o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, 0, syntaxErr(tl, "unexpected char %q", r)
		}
		switch op {
		case "(":
			stack = append(stack, ')')
		case "[":
			stack = append(stack, ']')
		case "{":
			stack = append(stack, '}')
		case ")", "]", "}":
			if len(stack) == 0 || stack[len(stack)-1] != op[0] {
				return nil, 0, syntaxErr(tl, "unexpected '%s'", op)
			}
			stack = stack[:len(stack)-1]
		}
		toks = append(toks, token{kind: tOp, text: op, line: tl})
		p += len(op)
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// scanString returns the body of the string literal at the start of s and the literal's length.
func scanString(s string) (string, int, bool) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return s[1:i], i + 1, true
		}
	}
	return "", 0, false
}

// unescapeString decodes a string literal body as Jinja2 does (Python's unicode-escape codec applied
// to the ASCII-backslash-escaped text).
func unescapeString(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		c = s[i]
		switch c {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(c)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(n))
			i = j - 1
		case 'x', 'u', 'U':
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+width > len(s) {
				return "", fmt.Errorf("truncated \\%c escape in string literal", c)
			}
			n, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32)
			if err != nil || n > 0x10ffff {
				return "", fmt.Errorf("bad \\%c escape in string literal", c)
			}
			b.WriteRune(rune(n))
			i += width
		case 'N':
			return "", fmt.Errorf("\\N{...} escapes in string literals are not supported")
		default:
			b.WriteByte('\\')
			if c >= 0x80 {
				r, n := utf8.DecodeRuneInString(s[i:])
				switch {
				case r <= 0xff:
					fmt.Fprintf(&b, "x%02x", r)
				case r <= 0xffff:
					fmt.Fprintf(&b, "u%04x", r)
				default:
					fmt.Fprintf(&b, "U%08x", r)
				}
				i += n - 1
			} else {
				b.WriteByte(c)
			}
		}
	}
	return b.String(), nil
}

// lexNumber lexes Jinja2's float_re or integer_re at the start of s.
func lexNumber(s string, afterDot bool) (token, int, error) {
	digits := func(i int) int { // (\d+_)*\d+ ; returns end or i when none
		j := i
		for {
			k := j
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				k++
			}
			if k == j {
				return j
			}
			if k < len(s) && s[k] == '_' && k+1 < len(s) && s[k+1] >= '0' && s[k+1] <= '9' {
				j = k + 1
				continue
			}
			return k
		}
	}
	clean := func(t string) string { return strings.ReplaceAll(t, "_", "") }
	if !afterDot {
		ip := digits(0)
		end := -1
		frac := ip
		if frac < len(s) && s[frac] == '.' {
			if e := digits(frac + 1); e > frac+1 {
				frac = e
			}
		}
		if frac < len(s) && (s[frac] == 'e' || s[frac] == 'E') {
			k := frac + 1
			if k < len(s) && (s[k] == '+' || s[k] == '-') {
				k++
			}
			if e := digits(k); e > k {
				end = e
			}
		}
		if end < 0 && frac > ip {
			end = frac
		}
		if end > 0 {
			f, err := strconv.ParseFloat(clean(s[:end]), 64)
			if err != nil {
				return token{}, 0, fmt.Errorf("bad float literal %q", s[:end])
			}
			return token{kind: tFloat, f: f}, end, nil
		}
	}
	if len(s) > 1 && s[0] == '0' && strings.ContainsRune("bBoOxX", rune(s[1])) {
		base := map[byte]int{'b': 2, 'o': 8, 'x': 16}[s[1]|0x20]
		j := 2
		for j < len(s) && (s[j] == '_' || isIdentByte(s[j])) {
			j++
		}
		n, err := strconv.ParseInt(clean(s[2:j]), base, 64)
		if err != nil {
			return token{}, 0, fmt.Errorf("bad integer literal %q", s[:j])
		}
		return token{kind: tInt, i: n}, j, nil
	}
	end := digits(0)
	if s[0] == '0' {
		end = 1
		for end < len(s) && (s[end] == '0' || (s[end] == '_' && end+1 < len(s) && s[end+1] == '0')) {
			end++
		}
	}
	n, err := strconv.ParseInt(clean(s[:end]), 10, 64)
	if err != nil {
		return token{}, 0, fmt.Errorf("integer literal %q does not fit in 64 bits", s[:end])
	}
	return token{kind: tInt, i: n}, end, nil
}
