package chattemplate

import (
	"strings"
)

// The evaluator walks the statement tree (tree.go) with Jinja2's scoping: the template's variables
// form the root scope; the body of each loop iteration, loop else, macro call, caller, set block,
// filter block and generation block runs in a scope of its own, so what it assigns is gone when it
// ends; only an if shares the scope it is in. Every expression operation calls the Python-semantics runtime (runtime.go,
// filters.go, methods.go).

// scope holds the variables one frame assigns; lookups fall back to the enclosing frames.
type scope struct {
	parent *scope
	names  []string
	vals   []value
}

func (s *scope) lookup(name string) (value, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		for i, n := range sc.names {
			if n == name {
				return sc.vals[i], true
			}
		}
	}
	return vUndef, false
}

func (s *scope) set(name string, v value) {
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

// control says how a statement list ended: normally, or by break or continue.
type control int

const (
	ctlNone control = iota
	ctlBreak
	ctlContinue
)

// renderer is one render in progress.
type renderer struct {
	st       *state
	out      *strings.Builder
	builtins map[string]value // the render's builtins: the static ones and those bound to st
}

// lookup resolves a name: the scopes, then the builtins; an unknown name is Undefined.
func (r *renderer) lookup(sc *scope, name string) value {
	if v, ok := sc.lookup(name); ok {
		return v
	}
	if v, ok := r.builtins[name]; ok {
		return v
	}
	return vUndef
}

// capture runs body in sc and returns what it printed.
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	_, err := r.exec(body, sc)
	r.out = saved
	return b.String(), err
}

func (r *renderer) exec(nodes []node, sc *scope) (control, error) {
	for _, n := range nodes {
		var ctl control
		var err error
		switch x := n.(type) {
		case *textNode:
			r.out.WriteString(x.text)
		case *outputNode:
			err = r.print(x.e, sc)
		case *ifNode:
			ctl, err = r.execIf(x, sc)
		case *forNode:
			err = r.execFor(x, sc)
		case *setNode:
			err = r.execSet(x, sc)
		case *setBlockNode:
			err = r.execSetBlock(x, sc)
		case *macroNode:
			sc.set(x.name, r.macro(x, sc))
		case *callBlockNode:
			err = r.execCallBlock(x, sc)
		case *filterBlockNode:
			var s string
			if s, err = r.capture(x.body, &scope{parent: sc}); err == nil {
				var v value
				if v, err = r.evalChain(x.filter, sc, str(s)); err == nil {
					err = r.write(v)
				}
			}
		case *generationNode:
			_, err = r.exec(x.body, &scope{parent: sc})
		case *breakNode:
			return ctlBreak, nil
		case *continueNode:
			return ctlContinue, nil
		}
		if err != nil || ctl != ctlNone {
			return ctl, err
		}
	}
	return ctlNone, nil
}

func (r *renderer) write(v value) error {
	if v.IsString() {
		r.out.WriteString(v.AsString())
		return nil
	}
	s, err := pyStr(v)
	r.out.WriteString(s)
	return err
}

func (r *renderer) print(e expr, sc *scope) error {
	v, err := r.eval(e, sc)
	if err != nil {
		return err
	}
	return r.write(v)
}

func (r *renderer) execIf(n *ifNode, sc *scope) (control, error) {
	for _, br := range n.branches {
		if br.cond != nil {
			c, err := r.eval(br.cond, sc)
			if err != nil {
				return ctlNone, err
			}
			if !c.IsTruthy() {
				continue
			}
		}
		return r.exec(br.body, sc)
	}
	return ctlNone, nil
}

// bindTargets assigns one loop item to the loop's target names.
func bindTargets(sc *scope, targets []string, item value) {
	if len(targets) == 1 {
		sc.set(targets[0], item)
		return
	}
	parts := item.AsList().Items
	sc.set(targets[0], parts[0])
	sc.set(targets[1], parts[1])
}

func (r *renderer) execFor(n *forNode, sc *scope) error {
	seq, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(seq)
	if err != nil {
		return err
	}
	if len(n.targets) == 2 {
		pairs := make([]value, len(items))
		for i, it := range items {
			parts, err := iterate(it)
			if err != nil {
				return rerr("cannot unpack non-iterable %s object", typeName(it))
			}
			switch {
			case len(parts) < 2:
				return rerr("ValueError: not enough values to unpack (expected 2, got %d)", len(parts))
			case len(parts) > 2:
				return rerr("ValueError: too many values to unpack (expected 2)")
			}
			pairs[i] = newList(parts)
		}
		items = pairs
	}
	if n.filter != nil {
		var kept []value
		for _, it := range items {
			fs := &scope{parent: sc}
			bindTargets(fs, n.targets, it)
			ok, err := r.eval(n.filter, fs)
			if err != nil {
				return err
			}
			if ok.IsTruthy() {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		_, err := r.exec(n.els, &scope{parent: sc})
		return err
	}

	total := int64(len(items))
	idx := 0
	loop := newDict()
	ld := loop.AsDict()
	ld.Set("length", newInt(total))
	for _, k := range []string{"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"} {
		ld.Set(k, vUndef)
	}
	ld.Set("cycle", newCallable("loop.cycle", func(args []value, _ map[string]value) (value, error) {
		if len(args) == 0 {
			return vUndef, nil
		}
		return args[idx%len(args)], nil
	}))
	ld.Set("depth", newInt(1))
	ld.Set("depth0", newInt(0))
	var last []value
	first := true
	ld.Set("changed", newCallable("loop.changed", func(args []value, _ map[string]value) (value, error) {
		same := !first && len(args) == len(last)
		for i := 0; same && i < len(args); i++ {
			same = pyEqual(args[i], last[i])
		}
		first = false
		last = append(last[:0], args...)
		return boolV(!same), nil
	}))

	for i, it := range items {
		idx = i
		ld.Data["index"] = newInt(int64(i) + 1)
		ld.Data["index0"] = newInt(int64(i))
		ld.Data["revindex"] = newInt(total - int64(i))
		ld.Data["revindex0"] = newInt(total - int64(i) - 1)
		ld.Data["first"] = boolV(i == 0)
		ld.Data["last"] = boolV(i == len(items)-1)
		ld.Data["previtem"] = vUndef
		if i > 0 {
			ld.Data["previtem"] = items[i-1]
		}
		ld.Data["nextitem"] = vUndef
		if i < len(items)-1 {
			ld.Data["nextitem"] = items[i+1]
		}
		body := &scope{parent: sc, names: make([]string, 0, 4), vals: make([]value, 0, 4)}
		body.set("loop", loop)
		bindTargets(body, n.targets, it)
		ctl, err := r.exec(n.body, body)
		if err != nil {
			return err
		}
		if ctl == ctlBreak {
			break
		}
	}
	return nil
}

func (r *renderer) execSet(n *setNode, sc *scope) error {
	if n.ns == "" {
		v, err := r.eval(n.e, sc)
		if err != nil {
			return err
		}
		sc.set(n.name, v)
		return nil
	}
	ns := r.lookup(sc, n.ns)
	if !ns.IsDict() || !r.st.namespaces[ns.AsDict()] {
		return rerr("TemplateRuntimeError: cannot assign attribute on non-namespace object")
	}
	v, err := r.eval(n.e, sc)
	if err != nil {
		return err
	}
	ns.AsDict().Set(n.name, v)
	return nil
}

func (r *renderer) execSetBlock(n *setBlockNode, sc *scope) error {
	s, err := r.capture(n.body, &scope{parent: sc})
	if err != nil {
		return err
	}
	v := str(s)
	if n.filter != nil {
		if v, err = r.evalChain(n.filter, sc, v); err != nil {
			return err
		}
	}
	sc.set(n.name, v)
	return nil
}

// macro returns the callable a macro definition binds: its body runs in a scope of its own under
// the scope it was defined in.
func (r *renderer) macro(n *macroNode, def *scope) value {
	return newCallable(n.name, func(args []value, kw map[string]value) (value, error) {
		ms := &scope{parent: def}
		for i, p := range n.params {
			v := vUndef
			if i < len(args) {
				v = args[i]
			} else if a, ok := kw[p.name]; ok {
				v = a
			} else if p.hasDef {
				v = p.def
			}
			ms.set(p.name, v)
		}
		if caller, ok := kw["caller"]; ok {
			ms.set("caller", caller)
		}
		s, err := r.capture(n.body, ms)
		if err != nil {
			return vUndef, err
		}
		return str(s), nil
	})
}

func (r *renderer) execCallBlock(n *callBlockNode, sc *scope) error {
	caller := newCallable("caller", func(args []value, _ map[string]value) (value, error) {
		cs := &scope{parent: sc}
		for i, p := range n.params {
			if i < len(args) {
				cs.set(p, args[i])
			}
		}
		s, err := r.capture(n.body, cs)
		if err != nil {
			return vUndef, err
		}
		return str(s), nil
	})
	f, err := r.eval(n.call.fn, sc)
	if err != nil {
		return err
	}
	args, kw, err := r.args(n.call.args, n.call.kwargs, sc)
	if err != nil {
		return err
	}
	if kw == nil {
		kw = map[string]value{}
	}
	kw["caller"] = caller
	v, err := callValue(f, args, kw)
	if err != nil {
		return err
	}
	return r.write(v)
}

// args evaluates call arguments; kw is nil when there are no keyword arguments.
func (r *renderer) args(args []expr, kwargs []kwarg, sc *scope) ([]value, map[string]value, error) {
	var pos []value
	if len(args) > 0 {
		pos = make([]value, len(args))
		for i, a := range args {
			v, err := r.eval(a, sc)
			if err != nil {
				return nil, nil, err
			}
			pos[i] = v
		}
	}
	var kw map[string]value
	if len(kwargs) > 0 {
		kw = make(map[string]value, len(kwargs))
		for _, k := range kwargs {
			v, err := r.eval(k.val, sc)
			if err != nil {
				return nil, nil, err
			}
			kw[k.name] = v
		}
	}
	return pos, kw, nil
}

// evalChain evaluates a filter chain whose head (a filterExpr with no node) takes input.
func (r *renderer) evalChain(e expr, sc *scope, input value) (value, error) {
	f, ok := e.(*filterExpr)
	if !ok {
		return r.eval(e, sc)
	}
	return r.applyFilter(f, sc, &input)
}

// applyFilter evaluates f; input, when not nil, is what the head of the chain filters.
func (r *renderer) applyFilter(f *filterExpr, sc *scope, input *value) (value, error) {
	var in value
	var err error
	switch inner := f.node.(type) {
	case nil:
		if input != nil {
			in = *input
		}
	case *filterExpr:
		in, err = r.applyFilter(inner, sc, input)
	default:
		in, err = r.eval(inner, sc)
	}
	if err != nil {
		return vUndef, err
	}
	args := make([]value, 1, 1+len(f.args))
	args[0] = in
	for _, a := range f.args {
		v, err := r.eval(a, sc)
		if err != nil {
			return vUndef, err
		}
		args = append(args, v)
	}
	var kw map[string]value
	if len(f.kwargs) > 0 {
		kw = make(map[string]value, len(f.kwargs))
		for _, k := range f.kwargs {
			v, err := r.eval(k.val, sc)
			if err != nil {
				return vUndef, err
			}
			kw[k.name] = v
		}
	}
	return f.fn(args, kw)
}

// eval evaluates one expression with Python and Jinja2 semantics.
func (r *renderer) eval(e expr, sc *scope) (value, error) {
	switch x := e.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		return r.lookup(sc, x.name), nil
	case *getattrExpr:
		o, err := r.eval(x.obj, sc)
		if err != nil {
			return vUndef, err
		}
		return getAttr(o, x.attr, r.st)
	case *getitemExpr:
		o, err := r.eval(x.obj, sc)
		if err != nil {
			return vUndef, err
		}
		k, err := r.eval(x.key, sc)
		if err != nil {
			return vUndef, err
		}
		return getItem(o, k, r.st)
	case *sliceExpr:
		var parts [4]value
		for i, p := range []expr{x.obj, x.start, x.stop, x.step} {
			if p == nil {
				parts[i] = vNone
				continue
			}
			v, err := r.eval(p, sc)
			if err != nil {
				return vUndef, err
			}
			parts[i] = v
		}
		return sliceValue(parts[0], parts[1], parts[2], parts[3])
	case *callExpr:
		return r.call(x, sc)
	case *filterExpr:
		return r.applyFilter(x, sc, nil)
	case *testExpr:
		v, err := r.eval(x.node, sc)
		if err != nil {
			return vUndef, err
		}
		args, kw, err := r.args(x.args, x.kwargs, sc)
		if err != nil {
			return vUndef, err
		}
		if len(kw) > 0 {
			return vUndef, rerr("tests take no keyword arguments")
		}
		ok, err := x.test(v, args)
		return boolV(ok != x.negated), err
	case *binExpr:
		l, err := r.eval(x.l, sc)
		if err != nil {
			return vUndef, err
		}
		switch x.op {
		case "and":
			if !l.IsTruthy() {
				return l, nil
			}
			return r.eval(x.r, sc)
		case "or":
			if l.IsTruthy() {
				return l, nil
			}
			return r.eval(x.r, sc)
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return vUndef, err
		}
		return binaryOp(x.op, l, rv)
	case *unaryExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return vUndef, err
		}
		if x.op == "not" {
			return boolV(!v.IsTruthy()), nil
		}
		return unaryOp(x.op, v)
	case *compareExpr:
		l, err := r.eval(x.first, sc)
		if err != nil {
			return vUndef, err
		}
		for i, op := range x.ops {
			rv, err := r.eval(x.rest[i], sc)
			if err != nil {
				return vUndef, err
			}
			ok, err := compareOp(op, l, rv)
			if err != nil || !ok {
				return vFalse, err
			}
			l = rv
		}
		return vTrue, nil
	case *condExpr:
		t, err := r.eval(x.test, sc)
		if err != nil {
			return vUndef, err
		}
		if t.IsTruthy() {
			return r.eval(x.a, sc)
		}
		if x.b == nil {
			return vUndef, nil
		}
		return r.eval(x.b, sc)
	case *concatExpr:
		var b strings.Builder
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return vUndef, err
			}
			s, err := pyStr(v)
			if err != nil {
				return vUndef, err
			}
			b.WriteString(s)
		}
		return str(b.String()), nil
	case *listExpr:
		items := make([]value, len(x.items))
		for i, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return vUndef, err
			}
			items[i] = v
		}
		if x.tuple {
			return newTuple(items), nil
		}
		return newList(items), nil
	case *dictExpr:
		d := newDict()
		for i := range x.keys {
			k, err := r.eval(x.keys[i], sc)
			if err != nil {
				return vUndef, err
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return vUndef, err
			}
			if !k.IsString() {
				return vUndef, rerr("dict keys other than strings are not supported (got %s)", typeName(k))
			}
			d.AsDict().Set(k.AsString(), v)
		}
		return d, nil
	case *failExpr:
		return vUndef, rerr("%s", x.msg)
	}
	return vUndef, rerr("internal error: unknown expression %T", e)
}

func (r *renderer) call(x *callExpr, sc *scope) (value, error) {
	if attr, ok := x.fn.(*getattrExpr); ok {
		// Method calls dispatch directly, without a bound method value.
		o, err := r.eval(attr.obj, sc)
		if err != nil {
			return vUndef, err
		}
		args, kw, err := r.args(x.args, x.kwargs, sc)
		if err != nil {
			return vUndef, err
		}
		return callAttr(o, attr.attr, args, kw, r.st)
	}
	f, err := r.eval(x.fn, sc)
	if err != nil {
		return vUndef, err
	}
	if f.IsCallable() && f.AsCallable().ordered != nil && len(x.kwargs) > 0 {
		// Keyword order is observable here (it becomes key order), so keep it.
		pos, _, err := r.args(x.args, nil, sc)
		if err != nil {
			return vUndef, err
		}
		names := make([]string, len(x.kwargs))
		vals := make([]value, len(x.kwargs))
		for i, k := range x.kwargs {
			if vals[i], err = r.eval(k.val, sc); err != nil {
				return vUndef, err
			}
			names[i] = k.name
		}
		return f.AsCallable().ordered(pos, names, vals)
	}
	args, kw, err := r.args(x.args, x.kwargs, sc)
	if err != nil {
		return vUndef, err
	}
	return callValue(f, args, kw)
}
