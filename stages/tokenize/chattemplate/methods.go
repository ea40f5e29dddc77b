package chattemplate

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Python str, dict and list methods as the immutable sandbox exposes them.

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
)

func pyUpper(s string) string { return upperCaser.String(s) }
func pyLower(s string) string { return lowerCaser.String(s) }

// pyTitle is str.title(): a cased character after an uncased one is title-cased, others lowered.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteString(pyLower(string(r)))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = isCased(r)
	}
	return b.String()
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyCapitalize is str.capitalize(): first character title-cased, the rest lowered.
func pyCapitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + pyLower(s[n:])
}

func pyIsLower(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsLower(r) {
			cased = true
		}
	}
	return cased
}

func pyIsUpper(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsLower(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsUpper(r) {
			cased = true
		}
	}
	return cased
}

// pyStrip implements str.strip/lstrip/rstrip with an optional character set (nil: whitespace).
func pyStrip(s string, chars *string, left, right bool) string {
	f := pyIsSpace
	if chars != nil {
		set := *chars
		f = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s
}

// pySplitWS is str.split() / str.rsplit() without a separator.
func pySplitWS(s string, maxsplit int, fromRight bool) []string {
	fields := strings.FieldsFunc(s, pyIsSpace)
	if maxsplit < 0 || len(fields) <= maxsplit+1 {
		return fields
	}
	if !fromRight {
		// Re-scan to keep the remainder intact after maxsplit splits.
		var out []string
		rest := strings.TrimLeftFunc(s, pyIsSpace)
		for i := 0; i < maxsplit; i++ {
			j := strings.IndexFunc(rest, pyIsSpace)
			out = append(out, rest[:j])
			rest = strings.TrimLeftFunc(rest[j:], pyIsSpace)
		}
		return append(out, rest)
	}
	var out []string
	rest := strings.TrimRightFunc(s, pyIsSpace)
	for i := 0; i < maxsplit; i++ {
		j := strings.LastIndexFunc(rest, pyIsSpace)
		_, n := utf8.DecodeRuneInString(rest[j:])
		out = append([]string{rest[j+n:]}, out...)
		rest = strings.TrimRightFunc(rest[:j], pyIsSpace)
	}
	return append([]string{rest}, out...)
}

func pySplitSep(s, sep string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.Split(s, sep)
	}
	if !fromRight {
		return strings.SplitN(s, sep, maxsplit+1)
	}
	var out []string
	for i := 0; i < maxsplit; i++ {
		j := strings.LastIndex(s, sep)
		if j < 0 {
			break
		}
		out = append([]string{s[j+len(sep):]}, out...)
		s = s[:j]
	}
	return append([]string{s}, out...)
}

// pySplitlines is str.splitlines().
func pySplitlines(s string, keepends bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			end := i + n
			if r == '\r' && end < len(s) && s[end] == '\n' {
				end++
			}
			if keepends {
				out = append(out, s[start:end])
			} else {
				out = append(out, s[start:i])
			}
			start = end
			i = end
			continue
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func strList(ss []string) value {
	items := make([]value, len(ss))
	for i, s := range ss {
		items[i] = str(s)
	}
	return newList(items)
}

// params binds positional and keyword arguments to parameter names, Python style.
func params(fname string, args []value, kw map[string]value, names ...string) ([]value, error) {
	if len(args) > len(names) {
		return nil, rerr("TypeError: %s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	out := make([]value, len(names))
	for i := range out {
		out[i] = vUndef
	}
	copy(out, args)
	for k, v := range kw {
		found := false
		for i, n := range names {
			if n == k {
				if i < len(args) {
					return nil, rerr("TypeError: %s() got multiple values for argument '%s'", fname, k)
				}
				out[i] = v
				found = true
			}
		}
		if !found {
			return nil, rerr("TypeError: %s() got an unexpected keyword argument '%s'", fname, k)
		}
	}
	return out, nil
}

func optChars(fname string, v value) (*string, error) {
	switch {
	case v.IsUndefined() || v.IsNone():
		return nil, nil
	case v.IsString():
		s := v.AsString()
		return &s, nil
	}
	return nil, rerr("TypeError: %s arg must be None or str", fname)
}

func optInt(fname string, v value, def int64) (int64, error) {
	switch {
	case v.IsUndefined():
		return def, nil
	case isIntLike(v):
		return asInt(v), nil
	}
	return 0, rerr("TypeError: %s: '%s' object cannot be interpreted as an integer", fname, typeName(v))
}

func needStr(fname string, v value) (string, error) {
	if !v.IsString() {
		return "", rerr("TypeError: %s: must be str, not %s", fname, typeName(v))
	}
	return v.AsString(), nil
}

func stripMethod(name string, left, right bool) method {
	return func(recv value, args []value, kw map[string]value) (value, error) {
		p, err := params(name, args, kw, "chars")
		if err != nil {
			return vUndef, err
		}
		chars, err := optChars(name, p[0])
		if err != nil {
			return vUndef, err
		}
		return str(pyStrip(recv.AsString(), chars, left, right)), nil
	}
}

func splitMethod(name string, fromRight bool) method {
	return func(recv value, args []value, kw map[string]value) (value, error) {
		p, err := params(name, args, kw, "sep", "maxsplit")
		if err != nil {
			return vUndef, err
		}
		maxsplit, err := optInt(name, p[1], -1)
		if err != nil {
			return vUndef, err
		}
		sep, err := optChars(name, p[0])
		if err != nil {
			return vUndef, err
		}
		if sep == nil {
			return strList(pySplitWS(recv.AsString(), int(maxsplit), fromRight)), nil
		}
		if *sep == "" {
			return vUndef, rerr("ValueError: empty separator")
		}
		return strList(pySplitSep(recv.AsString(), *sep, int(maxsplit), fromRight)), nil
	}
}

func affixMethod(name string, suffix bool) method {
	return func(recv value, args []value, kw map[string]value) (value, error) {
		if len(args) != 1 || len(kw) > 0 {
			return vUndef, rerr("%s() with start/end arguments is not supported", name)
		}
		s := recv.AsString()
		var cands []value
		switch {
		case args[0].IsString():
			cands = args[:1]
		case args[0].IsList():
			cands = args[0].AsList().Items
		default:
			return vUndef, rerr("TypeError: %s first arg must be str or a tuple of str, not %s", name, typeName(args[0]))
		}
		for _, c := range cands {
			a, err := needStr(name, c)
			if err != nil {
				return vUndef, err
			}
			if (suffix && strings.HasSuffix(s, a)) || (!suffix && strings.HasPrefix(s, a)) {
				return vTrue, nil
			}
		}
		return vFalse, nil
	}
}

func runeIndex(s string, byteIdx int) int64 {
	if byteIdx < 0 {
		return -1
	}
	return int64(utf8.RuneCountInString(s[:byteIdx]))
}

func findMethod(name string, last, raise bool) method {
	return func(recv value, args []value, kw map[string]value) (value, error) {
		if len(args) != 1 || len(kw) > 0 {
			return vUndef, rerr("%s() with start/end arguments is not supported", name)
		}
		sub, err := needStr(name, args[0])
		if err != nil {
			return vUndef, err
		}
		s := recv.AsString()
		i := strings.Index(s, sub)
		if last {
			i = strings.LastIndex(s, sub)
		}
		if i < 0 && raise {
			return vUndef, rerr("ValueError: substring not found")
		}
		return newInt(runeIndex(s, i)), nil
	}
}

func noArgs(name string, f func(string) value) method {
	return func(recv value, args []value, kw map[string]value) (value, error) {
		if len(args) > 0 || len(kw) > 0 {
			return vUndef, rerr("TypeError: str.%s() takes no arguments", name)
		}
		return f(recv.AsString()), nil
	}
}

func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

// strMethods are the str methods a template may call.
var strMethods = map[string]method{
	"strip":      stripMethod("strip", true, true),
	"lstrip":     stripMethod("lstrip", true, false),
	"rstrip":     stripMethod("rstrip", false, true),
	"split":      splitMethod("split", false),
	"rsplit":     splitMethod("rsplit", true),
	"startswith": affixMethod("startswith", false),
	"endswith":   affixMethod("endswith", true),
	"find":       findMethod("find", false, false),
	"rfind":      findMethod("rfind", true, false),
	"index":      findMethod("index", false, true),
	"rindex":     findMethod("rindex", true, true),
	"upper":      noArgs("upper", func(s string) value { return str(pyUpper(s)) }),
	"lower":      noArgs("lower", func(s string) value { return str(pyLower(s)) }),
	"title":      noArgs("title", func(s string) value { return str(pyTitle(s)) }),
	"capitalize": noArgs("capitalize", func(s string) value { return str(pyCapitalize(s)) }),
	"isdigit":    noArgs("isdigit", func(s string) value { return boolV(allRunes(s, unicode.IsDigit)) }),
	"isalpha":    noArgs("isalpha", func(s string) value { return boolV(allRunes(s, unicode.IsLetter)) }),
	"isspace":    noArgs("isspace", func(s string) value { return boolV(allRunes(s, pyIsSpace)) }),
	"islower":    noArgs("islower", func(s string) value { return boolV(pyIsLower(s)) }),
	"isupper":    noArgs("isupper", func(s string) value { return boolV(pyIsUpper(s)) }),
	"splitlines": strSplitlinesMethod,
	"replace":    strReplaceMethod,
	"count":      strCountMethod,
	"join":       strJoinMethod,
	"format":     strFormat,
}

// strFormat is str.format for plain replacement fields ({}, {0}, {name}); format specs and
// conversions are refused.
func strFormat(recv value, args []value, kw map[string]value) (value, error) {
	s := recv.AsString()
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return vUndef, rerr("ValueError: Single '{' encountered in format string")
			}
			field := s[i+1 : i+j]
			i += j
			if strings.ContainsAny(field, "!:[.") {
				return vUndef, rerr("str.format field %q is not supported", field)
			}
			var v value
			switch {
			case field == "":
				if auto >= len(args) {
					return vUndef, rerr("IndexError: Replacement index %d out of range", auto)
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				n := 0
				for _, d := range field {
					if d < '0' || d > '9' {
						return vUndef, rerr("str.format field %q is not supported", field)
					}
					n = n*10 + int(d-'0')
				}
				if n >= len(args) {
					return vUndef, rerr("IndexError: Replacement index %d out of range", n)
				}
				v = args[n]
			default:
				var ok bool
				if v, ok = kw[field]; !ok {
					return vUndef, rerr("KeyError: '%s'", field)
				}
			}
			t, err := pyStr(v)
			if err != nil {
				return vUndef, err
			}
			if v.IsUndefined() {
				t = ""
			}
			b.WriteString(t)
		case c == '}':
			return vUndef, rerr("ValueError: Single '}' encountered in format string")
		default:
			b.WriteByte(c)
		}
	}
	return str(b.String()), nil
}

var (
	unsafeDictMethods = map[string]bool{"clear": true, "pop": true, "popitem": true, "setdefault": true, "update": true}
	unsafeListMethods = map[string]bool{"append": true, "extend": true, "insert": true, "pop": true, "remove": true,
		"reverse": true, "sort": true, "clear": true}
)

// dictMethods are the dict methods a template may call.
var dictMethods = map[string]method{
	"get":    dictGetMethod,
	"items":  dictItemsMethod,
	"keys":   dictKeysMethod,
	"values": dictValuesMethod,
	"copy":   dictCopyMethod,
}

// listMethods are the list methods a template may call.
var listMethods = map[string]method{
	"index": listIndexMethod,
	"count": listCountMethod,
	"copy":  listCopyMethod,
}

func dictItems(v value) value {
	d := v.AsDict()
	out := make([]value, len(d.Keys))
	for i, k := range d.Keys {
		out[i] = newTuple([]value{str(k), d.Data[k]})
	}
	return newList(out)
}

// strSplitlinesMethod is str.splitlines.
func strSplitlinesMethod(recv value, args []value, kw map[string]value) (value, error) {
	p, err := params("splitlines", args, kw, "keepends")
	if err != nil {
		return vUndef, err
	}
	return strList(pySplitlines(recv.AsString(), p[0].IsTruthy())), nil
}

// strReplaceMethod is str.replace.
func strReplaceMethod(recv value, args []value, kw map[string]value) (value, error) {
	p, err := params("replace", args, kw, "old", "new", "count")
	if err != nil {
		return vUndef, err
	}
	old, err := needStr("replace", p[0])
	if err != nil {
		return vUndef, err
	}
	nw, err := needStr("replace", p[1])
	if err != nil {
		return vUndef, err
	}
	n, err := optInt("replace", p[2], -1)
	if err != nil {
		return vUndef, err
	}
	return str(strings.Replace(recv.AsString(), old, nw, int(n))), nil
}

// strCountMethod is str.count.
func strCountMethod(recv value, args []value, kw map[string]value) (value, error) {
	if len(args) != 1 || len(kw) > 0 {
		return vUndef, rerr("count() with start/end arguments is not supported")
	}
	sub, err := needStr("count", args[0])
	if err != nil {
		return vUndef, err
	}
	s := recv.AsString()
	if sub == "" {
		return newInt(int64(utf8.RuneCountInString(s)) + 1), nil
	}
	return newInt(int64(strings.Count(s, sub))), nil
}

// strJoinMethod is str.join.
func strJoinMethod(recv value, args []value, kw map[string]value) (value, error) {
	if len(args) != 1 || len(kw) > 0 {
		return vUndef, rerr("TypeError: join() takes exactly one argument")
	}
	items, err := iterate(args[0])
	if err != nil {
		return vUndef, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		if parts[i], err = needStr("join", it); err != nil {
			return vUndef, rerr("TypeError: sequence item %d: expected str instance, %s found", i, typeName(it))
		}
	}
	return str(strings.Join(parts, recv.AsString())), nil
}

// dictGetMethod is dict.get.
func dictGetMethod(recv value, args []value, kw map[string]value) (value, error) {
	if len(args) < 1 || len(args) > 2 || len(kw) > 0 {
		return vUndef, rerr("TypeError: get expected 1 or 2 arguments")
	}
	if args[0].IsString() {
		if v, ok := recv.AsDict().Get(args[0].AsString()); ok {
			return v, nil
		}
	}
	if len(args) == 2 {
		return args[1], nil
	}
	return vNone, nil
}

// dictItemsMethod is dict.items.
func dictItemsMethod(recv value, args []value, kw map[string]value) (value, error) {
	return dictItems(recv), nil
}

// dictKeysMethod is dict.keys.
func dictKeysMethod(recv value, args []value, kw map[string]value) (value, error) {
	items, _ := iterate(recv)
	return newList(items), nil
}

// dictValuesMethod is dict.values.
func dictValuesMethod(recv value, args []value, kw map[string]value) (value, error) {
	d := recv.AsDict()
	out := make([]value, len(d.Keys))
	for i, k := range d.Keys {
		out[i] = d.Data[k]
	}
	return newList(out), nil
}

// dictCopyMethod is dict.copy.
func dictCopyMethod(recv value, args []value, kw map[string]value) (value, error) {
	return dictFromArgs([]value{recv})
}

// listIndexMethod is list.index.
func listIndexMethod(recv value, args []value, kw map[string]value) (value, error) {
	if len(args) != 1 || len(kw) > 0 {
		return vUndef, rerr("list.index() with start/stop is not supported")
	}
	for i, v := range recv.AsList().Items {
		if pyEqual(v, args[0]) {
			return newInt(int64(i)), nil
		}
	}
	return vUndef, rerr("ValueError: value is not in list")
}

// listCountMethod is list.count.
func listCountMethod(recv value, args []value, kw map[string]value) (value, error) {
	if len(args) != 1 || len(kw) > 0 {
		return vUndef, rerr("TypeError: list.count() takes exactly one argument")
	}
	n := 0
	for _, v := range recv.AsList().Items {
		if pyEqual(v, args[0]) {
			n++
		}
	}
	return newInt(int64(n)), nil
}

// listCopyMethod is list.copy.
func listCopyMethod(recv value, args []value, kw map[string]value) (value, error) {
	return newList(append([]value(nil), recv.AsList().Items...)), nil
}
