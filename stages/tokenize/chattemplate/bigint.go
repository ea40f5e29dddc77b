package chattemplate

import (
	"strings"

	"github.com/ardanlabs/jinja"
)

// Python integers have no size limit and json.loads keeps every digit, so tool-call arguments and
// tool schemas may hold integers beyond int64. The target engine has only int64, so such an integer
// is carried as a callable value whose name holds its decimal digits: it prints, converts to JSON,
// compares equal and passes the integer/number tests as Python's int does. Arithmetic and ordering
// on it fail with an error rather than giving a different answer.

const bigIntPrefix = "\x00bigint:"

// newBigInt returns the value of a decimal integer literal outside int64 (digits as json.loads reads
// them: an optional minus sign, no leading zeros).
func newBigInt(digits string) jinja.Value {
	return jinja.NewCallable(bigIntPrefix+digits, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		return jinja.Undefined(), rerr("TypeError: 'int' object is not callable")
	})
}

// bigInt returns the digits of a value made by newBigInt.
func bigInt(v jinja.Value) (string, bool) {
	if !v.IsCallable() {
		return "", false
	}
	return strings.CutPrefix(v.AsCallable().Name, bigIntPrefix)
}

// isCallable is the callable test: true for functions, false for big integers.
func isCallable(v jinja.Value) bool {
	_, big := bigInt(v)
	return v.IsCallable() && !big
}

func isBig(v jinja.Value) bool {
	_, ok := bigInt(v)
	return ok
}
