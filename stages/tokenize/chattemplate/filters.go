package chattemplate

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Jinja2 3.1 filters, with transformers' tojson: one function per filter, registered by name in
// the table at the end of this file. A filter missing from the table is refused when the template is
// parsed (or, where Jinja2 defers the error, when it is reached).

var filters map[string]fn

// softStr is Jinja2's soft_str: str() with Undefined as "".
func softStr(v value) (string, error) { return pyStr(v) }

func strFilter(name string, f func(string) string) fn {
	return func(a []value, kw map[string]value) (value, error) {
		if len(a) != 1 || len(kw) > 0 {
			return vUndef, rerr("filter %s takes no arguments", name)
		}
		s, err := softStr(a[0])
		return str(f(s)), err
	}
}

func length(v value) (int64, error) {
	switch {
	case v.IsString():
		return int64(utf8.RuneCountInString(v.AsString())), nil
	case v.IsList():
		return int64(len(v.AsList().Items)), nil
	case v.IsDict():
		return int64(len(v.AsDict().Keys)), nil
	case v.IsUndefined():
		return 0, nil
	}
	return 0, rerr("TypeError: object of type '%s' has no len()", typeName(v))
}

// attrGetter is Jinja2's make_attrgetter: dotted attribute paths, integer parts as indexes.
func attrGetter(attr value, def *value) (func(value) (value, error), error) {
	if attr.IsUndefined() || attr.IsNone() {
		return func(v value) (value, error) { return v, nil }, nil
	}
	var parts []value
	switch {
	case attr.IsString():
		for _, p := range strings.Split(attr.AsString(), ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil {
				parts = append(parts, newInt(n))
			} else {
				parts = append(parts, str(p))
			}
		}
	case isIntLike(attr):
		parts = []value{attr}
	default:
		return nil, rerr("attribute must be a string or integer")
	}
	return func(v value) (value, error) {
		for _, p := range parts {
			var err error
			if v, err = getItem(v, p, nil); err != nil {
				return vUndef, err
			}
			if v.IsUndefined() && def != nil {
				return *def, nil
			}
		}
		return v, nil
	}, nil
}

// sortKey lowercases strings unless case-sensitive (Jinja2's ignore_case).
func sortKey(v value, caseSensitive bool) value {
	if !caseSensitive && v.IsString() {
		return str(pyLower(v.AsString()))
	}
	return v
}

func sortValues(items []value, key func(value) (value, error), reverse bool) ([]value, error) {
	keys := make([]value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var sortErr error
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		c, err := pyCompare(a, b, "<")
		if err != nil && sortErr == nil {
			sortErr = err
		}
		return c < 0
	})
	if sortErr != nil {
		return nil, sortErr
	}
	out := make([]value, len(items))
	for i, k := range idx {
		out[i] = items[k]
	}
	return out, nil
}

func selectOrReject(name string, byAttr, keep bool) fn {
	return func(a []value, kw map[string]value) (value, error) {
		if len(kw) > 0 {
			return vUndef, rerr("filter %s takes no keyword arguments", name)
		}
		items, err := iterate(a[0])
		if err != nil {
			return vUndef, err
		}
		rest := a[1:]
		get := func(v value) (value, error) { return v, nil }
		if byAttr {
			if len(rest) == 0 {
				return vUndef, rerr("filter %s needs an attribute", name)
			}
			if get, err = attrGetter(rest[0], nil); err != nil {
				return vUndef, err
			}
			rest = rest[1:]
		}
		test := func(v value, _ []value) (bool, error) { return v.IsTruthy(), nil }
		if len(rest) > 0 {
			if !rest[0].IsString() {
				return vUndef, rerr("filter %s: test name must be a string", name)
			}
			t, ok := tests[rest[0].AsString()]
			if !ok {
				return vUndef, rerr("no test named '%s'", rest[0].AsString())
			}
			test = t
			rest = rest[1:]
		}
		var out []value
		for _, it := range items {
			v, err := get(it)
			if err != nil {
				return vUndef, err
			}
			ok, err := test(v, rest)
			if err != nil {
				return vUndef, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return newList(out), nil
	}
}

func minMax(name string, wantMax bool) fn {
	return func(a []value, kw map[string]value) (value, error) {
		p, err := params(name, a[1:], kw, "case_sensitive", "attribute")
		if err != nil {
			return vUndef, err
		}
		items, err := iterate(a[0])
		if err != nil {
			return vUndef, err
		}
		if len(items) == 0 {
			return vUndef, nil
		}
		get, err := attrGetter(p[1], nil)
		if err != nil {
			return vUndef, err
		}
		cs := p[0].IsTruthy()
		best := items[0]
		bk, err := get(best)
		if err != nil {
			return vUndef, err
		}
		bk = sortKey(bk, cs)
		for _, it := range items[1:] {
			k, err := get(it)
			if err != nil {
				return vUndef, err
			}
			k = sortKey(k, cs)
			c, err := pyCompare(k, bk, "<")
			if err != nil {
				return vUndef, err
			}
			if (wantMax && c > 0 && c != 2) || (!wantMax && c < 0) {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

var wordRe = regexp.MustCompile(`[\p{L}\p{N}_]+`)

var titleSplitRe = regexp.MustCompile(`([-\s({\[<]+)`)

// filterAbs is the abs filter: abs(x) of a number.
func filterAbs(a []value, kw map[string]value) (value, error) {
	v := a[0]
	switch {
	case isIntLike(v):
		n := asInt(v)
		if n < 0 {
			n = -n
		}
		return newInt(n), nil
	case v.IsFloat():
		return newFloat(math.Abs(v.AsFloat())), nil
	}
	return vUndef, rerr("TypeError: bad operand type for abs(): '%s'", typeName(v))
}

// filterLength is the length filter: len(x), 0 for Undefined (also count).
func filterLength(a []value, kw map[string]value) (value, error) {
	n, err := length(a[0])
	return newInt(n), err
}

// filterDefault is the default filter: the input, or default_value ("") when the input is Undefined or, with boolean=true, falsy (also d).
func filterDefault(a []value, kw map[string]value) (value, error) {
	p, err := params("default", a[1:], kw, "default_value", "boolean")
	if err != nil {
		return vUndef, err
	}
	def := p[0]
	if def.IsUndefined() {
		def = str("")
	}
	if a[0].IsUndefined() || (p[1].IsTruthy() && !a[0].IsTruthy()) {
		return def, nil
	}
	return a[0], nil
}

// filterDictsort is the dictsort filter: a mapping's (key, value) pairs sorted by key or value.
func filterDictsort(a []value, kw map[string]value) (value, error) {
	p, err := params("dictsort", a[1:], kw, "case_sensitive", "by", "reverse")
	if err != nil {
		return vUndef, err
	}
	if a[0].IsUndefined() {
		return vUndef, undefErr("dictsort")
	}
	if !a[0].IsDict() {
		return vUndef, rerr("TypeError: dictsort needs a mapping")
	}
	pos := 0
	if p[1].IsString() {
		switch p[1].AsString() {
		case "key":
		case "value":
			pos = 1
		default:
			return vUndef, rerr("FilterArgumentError: You can only sort by either \"key\" or \"value\"")
		}
	}
	cs := p[0].IsTruthy()
	items := dictItems(a[0]).AsList().Items
	out, err := sortValues(items, func(v value) (value, error) {
		return sortKey(v.AsList().Items[pos], cs), nil
	}, p[2].IsTruthy())
	return newList(out), err
}

// filterFirst is the first filter: the first item, Undefined for an empty sequence.
func filterFirst(a []value, kw map[string]value) (value, error) {
	items, err := iterate(a[0])
	if err != nil || len(items) == 0 {
		return vUndef, err
	}
	return items[0], nil
}

// filterLast is the last filter: the last item, Undefined for an empty sequence.
func filterLast(a []value, kw map[string]value) (value, error) {
	items, err := iterate(a[0])
	if err != nil || len(items) == 0 {
		return vUndef, err
	}
	return items[len(items)-1], nil
}

// filterFloat is the float filter: float(x), or default (0.0) when the input does not parse.
func filterFloat(a []value, kw map[string]value) (value, error) {
	p, err := params("float", a[1:], kw, "default")
	if err != nil {
		return vUndef, err
	}
	def := p[0]
	if def.IsUndefined() {
		def = newFloat(0)
	}
	v := a[0]
	switch {
	case v.IsUndefined():
		return vUndef, undefErr("float()")
	case isNumber(v):
		return newFloat(asFloat(v)), nil
	case v.IsString():
		if f, ok := parsePyFloat(v.AsString()); ok {
			return newFloat(f), nil
		}
	}
	return def, nil
}

// filterInt is the int filter: int(x) (strings in the given base, floats truncated), or default (0) when it does not parse.
func filterInt(a []value, kw map[string]value) (value, error) {
	p, err := params("int", a[1:], kw, "default", "base")
	if err != nil {
		return vUndef, err
	}
	def := p[0]
	if def.IsUndefined() {
		def = newInt(0)
	}
	base, err := optInt("int", p[1], 10)
	if err != nil {
		return vUndef, err
	}
	v := a[0]
	switch {
	case v.IsUndefined():
		return vUndef, undefErr("int()")
	case isIntLike(v):
		return newInt(asInt(v)), nil
	case v.IsFloat():
		f := v.AsFloat()
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 9.2e18 {
			return def, nil
		}
		return newInt(int64(f)), nil
	case v.IsString():
		if n, ok := parsePyInt(v.AsString(), int(base)); ok {
			return newInt(n), nil
		}
		if f, ok := parsePyFloat(v.AsString()); ok && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < 9.2e18 {
			return newInt(int64(f)), nil
		}
	}
	return def, nil
}

// filterItems is the items filter: a mapping's (key, value) pairs; none for Undefined.
func filterItems(a []value, kw map[string]value) (value, error) {
	switch {
	case a[0].IsUndefined():
		return newList(nil), nil
	case a[0].IsDict():
		return dictItems(a[0]), nil
	}
	return vUndef, rerr("TypeError: Can only get item pairs from a mapping.")
}

// filterJoin is the join filter: the items (or an attribute of each) as strings, joined with the separator d.
func filterJoin(a []value, kw map[string]value) (value, error) {
	p, err := params("join", a[1:], kw, "d", "attribute")
	if err != nil {
		return vUndef, err
	}
	sep := ""
	if !p[0].IsUndefined() {
		if sep, err = softStr(p[0]); err != nil {
			return vUndef, err
		}
	}
	items, err := iterate(a[0])
	if err != nil {
		return vUndef, err
	}
	get, err := attrGetter(p[1], nil)
	if err != nil {
		return vUndef, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		v, err := get(it)
		if err != nil {
			return vUndef, err
		}
		if parts[i], err = softStr(v); err != nil {
			return vUndef, err
		}
	}
	return str(strings.Join(parts, sep)), nil
}

// filterList is the list filter: list(x).
func filterList(a []value, kw map[string]value) (value, error) {
	items, err := iterate(a[0])
	return newList(append([]value(nil), items...)), err
}

// filterMap is the map filter: a filter applied by name to every item, or an attribute (with an optional default) of each.
func filterMap(a []value, kw map[string]value) (value, error) {
	items, err := iterate(a[0])
	if err != nil {
		return vUndef, err
	}
	var f func(value) (value, error)
	if attr, ok := kw["attribute"]; ok {
		var def *value
		if d, ok := kw["default"]; ok {
			def = &d
		}
		if len(a) > 1 || len(kw) > 2 || (len(kw) == 2 && def == nil) {
			return vUndef, rerr("map(attribute=...) takes only attribute and default")
		}
		if f, err = attrGetter(attr, def); err != nil {
			return vUndef, err
		}
	} else {
		if len(a) < 2 || !a[1].IsString() {
			return vUndef, rerr("map requires a filter name or attribute=")
		}
		name := a[1].AsString()
		filt, ok := filters[name]
		if !ok {
			return vUndef, rerr("no filter named '%s'", name)
		}
		extra := a[2:]
		f = func(v value) (value, error) {
			return filt(append([]value{v}, extra...), kw)
		}
	}
	out := make([]value, len(items))
	for i, it := range items {
		if out[i], err = f(it); err != nil {
			return vUndef, err
		}
	}
	return newList(out), nil
}

// filterReplace is the replace filter: str.replace with an optional count.
func filterReplace(a []value, kw map[string]value) (value, error) {
	p, err := params("replace", a[1:], kw, "old", "new", "count")
	if err != nil {
		return vUndef, err
	}
	s, err := softStr(a[0])
	if err != nil {
		return vUndef, err
	}
	old, err := softStr(p[0])
	if err != nil {
		return vUndef, err
	}
	nw, err := softStr(p[1])
	if err != nil {
		return vUndef, err
	}
	n := int64(-1)
	if !p[2].IsUndefined() && !p[2].IsNone() {
		if n, err = optInt("replace", p[2], -1); err != nil {
			return vUndef, err
		}
	}
	return str(strings.Replace(s, old, nw, int(n))), nil
}

// filterReverse is the reverse filter: a string or a sequence reversed.
func filterReverse(a []value, kw map[string]value) (value, error) {
	if a[0].IsString() {
		r := []rune(a[0].AsString())
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return str(string(r)), nil
	}
	items, err := iterate(a[0])
	if err != nil {
		return vUndef, rerr("FilterArgumentError: argument must be iterable")
	}
	out := make([]value, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return newList(out), nil
}

// filterRound is the round filter: a number rounded with the common (half to even on the decimal value), ceil or floor method.
func filterRound(a []value, kw map[string]value) (value, error) {
	p, err := params("round", a[1:], kw, "precision", "method")
	if err != nil {
		return vUndef, err
	}
	prec, err := optInt("round", p[0], 0)
	if err != nil {
		return vUndef, err
	}
	m := "common"
	if p[1].IsString() {
		m = p[1].AsString()
	}
	if !isNumber(a[0]) {
		if a[0].IsUndefined() {
			return vUndef, undefErr("round")
		}
		return vUndef, rerr("TypeError: round needs a number")
	}
	x := asFloat(a[0])
	pow := math.Pow(10, float64(prec))
	switch m {
	case "common":
		// Python's round(): half to even on the decimal value.
		s := strconv.FormatFloat(x, 'f', int(max(prec, 0)), 64)
		if prec < 0 {
			s = strconv.FormatFloat(math.RoundToEven(x*pow)/pow, 'f', -1, 64)
		}
		f, _ := strconv.ParseFloat(s, 64)
		return newFloat(f), nil
	case "ceil":
		return newFloat(math.Ceil(x*pow) / pow), nil
	case "floor":
		return newFloat(math.Floor(x*pow) / pow), nil
	}
	return vUndef, rerr("FilterArgumentError: method must be common, ceil or floor")
}

// filterSafe is the safe filter: str(x); chat templates render without autoescape.
func filterSafe(a []value, kw map[string]value) (value, error) {
	s, err := softStr(a[0])
	return str(s), err
}

// filterSort is the sort filter: the items sorted (optionally by attribute), ignoring case unless case_sensitive.
func filterSort(a []value, kw map[string]value) (value, error) {
	p, err := params("sort", a[1:], kw, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return vUndef, err
	}
	items, err := iterate(a[0])
	if err != nil {
		return vUndef, err
	}
	get, err := attrGetter(p[2], nil)
	if err != nil {
		return vUndef, err
	}
	cs := p[1].IsTruthy()
	out, err := sortValues(items, func(v value) (value, error) {
		k, err := get(v)
		return sortKey(k, cs), err
	}, p[0].IsTruthy())
	return newList(out), err
}

// filterString is the string filter: str(x).
func filterString(a []value, kw map[string]value) (value, error) {
	s, err := softStr(a[0])
	return str(s), err
}

// filterSum is the sum filter: start (0) plus the items or an attribute of each.
func filterSum(a []value, kw map[string]value) (value, error) {
	p, err := params("sum", a[1:], kw, "attribute", "start")
	if err != nil {
		return vUndef, err
	}
	items, err := iterate(a[0])
	if err != nil {
		return vUndef, err
	}
	get, err := attrGetter(p[0], nil)
	if err != nil {
		return vUndef, err
	}
	total := p[1]
	if total.IsUndefined() {
		total = newInt(0)
	}
	for _, it := range items {
		v, err := get(it)
		if err != nil {
			return vUndef, err
		}
		if total, err = binaryOp("+", total, v); err != nil {
			return vUndef, err
		}
	}
	return total, nil
}

// filterTojson is the tojson filter: transformers' tojson: json.dumps with ensure_ascii, indent, separators and sort_keys.
func filterTojson(a []value, kw map[string]value) (value, error) {
	p, err := params("tojson", a[1:], kw, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return vUndef, err
	}
	o := jsonOptions{ensureASCII: p[0].IsTruthy(), sortKeys: p[3].IsTruthy(), itemSep: ", ", keySep: ": "}
	switch ind := p[1]; {
	case ind.IsUndefined() || ind.IsNone():
	case isIntLike(ind):
		s := strings.Repeat(" ", int(max(asInt(ind), 0)))
		o.indent = &s
	case ind.IsString():
		s := ind.AsString()
		o.indent = &s
	default:
		return vUndef, rerr("TypeError: tojson indent must be an int or a string")
	}
	if o.indent != nil {
		o.itemSep = ","
	}
	if sep := p[2]; !sep.IsUndefined() && !sep.IsNone() {
		if !sep.IsList() || len(sep.AsList().Items) != 2 || !sep.AsList().Items[0].IsString() || !sep.AsList().Items[1].IsString() {
			return vUndef, rerr("tojson separators must be two strings")
		}
		o.itemSep, o.keySep = sep.AsList().Items[0].AsString(), sep.AsList().Items[1].AsString()
	}
	s, err := pyJSONDumps(a[0], o)
	if err != nil {
		return vUndef, rerr("TypeError: %v", err)
	}
	return str(s), nil
}

// filterTrim is the trim filter: the input without whitespace, or the given characters, at either end.
func filterTrim(a []value, kw map[string]value) (value, error) {
	p, err := params("trim", a[1:], kw, "chars")
	if err != nil {
		return vUndef, err
	}
	s, err := softStr(a[0])
	if err != nil {
		return vUndef, err
	}
	chars, err := optChars("trim", p[0])
	if err != nil {
		return vUndef, err
	}
	return str(pyStrip(s, chars, true, true)), nil
}

// filterUnique is the unique filter: the first of each run of equal items (optionally by attribute), ignoring case unless case_sensitive.
func filterUnique(a []value, kw map[string]value) (value, error) {
	p, err := params("unique", a[1:], kw, "case_sensitive", "attribute")
	if err != nil {
		return vUndef, err
	}
	items, err := iterate(a[0])
	if err != nil {
		return vUndef, err
	}
	get, err := attrGetter(p[1], nil)
	if err != nil {
		return vUndef, err
	}
	var seen []value
	var out []value
next:
	for _, it := range items {
		k, err := get(it)
		if err != nil {
			return vUndef, err
		}
		k = sortKey(k, p[0].IsTruthy())
		for _, s := range seen {
			if pyEqual(s, k) {
				continue next
			}
		}
		seen = append(seen, k)
		out = append(out, it)
	}
	return newList(out), nil
}

// filterWordcount is the wordcount filter: the number of words.
func filterWordcount(a []value, kw map[string]value) (value, error) {
	s, err := softStr(a[0])
	return newInt(int64(len(wordRe.FindAllStringIndex(s, -1)))), err
}

// filterIndent is the indent filter: every line but the first indented (first=true: the first too; blank=true: blank lines too).
func filterIndent(a []value, kw map[string]value) (value, error) {
	p, err := params("indent", a[1:], kw, "width", "first", "blank")
	if err != nil {
		return vUndef, err
	}
	if a[0].IsUndefined() {
		return vUndef, undefErr("indent")
	}
	s, err := softStr(a[0])
	if err != nil {
		return vUndef, err
	}
	ind := "    "
	switch w := p[0]; {
	case w.IsUndefined():
	case w.IsString():
		ind = w.AsString()
	case isIntLike(w):
		ind = strings.Repeat(" ", int(max(asInt(w), 0)))
	default:
		return vUndef, rerr("TypeError: indent width must be an int or a string")
	}
	s += "\n"
	lines := pySplitlines(s, false)
	var rv string
	if p[2].IsTruthy() {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		rv = lines[0]
		if len(lines) > 1 {
			rest := make([]string, len(lines)-1)
			for i, l := range lines[1:] {
				if l != "" {
					l = ind + l
				}
				rest[i] = l
			}
			rv += "\n" + strings.Join(rest, "\n")
		}
	}
	if p[1].IsTruthy() {
		rv = ind + rv
	}
	return str(rv), nil
}

// filterFormat is the format filter: printf-style formatting, as Python's str % args.
func filterFormat(a []value, kw map[string]value) (value, error) {
	if len(kw) > 0 {
		return vUndef, rerr("format with keyword arguments is not supported")
	}
	f, err := softStr(a[0])
	if err != nil {
		return vUndef, err
	}
	s, err := printf(f, a[1:])
	return str(s), err
}

// jinjaTitle is the title filter's text rule: each word (split at spaces, dashes and brackets)
// capitalized.
func jinjaTitle(s string) string {
	var b strings.Builder
	idx := titleSplitRe.FindAllStringIndex(s, -1)
	prev := 0
	word := func(w string) {
		if w == "" {
			return
		}
		r, n := utf8.DecodeRuneInString(w)
		b.WriteString(pyUpper(string(r)) + pyLower(w[n:]))
	}
	for _, m := range idx {
		word(s[prev:m[0]])
		word(s[m[0]:m[1]])
		prev = m[1]
	}
	word(s[prev:])
	return b.String()
}

// The table is filled in init because the map filter looks filters up in it.
func init() {
	filters = map[string]fn{
		"abs":        filterAbs,
		"capitalize": strFilter("capitalize", pyCapitalize),
		"lower":      strFilter("lower", pyLower),
		"upper":      strFilter("upper", pyUpper),
		"title":      strFilter("title", jinjaTitle),
		"length":     filterLength,
		"default":    filterDefault,
		"dictsort":   filterDictsort,
		"escape":     strFilter("escape", htmlEscape),
		"first":      filterFirst,
		"last":       filterLast,
		"float":      filterFloat,
		"int":        filterInt,
		"items":      filterItems,
		"join":       filterJoin,
		"list":       filterList,
		"map":        filterMap,
		"max":        minMax("max", true),
		"min":        minMax("min", false),
		"select":     selectOrReject("select", false, true),
		"reject":     selectOrReject("reject", false, false),
		"selectattr": selectOrReject("selectattr", true, true),
		"rejectattr": selectOrReject("rejectattr", true, false),
		"replace":    filterReplace,
		"reverse":    filterReverse,
		"round":      filterRound,
		"safe":       filterSafe,
		"sort":       filterSort,
		"string":     filterString,
		"sum":        filterSum,
		"tojson":     filterTojson,
		"trim":       filterTrim,
		"unique":     filterUnique,
		"wordcount":  filterWordcount,
		"indent":     filterIndent,
		"format":     filterFormat,
		"count":      filterLength,
		"d":          filterDefault,
		"e":          strFilter("escape", htmlEscape),
	}
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

// parsePyFloat parses a string as Python's float() does (surrounding whitespace, underscores between
// digits, inf/nan spellings).
func parsePyFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "inf", "infinity", "nan":
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	if strings.Contains(s, "__") || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return 0, false
	}
	return f, true
}

// parsePyInt parses a string as Python's int(s, base) does: surrounding whitespace, a sign,
// underscores between digits, and a 0x/0o/0b prefix matching the base (any prefix with base 0).
func parsePyInt(s string, base int) (int64, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) > 2 && s[0] == '0' {
		pb := map[byte]int{'x': 16, 'o': 8, 'b': 2}[s[1]|0x20]
		if pb != 0 && (base == 0 || base == pb) {
			s, base = strings.TrimPrefix(s[2:], "_"), pb
		}
	}
	if base == 0 {
		base = 10
	}
	if s == "" || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), base, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
