package chattemplate

// Jinja2 3.1 tests: one function per test, registered by name in the table at the end of this file.
// A test missing from the table is refused when the template is parsed (or, where Jinja2 defers the
// error, when it is reached).

// testFunc is a Jinja2 test: `v is name(args...)`.
type testFunc = func(v value, args []value) (bool, error)

var tests map[string]testFunc

// compareTest is a comparison test (eq, lt, ...): `v is op(arg)`.
func compareTest(op string) testFunc {
	return func(v value, args []value) (bool, error) {
		if len(args) != 1 {
			return false, rerr("test needs one argument")
		}
		return compareOp(op, v, args[0])
	}
}

// kindTest is a test of the value alone, taking no arguments.
func kindTest(f func(value) bool) testFunc {
	return func(v value, args []value) (bool, error) {
		if len(args) > 0 {
			return false, rerr("test takes no arguments")
		}
		return f(v), nil
	}
}

func isDefined(v value) bool   { return !v.IsUndefined() }
func isUndefined(v value) bool { return v.IsUndefined() }
func isNoneValue(v value) bool { return v.IsNone() }
func isBoolean(v value) bool   { return v.IsBool() }
func isTrue(v value) bool      { return v.IsBool() && v.AsBool() }
func isFalse(v value) bool     { return v.IsBool() && !v.AsBool() }
func isInteger(v value) bool   { return v.IsInt() || isBig(v) }
func isFloat(v value) bool     { return v.IsFloat() }
func isNumeric(v value) bool   { return isNumber(v) || isBig(v) }
func isString(v value) bool    { return v.IsString() }
func isMapping(v value) bool   { return v.IsDict() }
func isEscaped(value) bool     { return false }

// isIterable is the iterable and sequence test: what iterate accepts.
func isIterable(v value) bool {
	return v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined()
}

func isLowerTest(v value) bool {
	s, _ := softStr(v)
	return pyIsLower(s)
}

func isUpperTest(v value) bool {
	s, _ := softStr(v)
	return pyIsUpper(s)
}

// testOdd is the odd test: v % 2 == 1.
func testOdd(v value, args []value) (bool, error) {
	r, err := binaryOp("%", v, newInt(2))
	return err == nil && pyEqual(r, newInt(1)), err
}

// testEven is the even test: v % 2 == 0.
func testEven(v value, args []value) (bool, error) {
	r, err := binaryOp("%", v, newInt(2))
	return err == nil && pyEqual(r, newInt(0)), err
}

// testDivisibleBy is the divisibleby test: v % n == 0.
func testDivisibleBy(v value, args []value) (bool, error) {
	if len(args) != 1 {
		return false, rerr("divisibleby needs one argument")
	}
	r, err := binaryOp("%", v, args[0])
	return err == nil && pyEqual(r, newInt(0)), err
}

// testSameAs is the sameas test: Python's `is`, for the values where CPython's identity is defined
// (None, booleans, small ints, the same list or dict).
func testSameAs(v value, args []value) (bool, error) {
	if len(args) != 1 {
		return false, rerr("sameas needs one argument")
	}
	o := args[0]
	switch {
	case v.IsNone() || v.IsBool() || o.IsNone() || o.IsBool():
		return v.IsNone() && o.IsNone() || v.IsBool() && o.IsBool() && v.AsBool() == o.AsBool(), nil
	case v.IsInt() && o.IsInt():
		return v.AsInt() == o.AsInt() && v.AsInt() >= -5 && v.AsInt() <= 256, nil
	case v.IsList() && o.IsList():
		return v.AsList() == o.AsList(), nil
	case v.IsDict() && o.IsDict():
		return v.AsDict() == o.AsDict(), nil
	}
	return false, rerr("sameas on %s values is not supported", typeName(v))
}

// testIn is the in test: `v is in(container)`.
func testIn(v value, args []value) (bool, error) {
	if len(args) != 1 {
		return false, rerr("in needs one argument")
	}
	return contains(args[0], v)
}

// testFilter is the filter test: whether a filter of that name exists.
func testFilter(v value, args []value) (bool, error) {
	if !v.IsString() {
		return false, nil
	}
	_, ok := filters[v.AsString()]
	return ok, nil
}

// testTest is the test test: whether a test of that name exists.
func testTest(v value, args []value) (bool, error) {
	if !v.IsString() {
		return false, nil
	}
	_, ok := tests[v.AsString()]
	return ok, nil
}

// The table is filled in init because the test test looks tests up in it.
func init() {
	tests = map[string]testFunc{
		"defined":   kindTest(isDefined),
		"undefined": kindTest(isUndefined),
		"none":      kindTest(isNoneValue),
		"boolean":   kindTest(isBoolean),
		"true":      kindTest(isTrue),
		"false":     kindTest(isFalse),
		"integer":   kindTest(isInteger),
		"float":     kindTest(isFloat),
		"number":    kindTest(isNumeric),
		"string":    kindTest(isString),
		"mapping":   kindTest(isMapping),
		"iterable":  kindTest(isIterable),
		"sequence":  kindTest(isIterable),
		"callable":  kindTest(isCallable),
		"escaped":   kindTest(isEscaped),
		"lower":     kindTest(isLowerTest),
		"upper":     kindTest(isUpperTest),

		"odd":         testOdd,
		"even":        testEven,
		"divisibleby": testDivisibleBy,
		"sameas":      testSameAs,
		"in":          testIn,
		"filter":      testFilter,
		"test":        testTest,

		"eq": compareTest("=="), "equalto": compareTest("=="), "==": compareTest("=="),
		"ne": compareTest("!="), "!=": compareTest("!="),
		"lt": compareTest("<"), "lessthan": compareTest("<"), "<": compareTest("<"),
		"le": compareTest("<="), "<=": compareTest("<="),
		"gt": compareTest(">"), "greaterthan": compareTest(">"), ">": compareTest(">"),
		"ge": compareTest(">="), ">=": compareTest(">="),
	}
}
