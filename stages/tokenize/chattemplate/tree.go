package chattemplate

import (
	"fmt"
	"slices"
)

// The tree builder turns the lexed items of a template into statement nodes whose expressions are
// the parser's trees, checked once here: unknown filters and tests, names Jinja2 refuses, calls to
// this template's macros that Jinja2 would reject. The evaluator (eval.go) walks the result.

// node is one statement of a parsed template.
type node interface{}

type (
	// textNode is template text, whitespace control already applied.
	textNode struct{ text string }
	// outputNode is {{ e }} or {% print e %}.
	outputNode struct{ e expr }
	// ifNode is if/elif/else: the first branch whose cond is truthy runs; a nil cond is the else.
	ifNode struct{ branches []*ifBranch }
	// forNode is a for loop; els runs when no item passes the filter.
	forNode struct {
		targets []string // one name, or two to unpack each item into
		iter    expr
		filter  expr // the loop's `if` clause, or nil
		body    []node
		els     []node
	}
	// setNode is {% set name = e %} or, with ns, {% set ns.name = e %}.
	setNode struct {
		name, ns string
		e        expr
	}
	// setBlockNode is {% set name %}body{% endset %}, the body optionally passed through filter.
	setBlockNode struct {
		name   string
		filter expr // a filter chain whose head (node nil) is the rendered body, or nil
		body   []node
	}
	// macroNode defines a macro in the current scope.
	macroNode struct {
		name   string
		params []macroParam
		body   []node
	}
	// callBlockNode is {% call(params) macro(args) %}body{% endcall %}.
	callBlockNode struct {
		params []string // the caller's parameters
		call   *callExpr
		body   []node
	}
	// filterBlockNode is {% filter chain %}body{% endfilter %}.
	filterBlockNode struct {
		filter expr
		body   []node
	}
	// generationNode is transformers' {% generation %} block: its body in a scope of its own.
	generationNode struct{ body []node }
	breakNode      struct{}
	continueNode   struct{}
)

type ifBranch struct {
	cond expr // nil for else
	body []node
}

// macroParam is one macro parameter; a default must be a literal.
type macroParam struct {
	name   string
	def    value
	hasDef bool
}

type blockKind int

const (
	blkIf blockKind = iota
	blkFor
	blkSet
	blkMacro
	blkCall
	blkFilter
	blkGeneration
)

// openBlock is a block statement whose end tag has not been seen yet.
type openBlock struct {
	kind    blockKind
	line    int
	hasElse bool
	node    node
	body    *[]node // where the statements read now belong
}

type builder struct {
	root     []node
	stack    []*openBlock
	inMacro  int
	condExpr int                 // depth of conditional expressions being checked
	macros   map[string][]string // parameter names of the macros defined so far
}

// buildTree parses the statements of a lexed template.
func buildTree(items []item) ([]node, error) {
	b := &builder{macros: map[string][]string{}}
	for _, it := range items {
		var err error
		switch it.kind {
		case itemText:
			b.add(&textNode{text: it.text})
		case itemVar:
			err = b.output(newParser(it), it.line)
		case itemBlock:
			err = b.statement(it)
		}
		if err != nil {
			return nil, err
		}
	}
	if top := b.top(); top != nil {
		return nil, syntaxErr(top.line, "unexpected end of template: block opened here is never closed")
	}
	return b.root, nil
}

// add appends n to the innermost open body, merging adjacent text.
func (b *builder) add(n node) {
	body := &b.root
	if top := b.top(); top != nil {
		body = top.body
	}
	if t, ok := n.(*textNode); ok && len(*body) > 0 {
		if prev, ok := (*body)[len(*body)-1].(*textNode); ok {
			prev.text += t.text
			return
		}
	}
	*body = append(*body, n)
}

func (b *builder) top() *openBlock {
	if len(b.stack) == 0 {
		return nil
	}
	return b.stack[len(b.stack)-1]
}

// open adds n and makes body the place for the statements that follow.
func (b *builder) open(kind blockKind, line int, n node, body *[]node) {
	b.add(n)
	b.stack = append(b.stack, &openBlock{kind: kind, line: line, node: n, body: body})
}

func (b *builder) close(line int, want blockKind, tag string) (*openBlock, error) {
	top := b.top()
	if top == nil || top.kind != want {
		return nil, syntaxErr(line, "unexpected '%s'", tag)
	}
	b.stack = b.stack[:len(b.stack)-1]
	return top, nil
}

// output parses the expression of {{ }} or {% print %}.
func (b *builder) output(p *parser, line int) error {
	e, err := p.parseTuple(false, true, nil, false)
	if err != nil {
		return err
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	if e, err = b.expr(e, line); err != nil {
		return err
	}
	b.add(&outputNode{e: e})
	return nil
}

// soft reports whether the expression being checked is in what Jinja2 calls a soft frame (an if
// statement's test or body, or a conditional expression), where an unknown filter or test is an
// error only if it is evaluated.
func (b *builder) soft() bool {
	if b.condExpr > 0 {
		return true
	}
	for i := len(b.stack) - 1; i >= 0; i-- {
		switch b.stack[i].kind {
		case blkIf:
			return true
		case blkFor, blkMacro, blkCall, blkFilter, blkSet, blkGeneration:
			return false
		}
	}
	return false
}

// unknown reports an unsupported filter or test: at parse time, or (in a soft frame) when reached.
func (b *builder) unknown(kind, name string, line int) (expr, error) {
	if b.soft() {
		return &failExpr{msg: fmt.Sprintf("unsupported %s '%s' (chat template line %d)", kind, name, line)}, nil
	}
	return nil, syntaxErr(line, "unsupported %s '%s'", kind, name)
}

// inLoop reports whether break and continue here belong to a for loop not separated from them by a
// macro, call, filter, set or generation block.
func (b *builder) inLoop() bool {
	for i := len(b.stack) - 1; i >= 0; i-- {
		switch b.stack[i].kind {
		case blkFor:
			return true
		case blkMacro, blkCall, blkFilter, blkGeneration, blkSet:
			return false
		}
	}
	return false
}

// condition parses the expression of an if or elif tag.
func (b *builder) condition(p *parser, line int) (expr, error) {
	cond, err := p.parseTuple(false, false, nil, false)
	if err != nil {
		return nil, err
	}
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	return b.expr(cond, line)
}

func (b *builder) statement(it item) error {
	p := newParser(it)
	kw, err := p.expectName()
	if err != nil {
		return syntaxErr(it.line, "tag name expected")
	}
	line := it.line
	switch kw {
	case "if":
		cond, err := b.condition(p, line)
		if err != nil {
			return err
		}
		n := &ifNode{branches: []*ifBranch{{cond: cond}}}
		b.open(blkIf, line, n, &n.branches[0].body)
	case "elif":
		top := b.top()
		if top == nil || top.kind != blkIf || top.hasElse {
			return syntaxErr(line, "unexpected 'elif'")
		}
		cond, err := b.condition(p, line)
		if err != nil {
			return err
		}
		n := top.node.(*ifNode)
		br := &ifBranch{cond: cond}
		n.branches = append(n.branches, br)
		top.body = &br.body
	case "else":
		if err := p.expectEnd(); err != nil {
			return err
		}
		top := b.top()
		if top == nil || (top.kind != blkIf && top.kind != blkFor) || top.hasElse {
			return syntaxErr(line, "unexpected 'else'")
		}
		top.hasElse = true
		switch n := top.node.(type) {
		case *ifNode:
			br := &ifBranch{}
			n.branches = append(n.branches, br)
			top.body = &br.body
		case *forNode:
			top.body = &n.els
		}
	case "endif", "endfor", "endset", "endmacro", "endcall", "endfilter", "endgeneration":
		if err := p.expectEnd(); err != nil {
			return err
		}
		if _, err := b.close(line, endTags[kw], kw); err != nil {
			return err
		}
		if kw == "endmacro" {
			b.inMacro--
		}
	case "for":
		return b.forStmt(p, line)
	case "break", "continue":
		if err := p.expectEnd(); err != nil {
			return err
		}
		if !b.inLoop() {
			return syntaxErr(line, "'%s' outside of a loop body is not supported", kw)
		}
		if kw == "break" {
			b.add(&breakNode{})
		} else {
			b.add(&continueNode{})
		}
	case "set":
		return b.setStmt(p, line)
	case "macro":
		return b.macroStmt(p, line)
	case "call":
		return b.callStmt(p, line)
	case "filter":
		chain, err := p.parseFilter(nil, true)
		if err != nil {
			return err
		}
		if err := p.expectEnd(); err != nil {
			return err
		}
		// Check the chain now so errors point at the opening tag.
		if chain, err = b.expr(chain, line); err != nil {
			return err
		}
		n := &filterBlockNode{filter: chain}
		b.open(blkFilter, line, n, &n.body)
	case "generation":
		if err := p.expectEnd(); err != nil {
			return err
		}
		n := &generationNode{}
		b.open(blkGeneration, line, n, &n.body)
	case "print":
		return b.output(p, line)
	default:
		return syntaxErr(line, "unsupported statement '%s'", kw)
	}
	return nil
}

// endTags maps each end tag to the block it closes.
var endTags = map[string]blockKind{"endif": blkIf, "endfor": blkFor, "endset": blkSet, "endmacro": blkMacro,
	"endcall": blkCall, "endfilter": blkFilter, "endgeneration": blkGeneration}

func (b *builder) forStmt(p *parser, line int) error {
	targets, _, err := p.parseAssignTarget(true, false, []string{"in"})
	if err != nil {
		return err
	}
	if !p.skipName("in") {
		return p.fail("expected 'in', got %s", p.cur())
	}
	iter, err := p.parseTuple(false, false, []string{"recursive"}, false)
	if err != nil {
		return err
	}
	var filter expr
	if p.skipName("if") {
		if filter, err = p.parseExpression(); err != nil {
			return err
		}
	}
	if p.isName("recursive") {
		return p.fail("recursive loops are not supported")
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	if len(targets) > 2 {
		return syntaxErr(line, "unpacking into more than two loop variables is not supported")
	}
	for _, t := range targets {
		if err := checkName(t, line); err != nil {
			return err
		}
	}
	n := &forNode{targets: targets}
	if n.iter, err = b.expr(iter, line); err != nil {
		return err
	}
	if filter != nil {
		if n.filter, err = b.expr(filter, line); err != nil {
			return err
		}
	}
	b.open(blkFor, line, n, &n.body)
	return nil
}

func (b *builder) setStmt(p *parser, line int) error {
	names, ns, err := p.parseAssignTarget(true, true, nil)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		return syntaxErr(line, "tuple assignment in set is not supported")
	}
	name := names[0]
	if err := checkName(name, line); err != nil {
		return err
	}
	if p.skipOp("=") {
		e, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return err
		}
		if err := p.expectEnd(); err != nil {
			return err
		}
		if e, err = b.expr(e, line); err != nil {
			return err
		}
		if ns != "" {
			if err := checkName(ns, line); err != nil {
				return err
			}
		}
		b.add(&setNode{name: name, ns: ns, e: e})
		return nil
	}
	if ns != "" {
		return syntaxErr(line, "block assignment to a namespace attribute is not supported")
	}
	var chain expr
	if p.isOp("|") {
		if chain, err = p.parseFilter(nil, false); err != nil {
			return err
		}
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	n := &setBlockNode{name: name}
	b.open(blkSet, line, n, &n.body)
	if chain != nil {
		if n.filter, err = b.expr(chain, line); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) macroStmt(p *parser, line int) error {
	name, err := p.expectName()
	if err != nil {
		return err
	}
	if err := checkName(name, line); err != nil {
		return err
	}
	params, err := b.signature(p, line)
	if err != nil {
		return err
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	names := make([]string, len(params))
	for i, pr := range params {
		names[i] = pr.name
	}
	b.macros[name] = names
	n := &macroNode{name: name, params: params}
	b.open(blkMacro, line, n, &n.body)
	b.inMacro++
	return nil
}

// signature parses "(a, b=default)" of a macro or call block; defaults must be literals.
func (b *builder) signature(p *parser, line int) ([]macroParam, error) {
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	var params []macroParam
	seenDefault := false
	for !p.isOp(")") {
		if len(params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := checkName(n, line); err != nil {
			return nil, err
		}
		pr := macroParam{name: n}
		if p.skipOp("=") {
			d, err := p.parseExpression()
			if err != nil {
				return nil, err
			}
			v, ok := constFold(d)
			if !ok {
				return nil, syntaxErr(line, "macro argument defaults must be literals")
			}
			pr.def, pr.hasDef = v, true
			seenDefault = true
		} else if seenDefault {
			return nil, syntaxErr(line, "non-default argument follows default argument")
		}
		params = append(params, pr)
	}
	return params, p.expectOp(")")
}

// macroCallError reports a call Jinja2 would reject when it runs: too many positional arguments or an
// unknown keyword for a macro defined in this template.
func (b *builder) macroCallError(name string, args []expr, kwargs []kwarg, caller bool) string {
	params, ok := b.macros[name]
	if !ok {
		return ""
	}
	if len(args) > len(params) {
		return fmt.Sprintf("TypeError: macro '%s' takes not more than %d argument(s)", name, len(params))
	}
	for _, kw := range kwargs {
		if !slices.Contains(params, kw.name) && !(caller && kw.name == "caller") {
			return fmt.Sprintf("TypeError: macro '%s' takes no keyword argument '%s'", name, kw.name)
		}
	}
	return ""
}

func (b *builder) callStmt(p *parser, line int) error {
	var params []string
	if p.isOp("(") {
		sig, err := b.signature(p, line)
		if err != nil {
			return err
		}
		for _, pr := range sig {
			if pr.hasDef {
				return syntaxErr(line, "caller argument defaults are not supported")
			}
			params = append(params, pr.name)
		}
	}
	e, err := p.parseExpression()
	if err != nil {
		return err
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return syntaxErr(line, "expected a call expression in call block")
	}
	fn, ok := call.fn.(*nameExpr)
	if !ok {
		return syntaxErr(line, "call blocks are supported only for macros called by name")
	}
	if msg := b.macroCallError(fn.name, call.args, call.kwargs, true); msg != "" {
		return syntaxErr(line, "%s", msg)
	}
	if err := checkName(fn.name, line); err != nil {
		return err
	}
	if err := b.exprs(call.args, line); err != nil {
		return err
	}
	if err := b.kwargs(call.kwargs, line); err != nil {
		return err
	}
	n := &callBlockNode{params: params, call: call}
	b.open(blkCall, line, n, &n.body)
	return nil
}

func checkName(n string, line int) error {
	switch n {
	case "null", "true", "false", "none", "True", "False", "None":
		return syntaxErr(line, "cannot use %q as a variable name", n)
	}
	return nil
}

// constFold evaluates literal expressions (used for macro defaults).
func constFold(e expr) (value, bool) {
	switch x := e.(type) {
	case *constExpr:
		return x.v, true
	case *unaryExpr:
		v, ok := constFold(x.x)
		if !ok || x.op == "not" {
			return v, false
		}
		if x.op == "+" {
			return v, v.IsInt() || v.IsFloat()
		}
		switch {
		case v.IsInt():
			return newInt(-v.AsInt()), true
		case v.IsFloat():
			return newFloat(-v.AsFloat()), true
		}
	case *listExpr:
		items := make([]value, len(x.items))
		for i, it := range x.items {
			v, ok := constFold(it)
			if !ok {
				return v, false
			}
			items[i] = v
		}
		return newList(items), true
	case *dictExpr:
		d := newDict()
		for i := range x.keys {
			k, ok := constFold(x.keys[i])
			if !ok || !k.IsString() {
				return k, false
			}
			v, ok := constFold(x.vals[i])
			if !ok {
				return v, false
			}
			d.AsDict().Set(k.AsString(), v)
		}
		return d, true
	}
	return vUndef, false
}

// exprs checks each expression in place.
func (b *builder) exprs(es []expr, line int) error {
	for i := range es {
		var err error
		if es[i], err = b.expr(es[i], line); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) kwargs(kws []kwarg, line int) error {
	for i := range kws {
		if err := checkName(kws[i].name, line); err != nil {
			return err
		}
		var err error
		if kws[i].val, err = b.expr(kws[i].val, line); err != nil {
			return err
		}
	}
	return nil
}

// expr checks one expression and returns it ready to evaluate: filters and tests resolved, and a
// construct Jinja2 rejects only when it runs replaced by a failExpr.
// operands resolves what a call, filter or test applies to (*node), then its arguments.
func (b *builder) operands(node *expr, args []expr, kwargs []kwarg, line int) error {
	var err error
	if *node, err = b.expr(*node, line); err != nil {
		return err
	}
	if err := b.exprs(args, line); err != nil {
		return err
	}
	return b.kwargs(kwargs, line)
}

func (b *builder) expr(e expr, line int) (expr, error) {
	var err error
	switch x := e.(type) {
	case nil, *constExpr:
	case *nameExpr:
		if err := checkName(x.name, line); err != nil {
			return nil, err
		}
		if b.inMacro > 0 && (x.name == "varargs" || x.name == "kwargs") {
			return nil, syntaxErr(line, "macro %s is not supported", x.name)
		}
	case *getattrExpr:
		x.obj, err = b.expr(x.obj, line)
	case *getitemExpr:
		if x.obj, err = b.expr(x.obj, line); err == nil {
			x.key, err = b.expr(x.key, line)
		}
	case *sliceExpr:
		for _, p := range []*expr{&x.obj, &x.start, &x.stop, &x.step} {
			if *p, err = b.expr(*p, line); err != nil {
				return nil, err
			}
		}
	case *callExpr:
		if fn, ok := x.fn.(*nameExpr); ok {
			if msg := b.macroCallError(fn.name, x.args, x.kwargs, false); msg != "" {
				return &failExpr{msg: msg}, nil
			}
		}
		err = b.operands(&x.fn, x.args, x.kwargs, line)
	case *filterExpr:
		f, ok := filters[x.name]
		if !ok {
			return b.unknown("filter", x.name, line)
		}
		x.fn = f
		err = b.operands(&x.node, x.args, x.kwargs, line)
	case *testExpr:
		t, ok := tests[x.name]
		if !ok {
			return b.unknown("test", x.name, line)
		}
		x.test = t
		err = b.operands(&x.node, x.args, x.kwargs, line)
	case *binExpr:
		if x.l, err = b.expr(x.l, line); err == nil {
			x.r, err = b.expr(x.r, line)
		}
	case *unaryExpr:
		x.x, err = b.expr(x.x, line)
	case *compareExpr:
		if x.first, err = b.expr(x.first, line); err == nil {
			err = b.exprs(x.rest, line)
		}
	case *condExpr:
		b.condExpr++
		defer func() { b.condExpr-- }()
		for _, p := range []*expr{&x.a, &x.test, &x.b} {
			if *p, err = b.expr(*p, line); err != nil {
				return nil, err
			}
		}
	case *concatExpr:
		err = b.exprs(x.items, line)
	case *listExpr:
		err = b.exprs(x.items, line)
	case *dictExpr:
		if err = b.exprs(x.keys, line); err == nil {
			err = b.exprs(x.vals, line)
		}
	default:
		return nil, syntaxErr(line, "unsupported expression %T", e)
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}
