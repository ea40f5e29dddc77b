package tokenizer

// Hand-written matchers for the pre-tokenizer regexes of the supported model families. Each
// matchAt function returns the end of the match the Oniguruma pattern would find starting exactly
// at byte i (leftmost-first alternation with backtracking), or -1. They are verified against the
// regexp2 path by FuzzFastMatchers and the conformance tests.

// Known patterns, exactly as they appear in tokenizer.json files / tiktoken model code.
const (
	patGPT2      = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patCL100K    = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2     = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patO200K     = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patKimi      = `[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patTekken    = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patDigits3   = `\p{N}{1,3}`
	patDSCJK     = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDSMain    = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	patDSMainEsc = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// fastMatchers maps known patterns to their hand-written matchAt functions.
var fastMatchers = map[string]func(s string, i int) int{
	patGPT2:   matchGPT2,
	patCL100K: func(s string, i int) int { return matchCL100K(s, i, 3) },
	patQwen2:  func(s string, i int) int { return matchCL100K(s, i, 1) },
	patO200K: func(s string, i int) int {
		return matchO200K(s, i, o200kOpts{contractions: true, digits: 3, slash: true})
	},
	patKimi: func(s string, i int) int {
		return matchO200K(s, i, o200kOpts{han: true, contractions: true, digits: 3})
	},
	patTekken:    func(s string, i int) int { return matchO200K(s, i, o200kOpts{digits: 1, slash: true}) },
	patDigits3:   matchDigits3,
	patDSCJK:     matchDSCJK,
	patDSMain:    matchDSMain,
	patDSMainEsc: matchDSMain,
}

// fastMatcher adapts a matchAt function to the matcher interface.
type fastMatcher struct {
	at func(s string, i int) int
}

func (m fastMatcher) findAll(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		if e := m.at(s, i); e > i {
			dst = append(dst, [2]int{i, e})
			i = e
			continue
		}
		if s[i] < 0x80 {
			i++
		} else {
			_, n := decodeRune(s, i)
			i += n
		}
	}
	return dst
}

// spanClass returns the end of the run of runes starting at i whose class intersects mask.
func spanClass(s string, i int, mask uint16) int {
	for i < len(s) {
		r, n := decodeRune(s, i)
		if uclass(r)&mask == 0 {
			break
		}
		i += n
	}
	return i
}

// spanClassMax is spanClass limited to max runes.
func spanClassMax(s string, i int, mask uint16, max int) int {
	for k := 0; k < max && i < len(s); k++ {
		r, n := decodeRune(s, i)
		if uclass(r)&mask == 0 {
			break
		}
		i += n
	}
	return i
}

// spanNotClass returns the end of the run of runes starting at i whose class avoids mask.
func spanNotClass(s string, i int, mask uint16) int {
	for i < len(s) {
		r, n := decodeRune(s, i)
		if uclass(r)&mask != 0 {
			break
		}
		i += n
	}
	return i
}

// spanNewlines returns the end of the run of \r and \n (and '/' when slash) starting at i.
func spanNewlines(s string, i int, slash bool) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n' || (slash && s[i] == '/')) {
		i++
	}
	return i
}

// matchWS matches, at a whitespace rune, `\s*[\r\n]+|\s+(?!\S)|\s+` (crlf) or `\s+(?!\S)|\s+`.
func matchWS(s string, i int, crlf bool) int {
	j, lastNL, lastStart := i, -1, i
	for j < len(s) {
		r, n := decodeRune(s, j)
		if uclass(r)&clSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		lastStart = j
		j += n
	}
	if crlf && lastNL >= 0 {
		return lastNL + 1
	}
	if j == len(s) || lastStart == i {
		return j
	}
	return lastStart
}

// contraction matches (?i:s|t|re|ve|m|ll|d) at i (just after an apostrophe); ci enables
// Oniguruma's case folding (which also folds U+017F LATIN SMALL LETTER LONG S to s).
func contraction(s string, i int, ci bool) int {
	if i >= len(s) {
		return -1
	}
	low := func(c byte) byte {
		if ci && c >= 'A' && c <= 'Z' {
			return c + 32
		}
		return c
	}
	switch low(s[i]) {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && low(s[i+1]) == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && low(s[i+1]) == 'l' {
			return i + 2
		}
	case 0xC5:
		if ci && i+1 < len(s) && s[i+1] == 0xBF { // U+017F
			return i + 2
		}
	}
	return -1
}

// optContraction extends a match ending at e by an optional (?i:'s|...) suffix when on.
func optContraction(s string, e int, on bool) int {
	if on && e < len(s) && s[e] == '\'' {
		if c := contraction(s, e+1, true); c > 0 {
			return c
		}
	}
	return e
}

func matchGPT2(s string, i int) int {
	r, n := decodeRune(s, i)
	if r == '\'' {
		if e := contraction(s, i+1, false); e > 0 {
			return e
		}
	}
	j := i
	if r == ' ' {
		j = i + 1
	}
	if j < len(s) {
		r2, _ := decodeRune(s, j)
		c2 := uclass(r2)
		if c2&clL != 0 {
			return spanClass(s, j, clL)
		}
		if c2&clN != 0 {
			return spanClass(s, j, clN)
		}
		if c2&(clSpace|clL|clN) == 0 {
			return spanNotClass(s, j, clSpace|clL|clN)
		}
	}
	_ = n
	if uclass(r)&clSpace != 0 {
		return matchWS(s, i, false)
	}
	return -1
}

func matchCL100K(s string, i int, maxDigits int) int {
	r, n := decodeRune(s, i)
	c := uclass(r)
	if r == '\'' {
		if e := contraction(s, i+1, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clL != 0 {
		return spanClass(s, i, clL)
	}
	if c&clN == 0 && r != '\r' && r != '\n' && i+n < len(s) {
		if r2, _ := decodeRune(s, i+n); uclass(r2)&clL != 0 {
			return spanClass(s, i+n, clL)
		}
	}
	// \p{N}{1,k}
	if c&clN != 0 {
		return spanClassMax(s, i, clN, maxDigits)
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r == ' ' {
		j = i + 1
	}
	if e := spanNotClass(s, j, clSpace|clL|clN); e > j {
		return spanNewlines(s, e, false)
	}
	if c&clSpace != 0 {
		return matchWS(s, i, true)
	}
	return -1
}

const (
	upperMask = clLu | clLt | clLm | clLo | clM
	lowerMask = clLl | clLm | clLo | clM
)

// o200kOpts selects the variant of the o200k-style pattern family.
type o200kOpts struct {
	han          bool // Kimi-K2: leading [\p{Han}]+ alternative, Han excluded from the letter classes
	contractions bool // optional (?i:'s|'t|...) suffix after letters
	digits       int  // \p{N}{1,digits}
	slash        bool // [\r\n/]* after punctuation (else [\r\n]*)
}

// o200kUpperLower matches [U]*[W]+ contraction? at p (U, W minus Han when noHan).
func o200kUpperLower(s string, p int, noHan, contr bool) int {
	q, lastW := p, -1
	for q < len(s) {
		r, n := decodeRune(s, q)
		c := uclass(r)
		if c&upperMask == 0 || (noHan && c&clHan != 0) {
			break
		}
		if c&lowerMask != 0 {
			lastW = q + n
		}
		q += n
	}
	if q < len(s) {
		r, _ := decodeRune(s, q)
		if c := uclass(r); c&lowerMask != 0 && !(noHan && c&clHan != 0) {
			return optContraction(s, spanLower(s, q, noHan), contr)
		}
	}
	if lastW > 0 {
		return optContraction(s, lastW, contr)
	}
	return -1
}

func spanLower(s string, q int, noHan bool) int {
	for q < len(s) {
		r, n := decodeRune(s, q)
		c := uclass(r)
		if c&lowerMask == 0 || (noHan && c&clHan != 0) {
			break
		}
		q += n
	}
	return q
}

// o200kUpperThenLower matches [U]+[W]* contraction? at p.
func o200kUpperThenLower(s string, p int, noHan, contr bool) int {
	q := p
	for q < len(s) {
		r, n := decodeRune(s, q)
		c := uclass(r)
		if c&upperMask == 0 || (noHan && c&clHan != 0) {
			break
		}
		q += n
	}
	if q == p {
		return -1
	}
	return optContraction(s, spanLower(s, q, noHan), contr)
}

// matchO200K implements the gpt-oss (o200k) pattern and its relatives (Kimi-K2, Mistral Tekken).
func matchO200K(s string, i int, o o200kOpts) int {
	r, n := decodeRune(s, i)
	c := uclass(r)
	if o.han && c&clHan != 0 {
		return spanClass(s, i, clHan)
	}
	prefix := c&(clL|clN) == 0 && r != '\r' && r != '\n'
	if prefix {
		if e := o200kUpperLower(s, i+n, o.han, o.contractions); e > 0 {
			return e
		}
	}
	if e := o200kUpperLower(s, i, o.han, o.contractions); e > 0 {
		return e
	}
	if prefix {
		if e := o200kUpperThenLower(s, i+n, o.han, o.contractions); e > 0 {
			return e
		}
	}
	if e := o200kUpperThenLower(s, i, o.han, o.contractions); e > 0 {
		return e
	}
	if c&clN != 0 {
		return spanClassMax(s, i, clN, o.digits)
	}
	j := i
	if r == ' ' {
		j = i + 1
	}
	if e := spanNotClass(s, j, clSpace|clL|clN); e > j {
		return spanNewlines(s, e, o.slash)
	}
	if c&clSpace != 0 {
		return matchWS(s, i, true)
	}
	return -1
}

func matchDigits3(s string, i int) int {
	r, _ := decodeRune(s, i)
	if uclass(r)&clN == 0 {
		return -1
	}
	return spanClassMax(s, i, clN, 3)
}

func isDSCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

func matchDSCJK(s string, i int) int {
	e := i
	for e < len(s) {
		r, n := decodeRune(s, e)
		if !isDSCJK(r) {
			break
		}
		e += n
	}
	if e == i {
		return -1
	}
	return e
}

func isASCIIPunct(c byte) bool {
	return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~')
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// matchDSMain implements DeepSeek-V3's main split pattern.
func matchDSMain(s string, i int) int {
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		e := i + 1
		for e < len(s) && isASCIILetter(s[e]) {
			e++
		}
		return e
	}
	r, n := decodeRune(s, i)
	c := uclass(r)
	if c&(clL|clP|clS) == 0 && r != '\r' && r != '\n' {
		if e := spanClass(s, i+n, clL|clM); e > i+n {
			return e
		}
	}
	if c&(clL|clM) != 0 {
		return spanClass(s, i, clL|clM)
	}
	j := i
	if r == ' ' {
		j = i + 1
	}
	if e := spanClass(s, j, clP|clS); e > j {
		return spanNewlines(s, e, false)
	}
	if c&clSpace != 0 {
		return matchWS(s, i, true)
	}
	return -1
}
