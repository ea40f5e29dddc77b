package chattemplate

import (
	"runtime"
	"sync"
	"weak"

	"github.com/ardanlabs/jinja"
)

// The target engine has lists but no tuples. Python prints tuples differently ((1, 2) rather than
// [1, 2]), and tuples reach output through dict.items(), |items, |dictsort and tuple literals, so
// lists created as tuples are remembered here, weakly, for as long as they live.

var tuples sync.Map // weak.Pointer[jinja.List] -> struct{}

// newTuple returns a list value that prints as a Python tuple.
func newTuple(items []jinja.Value) jinja.Value {
	v := jinja.NewList(items)
	p := v.AsList()
	wp := weak.Make(p)
	tuples.Store(wp, struct{}{})
	runtime.AddCleanup(p, func(wp weak.Pointer[jinja.List]) { tuples.Delete(wp) }, wp)
	return v
}

// isTuple reports whether a list value was created as a tuple.
func isTuple(v jinja.Value) bool {
	if !v.IsList() {
		return false
	}
	_, ok := tuples.Load(weak.Make(v.AsList()))
	return ok
}
