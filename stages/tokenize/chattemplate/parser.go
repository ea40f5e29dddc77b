package chattemplate

// The expression parser follows jinja2/parser.py, so precedence and associativity are Jinja2's (for
// example `is` tests and filters bind to the unary operand, `-x|abs` is `(-x)|abs`).

type expr interface{}

type (
	constExpr   struct{ v value }
	nameExpr    struct{ name string }
	getattrExpr struct {
		obj  expr
		attr string
	}
	getitemExpr struct{ obj, key expr }
	sliceExpr   struct{ obj, start, stop, step expr }
	kwarg       struct {
		name string
		val  expr
	}
	callExpr struct {
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		name   string
		node   expr // nil for the head of a {% filter %} or {% set x | f %} chain
		args   []expr
		kwargs []kwarg
		fn     fn // the filter, set when the template is checked
	}
	testExpr struct {
		name    string
		node    expr
		args    []expr
		kwargs  []kwarg
		negated bool
		test    testFunc // the test, set when the template is checked
	}
	binExpr struct {
		op   string
		l, r expr
	}
	unaryExpr struct {
		op string
		x  expr
	}
	compareExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	condExpr   struct{ test, a, b expr }
	concatExpr struct{ items []expr }
	listExpr   struct {
		items []expr
		tuple bool
	}
	dictExpr struct{ keys, vals []expr }
	// failExpr stands for a construct that Jinja2 rejects only when it is evaluated (an unknown filter
	// in an if branch, a macro call with too many arguments): evaluating it fails with msg.
	failExpr struct{ msg string }
)

type parser struct {
	toks []token
	pos  int
	line int
}

func newParser(it item) *parser {
	toks := append(append([]token(nil), it.toks...), token{kind: tEOF, line: it.line})
	return &parser{toks: toks, line: it.line}
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) look() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) isOp(op string) bool  { t := p.cur(); return t.kind == tOp && t.text == op }
func (p *parser) isName(n string) bool { t := p.cur(); return t.kind == tName && t.text == n }
func (p *parser) atEnd() bool          { return p.cur().kind == tEOF }
func (p *parser) fail(format string, args ...any) error {
	return syntaxErr(p.cur().line, format, args...)
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(n string) bool {
	if p.isName(n) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.fail("expected '%s', got %s", op, p.cur())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.fail("expected a name, got %s", t)
	}
	p.next()
	return t.text, nil
}

func (p *parser) expectEnd() error {
	if !p.atEnd() {
		return p.fail("unexpected %s", p.cur())
	}
	return nil
}

// isTupleEnd reports whether the current token ends a tuple.
func (p *parser) isTupleEnd(extraEnd []string) bool {
	if p.atEnd() || p.isOp(")") {
		return true
	}
	for _, n := range extraEnd {
		if p.isName(n) {
			return true
		}
	}
	return false
}

// parseTuple is Parser.parse_tuple.
func (p *parser) parseTuple(simplified, withCondexpr bool, extraEnd []string, explicitParens bool) (expr, error) {
	var args []expr
	isTuple := false
	for {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		var e expr
		var err error
		switch {
		case simplified:
			e, err = p.parsePrimary()
		case withCondexpr:
			e, err = p.parseExpression()
		default:
			e, err = p.parseOr()
		}
		if err != nil {
			return nil, err
		}
		args = append(args, e)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(args) > 0 {
			return args[0], nil
		}
		if !explicitParens {
			return nil, p.fail("expected an expression, got %s", p.cur())
		}
	}
	return &listExpr{items: args, tuple: true}, nil
}

func (p *parser) parseExpression() (expr, error) {
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var alt expr
		if p.skipName("else") {
			if alt, err = p.parseExpression(); err != nil {
				return nil, err
			}
		}
		e = &condExpr{test: test, a: e, b: alt}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.skipName("or") {
		var r expr
		r, err = p.parseAnd()
		l = &binExpr{op: "or", l: l, r: r}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.skipName("and") {
		var r expr
		r, err = p.parseNot()
		l = &binExpr{op: "and", l: l, r: r}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		x, err := p.parseNot()
		return &unaryExpr{op: "not", x: x}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		var op string
		t := p.cur()
		switch {
		case t.kind == tOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">="):
			op = t.text
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.look().kind == tName && p.look().text == "in":
			op = "not in"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		op := p.next().text
		var r expr
		r, err = p.parseConcat()
		l = &binExpr{op: op, l: l, r: r}
	}
	return l, err
}

func (p *parser) parseConcat() (expr, error) {
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	items := []expr{first}
	for p.skipOp("~") {
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if len(items) == 1 {
		return first, nil
	}
	return &concatExpr{items: items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		op := p.next().text
		var r expr
		r, err = p.parsePow()
		l = &binExpr{op: op, l: l, r: r}
	}
	return l, err
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	for err == nil && p.skipOp("**") {
		var r expr
		r, err = p.parseUnary(true)
		l = &binExpr{op: "**", l: l, r: r}
	}
	return l, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var node expr
	var err error
	switch {
	case p.skipOp("-"):
		var x expr
		x, err = p.parseUnary(false)
		node = &unaryExpr{op: "-", x: x}
	case p.skipOp("+"):
		var x expr
		x, err = p.parseUnary(false)
		node = &unaryExpr{op: "+", x: x}
	default:
		node, err = p.parsePrimary()
	}
	if err != nil {
		return nil, err
	}
	if node, err = p.parsePostfix(node); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(node)
	}
	return node, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.text {
		case "true", "True":
			return &constExpr{boolV(true)}, nil
		case "false", "False":
			return &constExpr{boolV(false)}, nil
		case "none", "None":
			return &constExpr{vNone}, nil
		}
		return &nameExpr{name: t.text}, nil
	case tString:
		s := t.text
		p.next()
		for p.cur().kind == tString {
			s += p.next().text
		}
		return &constExpr{str(s)}, nil
	case tInt:
		p.next()
		return &constExpr{newInt(t.i)}, nil
	case tFloat:
		p.next()
		return &constExpr{newFloat(t.f)}, nil
	case tOp:
		switch t.text {
		case "(":
			p.next()
			e, err := p.parseTuple(false, true, nil, true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				e, err := p.parseExpression()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
			}
			return l, p.expectOp("]")
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			return d, p.expectOp("}")
		}
	}
	return nil, p.fail("unexpected %s", t)
}

func (p *parser) parsePostfix(node expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			node, err = p.parseSubscript(node)
		case p.isOp("("):
			node, err = p.parseCall(node)
		default:
			return node, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(node expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			node, err = p.parseFilter(node, false)
		case p.isName("is"):
			node, err = p.parseTest(node)
		case p.isOp("("):
			node, err = p.parseCall(node)
		default:
			return node, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(node expr) (expr, error) {
	if p.skipOp(".") {
		t := p.next()
		switch t.kind {
		case tName:
			return &getattrExpr{obj: node, attr: t.text}, nil
		case tInt:
			return &getitemExpr{obj: node, key: &constExpr{newInt(t.i)}}, nil
		}
		return nil, syntaxErr(t.line, "expected name or number after '.', got %s", t)
	}
	p.next() // [
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	if err := p.expectOp("]"); err != nil {
		return nil, err
	}
	switch len(args) {
	case 0:
		return nil, p.fail("expected an expression inside []")
	case 1:
		if s, ok := args[0].(*sliceExpr); ok {
			s.obj = node
			return s, nil
		}
		return &getitemExpr{obj: node, key: args[0]}, nil
	}
	return nil, p.fail("tuple subscripts are not supported")
}

func (p *parser) parseSubscribed() (expr, error) {
	var parts [3]expr
	if p.isOp(":") {
		p.next()
	} else {
		e, err := p.parseExpression()
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		p.next()
		parts[0] = e
	}
	if !p.isOp(":") && !p.isOp("]") && !p.isOp(",") {
		e, err := p.parseExpression()
		if err != nil {
			return nil, err
		}
		parts[1] = e
	}
	if p.skipOp(":") && !p.isOp("]") && !p.isOp(",") {
		e, err := p.parseExpression()
		if err != nil {
			return nil, err
		}
		parts[2] = e
	}
	return &sliceExpr{start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCallArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	requireComma := false
	for !p.isOp(")") {
		if requireComma {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, p.fail("*args and **kwargs in calls are not supported")
		}
		if p.cur().kind == tName && p.look().kind == tOp && p.look().text == "=" {
			name := p.next().text
			p.next()
			v, err := p.parseExpression()
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name: name, val: v})
		} else {
			if len(kwargs) > 0 {
				return nil, nil, p.fail("invalid argument syntax: positional argument after keyword argument")
			}
			v, err := p.parseExpression()
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		requireComma = true
	}
	return args, kwargs, p.expectOp(")")
}

func (p *parser) parseCall(node expr) (expr, error) {
	args, kwargs, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: node, args: args, kwargs: kwargs}, nil
}

func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	if err != nil {
		return "", err
	}
	for p.skipOp(".") {
		n, err := p.expectName()
		if err != nil {
			return "", err
		}
		name += "." + n
	}
	return name, nil
}

func (p *parser) parseFilter(node expr, startInline bool) (expr, error) {
	for p.isOp("|") || startInline {
		if !startInline {
			p.next()
		}
		startInline = false
		name, err := p.dottedName()
		if err != nil {
			return nil, err
		}
		f := &filterExpr{name: name, node: node}
		if p.isOp("(") {
			if f.args, f.kwargs, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		node = f
	}
	return node, nil
}

func (p *parser) parseTest(node expr) (expr, error) {
	p.next() // is
	negated := p.skipName("not")
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	t := &testExpr{name: name, node: node, negated: negated}
	c := p.cur()
	switch {
	case p.isOp("("):
		if t.args, t.kwargs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat || p.isOp("[") || p.isOp("{")) &&
		!p.isName("else") && !p.isName("or") && !p.isName("and"):
		if p.isName("is") {
			return nil, p.fail("you cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		t.args = []expr{arg}
	}
	return t, nil
}

// parseAssignTarget parses a name, a tuple of names, or (withNamespace) name.attr.
func (p *parser) parseAssignTarget(withTuple, withNamespace bool, extraEnd []string) ([]string, string, error) {
	if withNamespace && p.cur().kind == tName && p.look().kind == tOp && p.look().text == "." {
		ns := p.next().text
		p.next()
		attr, err := p.expectName()
		return []string{attr}, ns, err
	}
	var target expr
	var err error
	if withTuple {
		target, err = p.parseTuple(true, true, extraEnd, false)
	} else {
		target, err = p.parsePrimary()
	}
	if err != nil {
		return nil, "", err
	}
	switch t := target.(type) {
	case *nameExpr:
		return []string{t.name}, "", nil
	case *listExpr:
		var names []string
		for _, it := range t.items {
			n, ok := it.(*nameExpr)
			if !ok {
				return nil, "", p.fail("nested assignment targets are not supported")
			}
			names = append(names, n.name)
		}
		return names, "", nil
	}
	return nil, "", p.fail("cannot assign to %T", target)
}
