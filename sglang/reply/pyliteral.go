package reply

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pyDictJSON is what Llama32Detector._convert_python_dict_to_json makes of
// a Python dict literal: ast.literal_eval (utils.py safe_literal_eval), then
// json.dumps. It reads the literals a model writes in a call: dicts, lists
// and tuples (as lists), strings in single or double quotes with Python's
// escapes (an unknown escape keeps its backslash, as CPython does),
// decimal ints and floats, True, False and None; keys may be strings,
// ints, booleans or None (json.dumps turns them into strings). Anything
// else (sets, bytes, triple quotes, hex ints, comments, string
// concatenation) is reported as not a dict, which makes Parse refuse a call
// SGLang would read: a known gap, never a silent difference.
func pyDictJSON(s string) (json.RawMessage, bool) {
	p := pyLit{s: s}
	p.space()
	if p.i >= len(s) || s[p.i] != '{' {
		return nil, false
	}
	var b bytes.Buffer
	if !p.value(&b, 0) {
		return nil, false
	}
	p.space()
	if p.i != len(s) || !json.Valid(b.Bytes()) {
		return nil, false
	}
	return json.RawMessage(b.Bytes()), true
}

type pyLit struct {
	s string
	i int
}

// space skips the whitespace Python allows inside brackets.
func (p *pyLit) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\n\r\f", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyLit) value(b *bytes.Buffer, depth int) bool {
	if depth > 200 {
		return false
	}
	p.space()
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.dict(b, depth)
	case c == '[':
		return p.seq(b, depth, ']')
	case c == '(':
		return p.seq(b, depth, ')')
	case c == '\'' || c == '"':
		str, ok := p.str()
		if !ok {
			return false
		}
		writeJSONString(b, str)
		return true
	default:
		if p.word("True") {
			b.WriteString("true")
			return true
		}
		if p.word("False") {
			b.WriteString("false")
			return true
		}
		if p.word("None") {
			b.WriteString("null")
			return true
		}
		return p.number(b)
	}
}

func (p *pyLit) word(w string) bool {
	if !strings.HasPrefix(p.s[p.i:], w) {
		return false
	}
	if j := p.i + len(w); j < len(p.s) && (isIdent(p.s[j])) {
		return false
	}
	p.i += len(w)
	return true
}

func isIdent(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// dict writes a dict as json.dumps does. Keys that are equal in Python
// (True == 1, False == 0) are one key, which keeps the first key's spelling
// and the last value; json.dumps writes True as "true" and 1 as "1".
func (p *pyLit) dict(b *bytes.Buffer, depth int) bool {
	p.i++ // {
	type entry struct{ key, value string }
	var entries []entry
	at := map[string]int{}
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			break
		}
		id, key, ok := p.key()
		if !ok {
			return false
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return false // a set, or not a literal
		}
		p.i++
		var v bytes.Buffer
		if !p.value(&v, depth+1) {
			return false
		}
		if i, seen := at[id]; seen {
			entries[i].value = v.String()
		} else {
			at[id] = len(entries)
			entries = append(entries, entry{key, v.String()})
		}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			continue
		}
		return false
	}
	b.WriteByte('{')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, e.key)
		b.WriteByte(':')
		b.WriteString(e.value)
	}
	b.WriteByte('}')
	return true
}

// key reads a dict key: its identity in Python (equal keys share one) and
// the string json.dumps makes of it. Strings, ints, True, False and None
// are read; float and tuple keys are not.
func (p *pyLit) key() (id, key string, ok bool) {
	p.space()
	if p.i >= len(p.s) {
		return "", "", false
	}
	if c := p.s[p.i]; c == '\'' || c == '"' {
		str, ok := p.str()
		return "s" + str, str, ok
	}
	var v bytes.Buffer
	if !p.value(&v, 0) {
		return "", "", false
	}
	switch k := v.String(); {
	case k == "true":
		return "i1", k, true
	case k == "false":
		return "i0", k, true
	case k == "null":
		return "n", k, true
	case strings.ContainsAny(k, ".eE[{\""):
		return "", "", false
	default:
		return "i" + k, k, true
	}
}

func (p *pyLit) seq(b *bytes.Buffer, depth int, end byte) bool {
	p.i++
	b.WriteByte('[')
	for n := 0; ; n++ {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			b.WriteByte(']')
			return true
		}
		if n > 0 {
			b.WriteByte(',')
		}
		if !p.value(b, depth+1) {
			return false
		}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == end {
			if end == ')' && n == 0 {
				return false // (x) is x, not a tuple: not read here
			}
			continue
		}
		return false
	}
}

// number reads an optionally signed decimal int or float.
func (p *pyLit) number(b *bytes.Buffer) bool {
	start := p.i
	neg := false
	for p.i < len(p.s) && (p.s[p.i] == '-' || p.s[p.i] == '+') {
		if p.s[p.i] == '-' {
			neg = !neg
		}
		p.i++
		p.space()
	}
	ds := p.i
	isFloat := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c >= '0' && c <= '9':
		case c == '.':
			isFloat = true
		case c == 'e' || c == 'E':
			isFloat = true
			if p.i+1 < len(p.s) && (p.s[p.i+1] == '+' || p.s[p.i+1] == '-') {
				p.i++
			}
		default:
			goto done
		}
		p.i++
	}
done:
	lit := p.s[ds:p.i]
	if lit == "" || p.i < len(p.s) && isIdent(p.s[p.i]) {
		p.i = start
		return false
	}
	if !isFloat {
		if len(lit) > 1 && lit[0] == '0' && strings.Trim(lit, "0") != "" {
			return false // 007 is a SyntaxError
		}
		if neg && strings.Trim(lit, "0") != "" {
			b.WriteByte('-')
		}
		if t := strings.TrimLeft(lit, "0"); t != "" {
			b.WriteString(t)
		} else {
			b.WriteByte('0')
		}
		return true
	}
	if lit[0] == 'e' || lit[0] == 'E' {
		return false
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return false // json.dumps writes Infinity, which is not JSON
	}
	if neg {
		f = -f
	}
	// repr(float): the shortest form that reads back the same.
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	b.WriteString(s)
	return true
}

// str reads a one-line string in single or double quotes.
func (p *pyLit) str() (string, bool) {
	q := p.s[p.i]
	if strings.HasPrefix(p.s[p.i:], strings.Repeat(string(q), 3)) {
		return "", false // triple-quoted: not read here
	}
	p.i++
	var out strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			// "a" "b" is one string in Python: not read here.
			j := p.i
			for j < len(p.s) && strings.IndexByte(" \t\n\r\f", p.s[j]) >= 0 {
				j++
			}
			if j < len(p.s) && (p.s[j] == '\'' || p.s[j] == '"') {
				return "", false
			}
			return out.String(), true
		case c == '\n' || c == '\r':
			return "", false
		case c == '\\':
			if !p.escape(&out) {
				return "", false
			}
		default:
			r, n := utf8.DecodeRuneInString(p.s[p.i:])
			out.WriteRune(r)
			p.i += n
		}
	}
	return "", false
}

func (p *pyLit) escape(out *strings.Builder) bool {
	if p.i+1 >= len(p.s) {
		return false
	}
	c := p.s[p.i+1]
	simple := map[byte]string{'\\': "\\", '\'': "'", '"': "\"", 'n': "\n", 't': "\t", 'r': "\r", 'b': "\b", 'f': "\f", 'v': "\v", 'a': "\a", '\n': ""}
	if s, ok := simple[c]; ok {
		out.WriteString(s)
		p.i += 2
		return true
	}
	hex := map[byte]int{'x': 2, 'u': 4, 'U': 8}
	if n, ok := hex[c]; ok {
		if p.i+2+n > len(p.s) {
			return false
		}
		v, err := strconv.ParseUint(p.s[p.i+2:p.i+2+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return false
		}
		if v >= 0xD800 && v <= 0xDFFF {
			return false // a lone surrogate: not read here
		}
		out.WriteRune(rune(v))
		p.i += 2 + n
		return true
	}
	if c >= '0' && c <= '7' {
		j := p.i + 1
		for j < len(p.s) && j < p.i+4 && p.s[j] >= '0' && p.s[j] <= '7' {
			j++
		}
		v, _ := strconv.ParseUint(p.s[p.i+1:j], 8, 32)
		out.WriteRune(rune(v))
		p.i = j
		return true
	}
	if c == 'N' {
		return false // \N{NAME}: not read here
	}
	// An unknown escape keeps its backslash (a SyntaxWarning, silenced).
	out.WriteByte('\\')
	p.i++
	return true
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}
