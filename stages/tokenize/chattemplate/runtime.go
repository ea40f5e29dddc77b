package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// RaiseError is the error a template raises on purpose with raise_exception(message), for example to
// refuse a role it does not support. Python raises jinja2.TemplateError with the same message.
type RaiseError struct {
	// Message is the text passed to raise_exception.
	Message string
	// At names the message field the template read last before it raised ("messages[2].content, which is
	// None"); empty when it read none.
	At string
}

func (e *RaiseError) Error() string { return "chat template raised: " + e.Message + at(e.At) }

// RenderError is any other failure while rendering: what Python reports as UndefinedError,
// TypeError, SecurityError and the like.
type RenderError struct {
	// Msg describes the failure, starting with the Python exception name where there is one.
	Msg string
	// At names the message field the template read last before it failed ("messages[2].content, which is
	// None"), the likeliest culprit; empty when it read none.
	At string
}

func (e *RenderError) Error() string { return "chat template: " + e.Msg + at(e.At) }

func at(where string) string {
	if where == "" {
		return ""
	}
	return " (the last message field the template read: " + where + ")"
}

func rerr(format string, args ...any) error {
	return &RenderError{Msg: fmt.Sprintf(format, args...)}
}

func undefErr(what string) error {
	return rerr("UndefinedError: %s of an undefined value", what)
}

// state is what one render's runtime functions share.
type state struct {
	namespaces map[*dictValue]bool
	now        func() time.Time
	// lastMsg (1 + the message index) and lastField are the message field read last, for error messages.
	lastMsg   int
	lastField string
	lastValue value
}

// read records a field read from a dict, when the dict is one of the messages.
func (st *state) read(d *dictValue, field string, v value) {
	if d.Msg > 0 && st != nil {
		st.lastMsg, st.lastField, st.lastValue = d.Msg, field, v
	}
}

// lastRead names the message field read last: "messages[2].content, which is None", or "".
func (st *state) lastRead() string {
	if st.lastMsg == 0 {
		return ""
	}
	what := "a " + typeName(st.lastValue)
	switch {
	case st.lastValue.IsUndefined():
		what = "missing"
	case st.lastValue.IsNone():
		what = "None"
	}
	return fmt.Sprintf("messages[%d].%s, which is %s", st.lastMsg-1, st.lastField, what)
}

// isIntLike reports Python int (bool is an int subclass).
func isIntLike(v value) bool { return v.IsInt() || v.IsBool() }
func isNumber(v value) bool  { return v.IsInt() || v.IsBool() || v.IsFloat() }

func asInt(v value) int64 {
	if v.IsBool() {
		if v.AsBool() {
			return 1
		}
		return 0
	}
	return v.AsInt()
}

func asFloat(v value) float64 {
	if v.IsFloat() {
		return v.AsFloat()
	}
	return float64(asInt(v))
}

// builtins are the global functions Jinja2 and transformers give every template, keyed by name;
// namespace and strftime_now, which need the render's state, are added per render (renderBuiltins).
var builtins = map[string]value{}

func init() {
	for name, f := range map[string]fn{
		"range":           builtinRange,
		"raise_exception": builtinRaiseException,
		"dict":            builtinDict,
		"joiner":          builtinJoiner,
		"cycler":          builtinCycler,
		"lipsum":          builtinLipsum,
	} {
		builtins[name] = newCallable(name, f)
	}
	builtins["dict"].AsCallable().ordered = dictOrdered
}

// renderBuiltins returns the builtins of one render.
func (st *state) renderBuiltins() map[string]value {
	m := make(map[string]value, len(builtins)+2)
	for k, v := range builtins {
		m[k] = v
	}
	ns := newCallable("namespace", func(a []value, kw map[string]value) (value, error) {
		return st.namespace(a, nil, nil, kw)
	})
	ns.AsCallable().ordered = func(pos []value, names []string, vals []value) (value, error) {
		return st.namespace(pos, names, vals, nil)
	}
	m["namespace"] = ns
	m["strftime_now"] = newCallable("strftime_now", func(a []value, _ map[string]value) (value, error) {
		if len(a) != 1 || !a[0].IsString() {
			return vUndef, rerr("strftime_now() takes one format string")
		}
		s, err := strftime(st.now(), a[0].AsString())
		return str(s), err
	})
	return m
}

func builtinRaiseException(a []value, _ map[string]value) (value, error) {
	if len(a) != 1 {
		return vUndef, rerr("raise_exception() takes 1 argument")
	}
	s, err := pyStr(a[0])
	if err != nil {
		return vUndef, err
	}
	return vUndef, &RaiseError{Message: s}
}

func builtinLipsum([]value, map[string]value) (value, error) {
	return vUndef, rerr("lipsum() is not supported")
}

// dictOrdered is dict(...) called with keyword arguments, which become keys in the order written.
func dictOrdered(pos []value, names []string, vals []value) (value, error) {
	d, err := dictFromArgs(pos)
	if err != nil {
		return vUndef, err
	}
	for i, n := range names {
		d.AsDict().Set(n, vals[i])
	}
	return d, nil
}

func dictFromArgs(pos []value) (value, error) {
	d := newDict()
	if len(pos) > 1 {
		return vUndef, rerr("dict expected at most 1 argument, got %d", len(pos))
	}
	if len(pos) == 1 {
		src := pos[0]
		switch {
		case src.IsDict():
			for _, k := range src.AsDict().Keys {
				d.AsDict().Set(k, src.AsDict().Data[k])
			}
		default:
			items, err := iterate(src)
			if err != nil {
				return vUndef, err
			}
			for _, it := range items {
				kv, err := iterate(it)
				if err != nil || len(kv) != 2 || !kv[0].IsString() {
					return vUndef, rerr("dict() needs string-keyed pairs")
				}
				d.AsDict().Set(kv[0].AsString(), kv[1])
			}
		}
	}
	return d, nil
}

func builtinDict(a []value, kw map[string]value) (value, error) {
	d, err := dictFromArgs(a)
	if err != nil {
		return vUndef, err
	}
	if len(kw) > 1 {
		return vUndef, rerr("dict() with several keyword arguments must be called by name")
	}
	for k, v := range kw {
		d.AsDict().Set(k, v)
	}
	return d, nil
}

const maxRange = 100000 // jinja2.sandbox.MAX_RANGE

func builtinRange(a []value, kw map[string]value) (value, error) {
	if len(kw) > 0 {
		return vUndef, rerr("range() takes no keyword arguments")
	}
	for _, v := range a {
		if !isIntLike(v) {
			return vUndef, rerr("TypeError: '%s' object cannot be interpreted as an integer", typeName(v))
		}
	}
	var start, stop, step int64 = 0, 0, 1
	switch len(a) {
	case 1:
		stop = asInt(a[0])
	case 2:
		start, stop = asInt(a[0]), asInt(a[1])
	case 3:
		start, stop, step = asInt(a[0]), asInt(a[1]), asInt(a[2])
	default:
		return vUndef, rerr("range expected 1 to 3 arguments, got %d", len(a))
	}
	if step == 0 {
		return vUndef, rerr("ValueError: range() arg 3 must not be zero")
	}
	var items []value
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if len(items) >= maxRange {
			return vUndef, rerr("OverflowError: range too big, maximum size for range is %d", maxRange)
		}
		items = append(items, newInt(i))
	}
	return newList(items), nil
}

func builtinJoiner(a []value, kw map[string]value) (value, error) {
	sep := ", "
	if v, ok := kw["sep"]; ok {
		a = append(a, v)
	}
	if len(a) > 0 {
		s, err := pyStr(a[0])
		if err != nil {
			return vUndef, err
		}
		sep = s
	}
	used := false
	return newCallable("joiner", func([]value, map[string]value) (value, error) {
		if !used {
			used = true
			return str(""), nil
		}
		return str(sep), nil
	}), nil
}

func builtinCycler(a []value, _ map[string]value) (value, error) {
	if len(a) == 0 {
		return vUndef, rerr("at least one item has to be provided to cycler")
	}
	items := append([]value(nil), a...)
	pos := 0
	d := newDict()
	dd := d.AsDict()
	dd.Set("current", items[0])
	dd.Set("next", newCallable("cycler.next", func([]value, map[string]value) (value, error) {
		v := items[pos]
		pos = (pos + 1) % len(items)
		dd.Set("current", items[pos])
		return v, nil
	}))
	dd.Set("reset", newCallable("cycler.reset", func([]value, map[string]value) (value, error) {
		pos = 0
		dd.Set("current", items[0])
		return vNone, nil
	}))
	return d, nil
}

func (st *state) namespace(pos []value, names []string, vals []value, kw map[string]value) (value, error) {
	d, err := dictOrdered(pos, names, vals)
	if err != nil {
		return vUndef, err
	}
	for k, v := range kw {
		d.AsDict().Set(k, v)
	}
	if len(kw) > 1 {
		return vUndef, rerr("namespace() with several keyword arguments must be called by name")
	}
	st.namespaces[d.AsDict()] = true
	return d, nil
}

// iterate is Python iter() over a template value.
func iterate(v value) ([]value, error) {
	switch {
	case v.IsList():
		return v.AsList().Items, nil
	case v.IsDict():
		keys := v.AsDict().Keys
		out := make([]value, len(keys))
		for i, k := range keys {
			out[i] = str(k)
		}
		return out, nil
	case v.IsString():
		s := v.AsString()
		out := make([]value, 0, len(s))
		for _, r := range s {
			out = append(out, str(string(r)))
		}
		return out, nil
	case v.IsUndefined():
		return nil, nil
	}
	return nil, rerr("TypeError: '%s' object is not iterable", typeName(v))
}

func callValue(f value, args []value, kw map[string]value) (value, error) {
	if f.IsUndefined() {
		return vUndef, undefErr("call")
	}
	if !f.IsCallable() {
		return vUndef, rerr("TypeError: '%s' object is not callable", typeName(f))
	}
	return f.AsCallable().Fn(args, kw)
}

// getAttr is Jinja2's sandboxed environment.getattr: Python attributes (methods) first, then items.
func getAttr(obj value, name string, st *state) (value, error) {
	switch {
	case obj.IsUndefined():
		return vUndef, undefErr(fmt.Sprintf("attribute '%s'", name))
	case obj.IsDict():
		if st.objectLike(obj) && strings.HasPrefix(name, "_") {
			// The sandbox hides underscore attributes of objects (namespaces, loop).
			return vUndef, nil
		}
		if m, ok := dictMethods[name]; ok && !st.objectLike(obj) {
			return boundMethod(obj, name, m), nil
		}
		v, ok := obj.AsDict().Get(name)
		st.read(obj.AsDict(), name, v)
		if ok {
			return v, nil
		}
		if unsafeDictMethods[name] {
			return unsafeMethod("dict", name), nil
		}
		return vUndef, nil
	case obj.IsString():
		if m, ok := strMethods[name]; ok {
			return boundMethod(obj, name, m), nil
		}
	case obj.IsList():
		if m, ok := listMethods[name]; ok {
			return boundMethod(obj, name, m), nil
		}
		if unsafeListMethods[name] {
			return unsafeMethod("list", name), nil
		}
	}
	return vUndef, nil
}

// objectLike reports dicts that stand for Python objects rather than dicts: namespaces
// and the loop and cycler objects hold callables or plain attributes, never dict methods.
func (st *state) objectLike(obj value) bool {
	d := obj.AsDict()
	if st != nil && st.namespaces[d] {
		return true
	}
	if _, ok := d.Get("index0"); ok {
		if _, ok := d.Get("revindex0"); ok {
			return true
		}
	}
	return false
}

type method func(recv value, args []value, kw map[string]value) (value, error)

func boundMethod(recv value, name string, m method) value {
	return newCallable(typeName(recv)+"."+name, func(a []value, kw map[string]value) (value, error) {
		return m(recv, a, kw)
	})
}

func unsafeMethod(typ, name string) value {
	return newCallable(typ+"."+name, func([]value, map[string]value) (value, error) {
		return vUndef, rerr("SecurityError: access to attribute '%s' of '%s' object is unsafe", name, typ)
	})
}

func callAttr(obj value, name string, args []value, kw map[string]value, st *state) (value, error) {
	// Direct dispatch avoids allocating a bound method for the common case.
	switch {
	case obj.IsString():
		if m, ok := strMethods[name]; ok {
			return m(obj, args, kw)
		}
	case obj.IsDict():
		if m, ok := dictMethods[name]; ok && !st.objectLike(obj) {
			return m(obj, args, kw)
		}
	case obj.IsList():
		if m, ok := listMethods[name]; ok {
			return m(obj, args, kw)
		}
	}
	f, err := getAttr(obj, name, st)
	if err != nil {
		return vUndef, err
	}
	if f.IsUndefined() {
		return vUndef, rerr("UndefinedError: '%s' object has no attribute '%s'", typeName(obj), name)
	}
	return callValue(f, args, kw)
}

// getItem is Jinja2's sandboxed environment.getitem: obj[key], falling back to an attribute for a
// string key, else Undefined.
func getItem(obj, key value, st *state) (value, error) {
	if obj.IsUndefined() {
		return vUndef, undefErr("item access")
	}
	switch {
	case obj.IsDict():
		if key.IsString() {
			v, ok := obj.AsDict().Get(key.AsString())
			st.read(obj.AsDict(), key.AsString(), v)
			if ok {
				return v, nil
			}
		}
	case obj.IsList():
		if isIntLike(key) {
			items := obj.AsList().Items
			i := asInt(key)
			if i < 0 {
				i += int64(len(items))
			}
			if i >= 0 && i < int64(len(items)) {
				return items[i], nil
			}
			return vUndef, nil
		}
	case obj.IsString():
		if isIntLike(key) {
			s := obj.AsString()
			n := int64(utf8.RuneCountInString(s))
			i := asInt(key)
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				for _, r := range s {
					if i == 0 {
						return str(string(r)), nil
					}
					i--
				}
			}
			return vUndef, nil
		}
	}
	if key.IsString() {
		return getAttr(obj, key.AsString(), st)
	}
	return vUndef, nil
}

func sliceIndex(v value) (int64, bool, error) {
	switch {
	case v.IsNone():
		return 0, false, nil
	case isIntLike(v):
		return asInt(v), true, nil
	}
	return 0, false, errBadSlice
}

var errBadSlice = errors.New("slice indices must be integers or None")

// sliceValue is Python slicing of lists and strings; a slice Python cannot take yields Undefined, as
// Jinja2's getitem turns the TypeError into Undefined.
func sliceValue(obj, start, stop, step value) (value, error) {
	if obj.IsUndefined() {
		return vUndef, undefErr("slicing")
	}
	var n int64
	var runes []rune
	switch {
	case obj.IsList():
		n = int64(len(obj.AsList().Items))
	case obj.IsString():
		runes = []rune(obj.AsString())
		n = int64(len(runes))
	default:
		return vUndef, nil
	}
	st, hasStep, err := sliceIndex(step)
	if err != nil {
		return vUndef, nil
	}
	if !hasStep {
		st = 1
	}
	if st == 0 {
		return vUndef, rerr("ValueError: slice step cannot be zero")
	}
	lower, upper := int64(0), n
	if st < 0 {
		lower, upper = -1, n-1
	}
	adjust := func(v value, def int64) (int64, error) {
		i, ok, err := sliceIndex(v)
		if err != nil {
			return 0, err
		}
		if !ok {
			return def, nil
		}
		if i < 0 {
			i += n
			if i < lower {
				i = lower
			}
		} else if i > upper {
			i = upper
		}
		return i, nil
	}
	defStart, defStop := lower, upper
	if st < 0 {
		defStart, defStop = upper, lower
	}
	b, err := adjust(start, defStart)
	if err != nil {
		return vUndef, nil
	}
	e, err := adjust(stop, defStop)
	if err != nil {
		return vUndef, nil
	}
	var idx []int64
	for i := b; (st > 0 && i < e) || (st < 0 && i > e); i += st {
		idx = append(idx, i)
	}
	if obj.IsList() {
		items := obj.AsList().Items
		out := make([]value, len(idx))
		for k, i := range idx {
			out[k] = items[i]
		}
		return newList(out), nil
	}
	out := make([]rune, len(idx))
	for k, i := range idx {
		out[k] = runes[i]
	}
	return str(string(out)), nil
}

func unaryOp(op string, v value) (value, error) {
	if v.IsUndefined() {
		return vUndef, undefErr("unary " + op)
	}
	switch {
	case isIntLike(v):
		if op == "-" {
			if asInt(v) == math.MinInt64 {
				return vUndef, rerr("integer overflow")
			}
			return newInt(-asInt(v)), nil
		}
		return newInt(asInt(v)), nil
	case v.IsFloat():
		if op == "-" {
			return newFloat(-v.AsFloat()), nil
		}
		return v, nil
	}
	return vUndef, rerr("TypeError: bad operand type for unary %s: '%s'", op, typeName(v))
}

func binaryOp(op string, a, b value) (value, error) {
	if a.IsUndefined() || b.IsUndefined() {
		return vUndef, undefErr("operator " + op)
	}
	if isNumber(a) && isNumber(b) {
		return numericOp(op, a, b)
	}
	switch op {
	case "+":
		switch {
		case a.IsString() && b.IsString():
			return str(a.AsString() + b.AsString()), nil
		case a.IsList() && b.IsList():
			items := append(append([]value(nil), a.AsList().Items...), b.AsList().Items...)
			return newList(items), nil
		}
	case "*":
		if isIntLike(b) && (a.IsString() || a.IsList()) {
			return repeat(a, asInt(b))
		}
		if isIntLike(a) && (b.IsString() || b.IsList()) {
			return repeat(b, asInt(a))
		}
	case "%":
		if a.IsString() {
			args := []value{b}
			if isTuple(b) {
				args = b.AsList().Items
			}
			if b.IsDict() {
				return vUndef, rerr("printf-style formatting with a mapping is not supported")
			}
			s, err := printf(a.AsString(), args)
			return str(s), err
		}
	}
	return vUndef, rerr("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func repeat(v value, n int64) (value, error) {
	if n < 0 {
		n = 0
	}
	if v.IsString() {
		if int64(len(v.AsString()))*n > 1<<26 {
			return vUndef, rerr("repeated string too large")
		}
		return str(strings.Repeat(v.AsString(), int(n))), nil
	}
	src := v.AsList().Items
	if int64(len(src))*n > 1<<22 {
		return vUndef, rerr("repeated list too large")
	}
	var out []value
	for i := int64(0); i < n; i++ {
		out = append(out, src...)
	}
	return newList(out), nil
}

func numericOp(op string, a, b value) (value, error) {
	if isIntLike(a) && isIntLike(b) && op != "/" {
		x, y := asInt(a), asInt(b)
		switch op {
		case "+":
			r := x + y
			if (r > x) != (y > 0) {
				return vUndef, rerr("integer overflow")
			}
			return newInt(r), nil
		case "-":
			r := x - y
			if (r < x) != (y > 0) {
				return vUndef, rerr("integer overflow")
			}
			return newInt(r), nil
		case "*":
			if x != 0 && (x*y/x != y || (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64)) {
				return vUndef, rerr("integer overflow")
			}
			return newInt(x * y), nil
		case "//", "%":
			if y == 0 {
				return vUndef, rerr("ZeroDivisionError: integer division or modulo by zero")
			}
			q, m := x/y, x%y
			if m != 0 && (m < 0) != (y < 0) {
				q--
				m += y
			}
			if op == "//" {
				return newInt(q), nil
			}
			return newInt(m), nil
		case "**":
			if y < 0 {
				return newFloat(math.Pow(float64(x), float64(y))), nil
			}
			r := int64(1)
			for i := int64(0); i < y; i++ {
				nr := r * x
				if x != 0 && nr/x != r {
					return vUndef, rerr("integer overflow")
				}
				r = nr
				if r == 0 || r == 1 && x == 1 {
					break
				}
			}
			return newInt(r), nil
		}
	}
	x, y := asFloat(a), asFloat(b)
	switch op {
	case "+":
		return newFloat(x + y), nil
	case "-":
		return newFloat(x - y), nil
	case "*":
		return newFloat(x * y), nil
	case "/":
		if y == 0 {
			return vUndef, rerr("ZeroDivisionError: division by zero")
		}
		return newFloat(x / y), nil
	case "//":
		if y == 0 {
			return vUndef, rerr("ZeroDivisionError: float floor division by zero")
		}
		return newFloat(math.Floor(x / y)), nil
	case "%":
		if y == 0 {
			return vUndef, rerr("ZeroDivisionError: float modulo")
		}
		m := math.Mod(x, y)
		if m != 0 && (m < 0) != (y < 0) {
			m += y
		}
		return newFloat(m), nil
	case "**":
		return newFloat(math.Pow(x, y)), nil
	}
	return vUndef, rerr("unknown operator %s", op)
}

// pyEqual is Python ==, with Jinja2's Undefined equal only to Undefined.
func pyEqual(a, b value) bool {
	switch {
	case a.IsUndefined() || b.IsUndefined():
		return a.IsUndefined() && b.IsUndefined()
	case isBig(a) || isBig(b):
		x, okA := bigInt(a)
		y, okB := bigInt(b)
		return okA && okB && x == y
	case isNumber(a) && isNumber(b):
		if isIntLike(a) && isIntLike(b) {
			return asInt(a) == asInt(b)
		}
		return asFloat(a) == asFloat(b)
	case a.IsNone() || b.IsNone():
		return a.IsNone() && b.IsNone()
	case a.IsString() && b.IsString():
		return a.AsString() == b.AsString()
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		if len(x) != len(y) || isTuple(a) != isTuple(b) {
			return false
		}
		for i := range x {
			if !pyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case a.IsDict() && b.IsDict():
		x, y := a.AsDict(), b.AsDict()
		if x == y {
			return true
		}
		if len(x.Keys) != len(y.Keys) {
			return false
		}
		for _, k := range x.Keys {
			v, ok := y.Get(k)
			if !ok || !pyEqual(x.Data[k], v) {
				return false
			}
		}
		return true
	}
	return false
}

// pyCompare orders a and b as Python's < does, or fails with Python's TypeError.
func pyCompare(a, b value, op string) (int, error) {
	switch {
	case a.IsUndefined() || b.IsUndefined():
		return 0, undefErr("comparison")
	case isNumber(a) && isNumber(b):
		if isIntLike(a) && isIntLike(b) {
			x, y := asInt(a), asInt(b)
			switch {
			case x < y:
				return -1, nil
			case x > y:
				return 1, nil
			}
			return 0, nil
		}
		x, y := asFloat(a), asFloat(b)
		switch {
		case x < y:
			return -1, nil
		case x > y:
			return 1, nil
		case x == y:
			return 0, nil
		}
		return 2, nil // NaN: every comparison is false
	case a.IsString() && b.IsString():
		return strings.Compare(a.AsString(), b.AsString()), nil
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		for i := 0; i < len(x) && i < len(y); i++ {
			if pyEqual(x[i], y[i]) {
				continue
			}
			return pyCompare(x[i], y[i], op)
		}
		switch {
		case len(x) < len(y):
			return -1, nil
		case len(x) > len(y):
			return 1, nil
		}
		return 0, nil
	}
	return 0, rerr("TypeError: '%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
}

func contains(container, item value) (bool, error) {
	switch {
	case container.IsString():
		if !item.IsString() {
			if item.IsUndefined() {
				return false, undefErr("'in'")
			}
			return false, rerr("TypeError: 'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(container.AsString(), item.AsString()), nil
	case container.IsList():
		for _, v := range container.AsList().Items {
			if pyEqual(v, item) {
				return true, nil
			}
		}
		return false, nil
	case container.IsDict():
		if item.IsList() || item.IsDict() {
			return false, rerr("TypeError: unhashable type: '%s'", typeName(item))
		}
		if item.IsString() {
			return container.AsDict().Has(item.AsString()), nil
		}
		return false, nil
	case container.IsUndefined():
		return false, nil
	}
	return false, rerr("TypeError: argument of type '%s' is not iterable", typeName(container))
}

func compareOp(op string, a, b value) (bool, error) {
	switch op {
	case "==":
		return pyEqual(a, b), nil
	case "!=":
		return !pyEqual(a, b), nil
	case "in":
		return contains(b, a)
	case "not in":
		ok, err := contains(b, a)
		return !ok, err
	}
	c, err := pyCompare(a, b, op)
	if err != nil || c == 2 {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

var (
	weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months   = []string{"January", "February", "March", "April", "May", "June", "July", "August",
		"September", "October", "November", "December"}
)

// strftime formats t as C strftime (glibc) does for the directives chat templates use.
func strftime(t time.Time, format string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if pad {
				fmt.Fprintf(&b, "%2d", t.Day())
			} else {
				fmt.Fprintf(&b, "%d", t.Day())
			}
		case 'j':
			num(t.YearDay(), 3)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'A':
			b.WriteString(weekdays[t.Weekday()])
		case 'a':
			b.WriteString(weekdays[t.Weekday()][:3])
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			fmt.Fprintf(&b, "%d-%02d-%02d", t.Year(), t.Month(), t.Day())
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case '%':
			b.WriteByte('%')
		default:
			return "", rerr("strftime directive %%%c is not supported", format[i])
		}
	}
	return b.String(), nil
}
