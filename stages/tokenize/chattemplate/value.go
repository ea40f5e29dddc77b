package chattemplate

import "math"

// value is one template value: what a Python object is to Jinja2. The kinds are those JSON-like chat
// template data and the runtime produce: Undefined, None, bool, int (int64, or an integer beyond
// int64 carried by its decimal digits, as json.loads keeps every digit), float, str, list (or tuple),
// dict (insertion-ordered, string keys) and callables (macros, builtins, bound methods).
//
// A value is small and passed by copy; lists and dicts are shared by reference, as in Python.
type value struct {
	k   kind
	n   int64  // bool (0 or 1), int, or the bits of a float
	s   string // str, or the digits of a big int
	ref any    // *listValue, *dictValue or *callableValue
}

type kind uint8

const (
	kindUndefined kind = iota // the zero value
	kindNone
	kindBool
	kindInt
	kindBigInt
	kindFloat
	kindString
	kindList
	kindDict
	kindCallable
)

// listValue is a Python list, or a tuple when tuple is set (tuples print as (1, 2) and compare unequal
// to lists).
type listValue struct {
	Items []value
	tuple bool
}

// dictValue is a Python dict with string keys in insertion order.
type dictValue struct {
	Keys []string
	Data map[string]value
	// Msg is 1 + the index of the message this dict is in Render's messages; 0 for any other dict.
	Msg int
}

// Get returns the value of key and whether it is present.
func (d *dictValue) Get(key string) (value, bool) {
	v, ok := d.Data[key]
	return v, ok
}

// Set inserts or replaces key; a new key goes last.
func (d *dictValue) Set(key string, v value) {
	if _, ok := d.Data[key]; !ok {
		d.Keys = append(d.Keys, key)
	}
	d.Data[key] = v
}

// Has reports whether key is present.
func (d *dictValue) Has(key string) bool {
	_, ok := d.Data[key]
	return ok
}

// callableValue is a function a template can call: a macro, a builtin or a bound method.
type callableValue struct {
	Name string
	Fn   fn
	// ordered, when set, is called instead of Fn for calls with keyword arguments, with the keywords
	// in the order written (dict(a=1, b=2) and namespace(...) keep it as key order).
	ordered func(pos []value, names []string, vals []value) (value, error)
}

// fn is the signature of every callable: positional and keyword arguments.
type fn = func(args []value, kw map[string]value) (value, error)

var (
	vUndef = value{}
	vNone  = value{k: kindNone}
	vTrue  = value{k: kindBool, n: 1}
	vFalse = value{k: kindBool}
)

func boolV(b bool) value {
	if b {
		return vTrue
	}
	return vFalse
}

func newInt(i int64) value     { return value{k: kindInt, n: i} }
func newFloat(f float64) value { return value{k: kindFloat, n: int64(math.Float64bits(f))} }
func str(s string) value       { return value{k: kindString, s: s} }

func newList(items []value) value { return value{k: kindList, ref: &listValue{Items: items}} }

// newTuple returns a list value that prints and compares as a Python tuple.
func newTuple(items []value) value {
	return value{k: kindList, ref: &listValue{Items: items, tuple: true}}
}

func newDict() value { return value{k: kindDict, ref: &dictValue{Data: map[string]value{}}} }

func newCallable(name string, f fn) value {
	return value{k: kindCallable, ref: &callableValue{Name: name, Fn: f}}
}

// newBigInt returns the value of a decimal integer literal outside int64 (digits as json.loads reads
// them: an optional minus sign, no leading zeros). It prints, converts to JSON, compares equal and
// passes the integer and number tests as Python's int does; arithmetic and ordering on it fail with
// an error rather than giving a different answer.
func newBigInt(digits string) value { return value{k: kindBigInt, s: digits} }

// The Is methods test the kind; the As methods return the payload of a value known to be of that kind.

func (v value) IsUndefined() bool { return v.k == kindUndefined }
func (v value) IsNone() bool      { return v.k == kindNone }
func (v value) IsBool() bool      { return v.k == kindBool }
func (v value) IsInt() bool       { return v.k == kindInt }
func (v value) IsFloat() bool     { return v.k == kindFloat }
func (v value) IsString() bool    { return v.k == kindString }
func (v value) IsList() bool      { return v.k == kindList }
func (v value) IsDict() bool      { return v.k == kindDict }
func (v value) IsCallable() bool  { return v.k == kindCallable }

func (v value) AsBool() bool               { return v.n != 0 }
func (v value) AsInt() int64               { return v.n }
func (v value) AsFloat() float64           { return math.Float64frombits(uint64(v.n)) }
func (v value) AsString() string           { return v.s }
func (v value) AsList() *listValue         { return v.ref.(*listValue) }
func (v value) AsDict() *dictValue         { return v.ref.(*dictValue) }
func (v value) AsCallable() *callableValue { return v.ref.(*callableValue) }

// IsTruthy is Python's bool(v), with Undefined false.
func (v value) IsTruthy() bool {
	switch v.k {
	case kindBool, kindInt:
		return v.n != 0
	case kindBigInt, kindCallable:
		return true
	case kindFloat:
		return v.AsFloat() != 0
	case kindString:
		return v.s != ""
	case kindList:
		return len(v.AsList().Items) > 0
	case kindDict:
		return len(v.AsDict().Keys) > 0
	}
	return false
}

// bigInt returns the digits of a value made by newBigInt.
func bigInt(v value) (string, bool) { return v.s, v.k == kindBigInt }

func isBig(v value) bool { return v.k == kindBigInt }

// isTuple reports whether a list value was created as a tuple.
func isTuple(v value) bool { return v.k == kindList && v.AsList().tuple }

// isCallable is the callable test.
func isCallable(v value) bool { return v.k == kindCallable }
