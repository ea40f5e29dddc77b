package chattemplate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The compiler turns a parsed Jinja2 template into ardanlabs/jinja source in which:
//   - all text and literals are constants (__df_kN) printed or passed by name, so the target engine's
//     own whitespace handling and literal parsing never come into play (whitespace control was already
//     applied by the lexer, exactly as Jinja2 does);
//   - every expression operation is a call into the runtime (__df_*), which implements Python and
//     Jinja2 semantics;
//   - every loop body runs inside a one-shot inner loop so that assignments made in one iteration are
//     discarded before the next, as in Jinja2 (break/continue are relayed through a flag).

const rtPrefix = "__df_"

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

type block struct {
	kind    blockKind
	line    int
	id      int
	hasElse bool
	filter  expr     // filter chain of a {% filter %} or filtered {% set %}
	target  string   // target of a filtered block {% set %}
	aliases []string // saved loop aliases (macro)
}

type compiler struct {
	out      strings.Builder
	consts   []jinja.Value
	strConst map[string]string
	stack    []*block
	aliases  []string // loop alias per enclosing user loop, innermost last
	nextID   int
	inMacro  int
	condExpr int                 // depth of conditional expressions being compiled
	macros   map[string][]string // parameter names of the macros defined so far
	pending  strings.Builder     // coalesced text awaiting emission
}

func compileTemplate(items []item) (string, []jinja.Value, error) {
	c := &compiler{strConst: map[string]string{}, macros: map[string][]string{}}
	for _, it := range items {
		var err error
		switch it.kind {
		case itemText:
			c.pending.WriteString(it.text)
		case itemVar:
			err = c.output(it)
		case itemBlock:
			err = c.statement(it)
		}
		if err != nil {
			return "", nil, err
		}
	}
	c.flushText()
	if len(c.stack) > 0 {
		b := c.stack[len(c.stack)-1]
		return "", nil, syntaxErr(b.line, "unexpected end of template: block opened here is never closed")
	}
	return c.out.String(), c.consts, nil
}

func (c *compiler) flushText() {
	if c.pending.Len() == 0 {
		return
	}
	c.out.WriteString("{{" + c.constString(c.pending.String()) + "}}")
	c.pending.Reset()
}

func (c *compiler) emit(s string) {
	c.flushText()
	c.out.WriteString(s)
}

func (c *compiler) constValue(v jinja.Value) string {
	c.consts = append(c.consts, v)
	return rtPrefix + "k" + strconv.Itoa(len(c.consts)-1)
}

func (c *compiler) constString(s string) string {
	if n, ok := c.strConst[s]; ok {
		return n
	}
	n := c.constValue(jinja.NewString(s))
	c.strConst[s] = n
	return n
}

func (c *compiler) newID() int {
	c.nextID++
	return c.nextID
}

func (c *compiler) top() *block {
	if len(c.stack) == 0 {
		return nil
	}
	return c.stack[len(c.stack)-1]
}

func (c *compiler) push(b *block) { c.stack = append(c.stack, b) }

func (c *compiler) pop(line int, want blockKind, tag string) (*block, error) {
	b := c.top()
	if b == nil || b.kind != want {
		return nil, syntaxErr(line, "unexpected '%s'", tag)
	}
	c.stack = c.stack[:len(c.stack)-1]
	return b, nil
}

func (c *compiler) output(it item) error {
	p := newParser(it)
	e, err := p.parseTuple(false, true, nil, false)
	if err != nil {
		return err
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	s, err := c.expr(e, it.line)
	if err != nil {
		return err
	}
	c.emit("{{" + rtPrefix + "str(" + s + ")}}")
	return nil
}

// soft reports whether the expression being compiled is in what Jinja2 calls a soft frame (an if
// statement's test or body, or a conditional expression), where an unknown filter or test is an
// error only if it is evaluated.
func (c *compiler) soft() bool {
	if c.condExpr > 0 {
		return true
	}
	for i := len(c.stack) - 1; i >= 0; i-- {
		switch c.stack[i].kind {
		case blkIf:
			return true
		case blkFor, blkMacro, blkCall, blkFilter, blkSet, blkGeneration:
			return false
		}
	}
	return false
}

// unknown reports an unsupported filter or test: at parse time, or (in a soft frame) when reached.
func (c *compiler) unknown(kind, name string, line int) (string, error) {
	msg := fmt.Sprintf("unsupported %s '%s' (chat template line %d)", kind, name, line)
	if c.soft() {
		return rtPrefix + "fail(" + c.constString(msg) + ")", nil
	}
	return "", syntaxErr(line, "unsupported %s '%s'", kind, name)
}

// innermostLoop returns the innermost enclosing for block not separated from here by a macro, call,
// filter or generation block, or nil.
func (c *compiler) innermostLoop() *block {
	for i := len(c.stack) - 1; i >= 0; i-- {
		switch c.stack[i].kind {
		case blkFor:
			return c.stack[i]
		case blkMacro, blkCall, blkFilter, blkGeneration, blkSet:
			return nil
		}
	}
	return nil
}

func (c *compiler) statement(it item) error {
	p := newParser(it)
	kw, err := p.expectName()
	if err != nil {
		return syntaxErr(it.line, "tag name expected")
	}
	line := it.line
	switch kw {
	case "if":
		cond, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return err
		}
		if err := p.expectEnd(); err != nil {
			return err
		}
		s, err := c.expr(cond, line)
		if err != nil {
			return err
		}
		c.push(&block{kind: blkIf, line: line})
		c.emit("{%if " + s + "%}")
	case "elif":
		b := c.top()
		if b == nil || b.kind != blkIf || b.hasElse {
			return syntaxErr(line, "unexpected 'elif'")
		}
		cond, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return err
		}
		if err := p.expectEnd(); err != nil {
			return err
		}
		s, err := c.expr(cond, line)
		if err != nil {
			return err
		}
		c.emit("{%elif " + s + "%}")
	case "else":
		if err := p.expectEnd(); err != nil {
			return err
		}
		b := c.top()
		if b == nil || (b.kind != blkIf && b.kind != blkFor) || b.hasElse {
			return syntaxErr(line, "unexpected 'else'")
		}
		b.hasElse = true
		if b.kind == blkFor {
			c.closeLoopBody(b)
		}
		c.emit("{%else%}")
	case "endif":
		if err := p.expectEnd(); err != nil {
			return err
		}
		if _, err := c.pop(line, blkIf, "endif"); err != nil {
			return err
		}
		c.emit("{%endif%}")
	case "for":
		return c.forStmt(p, line)
	case "endfor":
		if err := p.expectEnd(); err != nil {
			return err
		}
		b, err := c.pop(line, blkFor, "endfor")
		if err != nil {
			return err
		}
		if !b.hasElse {
			c.closeLoopBody(b)
		}
		c.emit("{%endfor%}")
	case "break", "continue":
		if err := p.expectEnd(); err != nil {
			return err
		}
		b := c.innermostLoop()
		if b == nil {
			return syntaxErr(line, "'%s' outside of a loop body is not supported", kw)
		}
		if kw == "break" {
			c.emit(fmt.Sprintf("{%%set %sctl%d.b = true%%}", rtPrefix, b.id))
		}
		c.emit("{%break%}")
	case "set":
		return c.setStmt(p, line)
	case "endset":
		if err := p.expectEnd(); err != nil {
			return err
		}
		b, err := c.pop(line, blkSet, "endset")
		if err != nil {
			return err
		}
		c.emit("{%endset%}")
		if b.filter != nil {
			s, err := c.filterChain(b.filter, fmt.Sprintf("%sfb%d", rtPrefix, b.id), line)
			if err != nil {
				return err
			}
			c.emit("{%set " + b.target + " = " + s + "%}")
		}
	case "macro":
		return c.macroStmt(p, line)
	case "endmacro":
		if err := p.expectEnd(); err != nil {
			return err
		}
		b, err := c.pop(line, blkMacro, "endmacro")
		if err != nil {
			return err
		}
		c.aliases = b.aliases
		c.inMacro--
		c.emit("{%endmacro%}")
	case "call":
		return c.callStmt(p, line)
	case "endcall":
		if err := p.expectEnd(); err != nil {
			return err
		}
		if _, err := c.pop(line, blkCall, "endcall"); err != nil {
			return err
		}
		c.emit("{%endcall%}")
	case "filter":
		chain, err := p.parseFilter(nil, true)
		if err != nil {
			return err
		}
		if err := p.expectEnd(); err != nil {
			return err
		}
		b := &block{kind: blkFilter, line: line, id: c.newID(), filter: chain}
		// Validate the chain now so errors point at the opening tag.
		if _, err := c.filterChain(chain, "x", line); err != nil {
			return err
		}
		c.push(b)
		c.emit(fmt.Sprintf("{%%set %sfb%d%%}", rtPrefix, b.id))
	case "endfilter":
		if err := p.expectEnd(); err != nil {
			return err
		}
		b, err := c.pop(line, blkFilter, "endfilter")
		if err != nil {
			return err
		}
		s, err := c.filterChain(b.filter, fmt.Sprintf("%sfb%d", rtPrefix, b.id), line)
		if err != nil {
			return err
		}
		c.emit("{%endset%}{{" + rtPrefix + "str(" + s + ")}}")
	case "generation":
		if err := p.expectEnd(); err != nil {
			return err
		}
		c.push(&block{kind: blkGeneration, line: line})
		c.emit("{%for " + rtPrefix + "once in " + rtPrefix + "one%}")
	case "endgeneration":
		if err := p.expectEnd(); err != nil {
			return err
		}
		if _, err := c.pop(line, blkGeneration, "endgeneration"); err != nil {
			return err
		}
		c.emit("{%endfor%}")
	case "print":
		e, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return err
		}
		if err := p.expectEnd(); err != nil {
			return err
		}
		s, err := c.expr(e, line)
		if err != nil {
			return err
		}
		c.emit("{{" + rtPrefix + "str(" + s + ")}}")
	default:
		return syntaxErr(line, "unsupported statement '%s'", kw)
	}
	return nil
}

// closeLoopBody ends the one-shot inner loop of a for body and relays a break.
func (c *compiler) closeLoopBody(b *block) {
	c.emit(fmt.Sprintf("{%%endfor%%}{%%if %sctl%d.b%%}{%%break%%}{%%endif%%}", rtPrefix, b.id))
	c.aliases = c.aliases[:len(c.aliases)-1]
}

func (c *compiler) forStmt(p *parser, line int) error {
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
	iterS, err := c.expr(iter, line)
	if err != nil {
		return err
	}
	b := &block{kind: blkFor, line: line, id: c.newID()}
	var head string
	if len(targets) == 2 {
		head = fmt.Sprintf("{%%for %s, %s in %siter2(%s)", targets[0], targets[1], rtPrefix, iterS)
	} else {
		head = fmt.Sprintf("{%%for %s in %siter(%s)", targets[0], rtPrefix, iterS)
	}
	if filter != nil {
		fs, err := c.expr(filter, line)
		if err != nil {
			return err
		}
		head += " if (" + fs + ")"
	}
	alias := fmt.Sprintf("%sloop%d", rtPrefix, b.id)
	c.emit(fmt.Sprintf("{%%set %sctl%d = %sns()%%}", rtPrefix, b.id, rtPrefix))
	c.emit(head + "%}")
	c.emit(fmt.Sprintf("{%%set %s = %sloopx(loop)%%}{%%for %sonce in %sone%%}", alias, rtPrefix, rtPrefix, rtPrefix))
	c.push(b)
	c.aliases = append(c.aliases, alias)
	return nil
}

func (c *compiler) setStmt(p *parser, line int) error {
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
		s, err := c.expr(e, line)
		if err != nil {
			return err
		}
		if ns != "" {
			nsS, err := c.expr(&nameExpr{name: ns}, line)
			if err != nil {
				return err
			}
			c.emit(fmt.Sprintf("{%%set %schk = %snscheck(%s, %s)%%}{%%set %s.%s = %s%%}",
				rtPrefix, rtPrefix, nsS, c.constString(name), nsS, name, s))
			return nil
		}
		c.emit("{%set " + name + " = " + s + "%}")
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
	b := &block{kind: blkSet, line: line, id: c.newID(), filter: chain, target: name}
	c.push(b)
	if chain != nil {
		if _, err := c.filterChain(chain, "x", line); err != nil {
			return err
		}
		c.emit(fmt.Sprintf("{%%set %sfb%d%%}", rtPrefix, b.id))
	} else {
		c.emit("{%set " + name + "%}")
	}
	return nil
}

func (c *compiler) macroStmt(p *parser, line int) error {
	name, err := p.expectName()
	if err != nil {
		return err
	}
	if err := checkName(name, line); err != nil {
		return err
	}
	params, names, err := c.signature(p, line)
	if err != nil {
		return err
	}
	if err := p.expectEnd(); err != nil {
		return err
	}
	c.macros[name] = names
	c.push(&block{kind: blkMacro, line: line, aliases: c.aliases})
	c.aliases = nil
	c.inMacro++
	c.emit("{%macro " + name + "(" + params + ")%}")
	return nil
}

// signature parses "(a, b=default)" of a macro or call block; defaults must be literals.
func (c *compiler) signature(p *parser, line int) (string, []string, error) {
	if err := p.expectOp("("); err != nil {
		return "", nil, err
	}
	var parts, names []string
	seenDefault := false
	for !p.isOp(")") {
		if len(parts) > 0 {
			if err := p.expectOp(","); err != nil {
				return "", nil, err
			}
		}
		n, err := p.expectName()
		if err != nil {
			return "", nil, err
		}
		if err := checkName(n, line); err != nil {
			return "", nil, err
		}
		names = append(names, n)
		if p.skipOp("=") {
			d, err := p.parseExpression()
			if err != nil {
				return "", nil, err
			}
			v, ok := constFold(d)
			if !ok {
				return "", nil, syntaxErr(line, "macro argument defaults must be literals")
			}
			parts = append(parts, n+"="+c.constValue(v))
			seenDefault = true
		} else {
			if seenDefault {
				return "", nil, syntaxErr(line, "non-default argument follows default argument")
			}
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, ", "), names, p.expectOp(")")
}

// macroCallError reports a call Jinja2 would reject when it runs: too many positional arguments or an
// unknown keyword for a macro defined in this template.
func (c *compiler) macroCallError(name string, args []expr, kwargs []kwarg, caller bool) string {
	params, ok := c.macros[name]
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

func (c *compiler) callStmt(p *parser, line int) error {
	callerArgs := ""
	if p.isOp("(") {
		sig, _, err := c.signature(p, line)
		if err != nil {
			return err
		}
		if strings.Contains(sig, "=") {
			return syntaxErr(line, "caller argument defaults are not supported")
		}
		callerArgs = "(" + sig + ")"
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
	if msg := c.macroCallError(fn.name, call.args, call.kwargs, true); msg != "" {
		return syntaxErr(line, "%s", msg)
	}
	args, err := c.args(call.args, call.kwargs, line)
	if err != nil {
		return err
	}
	fs, err := c.expr(fn, line)
	if err != nil {
		return err
	}
	c.push(&block{kind: blkCall, line: line})
	c.emit("{%call" + callerArgs + " " + fs + "(" + args + ")%}")
	return nil
}

func checkName(n string, line int) error {
	if strings.HasPrefix(n, rtPrefix) {
		return syntaxErr(line, "names starting with %q are reserved", rtPrefix)
	}
	switch n {
	case "null", "true", "false", "none", "True", "False", "None":
		return syntaxErr(line, "cannot use %q as a variable name", n)
	}
	return nil
}

// constFold evaluates literal expressions (used for macro defaults).
func constFold(e expr) (jinja.Value, bool) {
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
			return jinja.NewInt(-v.AsInt()), true
		case v.IsFloat():
			return jinja.NewFloat(-v.AsFloat()), true
		}
	case *listExpr:
		items := make([]jinja.Value, len(x.items))
		for i, it := range x.items {
			v, ok := constFold(it)
			if !ok {
				return v, false
			}
			items[i] = v
		}
		return jinja.NewList(items), true
	case *dictExpr:
		d := jinja.NewDict()
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
	return jinja.Undefined(), false
}

var binOps = map[string]string{
	"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow",
}

var cmpOps = map[string]string{
	"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "in": "in", "not in": "notin",
}

// expr compiles one expression to target-engine source.
func (c *compiler) expr(e expr, line int) (string, error) {
	switch x := e.(type) {
	case *constExpr:
		if x.v.IsString() {
			return c.constString(x.v.AsString()), nil
		}
		return c.constValue(x.v), nil
	case *nameExpr:
		if err := checkName(x.name, line); err != nil {
			return "", err
		}
		if x.name == "loop" && len(c.aliases) > 0 {
			return c.aliases[len(c.aliases)-1], nil
		}
		if c.inMacro > 0 && (x.name == "varargs" || x.name == "kwargs") {
			return "", syntaxErr(line, "macro %s is not supported", x.name)
		}
		return x.name, nil
	case *getattrExpr:
		o, err := c.expr(x.obj, line)
		if err != nil {
			return "", err
		}
		return rtPrefix + "getattr(" + o + ", " + c.constString(x.attr) + ")", nil
	case *getitemExpr:
		return c.call("getitem", line, x.obj, x.key)
	case *sliceExpr:
		parts := []string{}
		for _, p := range []expr{x.obj, x.start, x.stop, x.step} {
			if p == nil {
				parts = append(parts, "none")
				continue
			}
			s, err := c.expr(p, line)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return rtPrefix + "slice(" + strings.Join(parts, ", ") + ")", nil
	case *callExpr:
		return c.callExpr(x, line)
	case *filterExpr:
		return c.filterChain(x, "", line)
	case *testExpr:
		if _, ok := tests[x.name]; !ok {
			return c.unknown("test", x.name, line)
		}
		o, err := c.expr(x.node, line)
		if err != nil {
			return "", err
		}
		args, err := c.args(x.args, x.kwargs, line)
		if err != nil {
			return "", err
		}
		s := rtPrefix + "t_" + x.name + "(" + o
		if args != "" {
			s += ", " + args
		}
		s += ")"
		if x.negated {
			s = "(not " + s + ")"
		}
		return s, nil
	case *binExpr:
		if x.op == "and" || x.op == "or" {
			l, err := c.expr(x.l, line)
			if err != nil {
				return "", err
			}
			r, err := c.expr(x.r, line)
			if err != nil {
				return "", err
			}
			return "(" + l + " " + x.op + " " + r + ")", nil
		}
		return c.call(binOps[x.op], line, x.l, x.r)
	case *unaryExpr:
		switch x.op {
		case "not":
			s, err := c.expr(x.x, line)
			return "(not " + s + ")", err
		case "-":
			return c.call("neg", line, x.x)
		default:
			return c.call("pos", line, x.x)
		}
	case *compareExpr:
		left := x.first
		var parts []string
		for i, op := range x.ops {
			s, err := c.call(cmpOps[op], line, left, x.rest[i])
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
			left = x.rest[i]
		}
		if len(parts) == 1 {
			return parts[0], nil
		}
		return "(" + strings.Join(parts, " and ") + ")", nil
	case *condExpr:
		c.condExpr++
		defer func() { c.condExpr-- }()
		a, err := c.expr(x.a, line)
		if err != nil {
			return "", err
		}
		t, err := c.expr(x.test, line)
		if err != nil {
			return "", err
		}
		if x.b == nil {
			return "(" + a + " if " + t + " else " + rtPrefix + "undef)", nil
		}
		b, err := c.expr(x.b, line)
		if err != nil {
			return "", err
		}
		return "(" + a + " if " + t + " else " + b + ")", nil
	case *concatExpr:
		return c.call("concat", line, x.items...)
	case *listExpr:
		if x.tuple {
			return c.call("tuple", line, x.items...)
		}
		s, err := c.list(x.items, line)
		return "[" + s + "]", err
	case *dictExpr:
		var all []expr
		for i := range x.keys {
			all = append(all, x.keys[i], x.vals[i])
		}
		return c.call("dict", line, all...)
	}
	return "", syntaxErr(line, "unsupported expression %T", e)
}

func (c *compiler) list(items []expr, line int) (string, error) {
	parts := make([]string, len(items))
	for i, it := range items {
		s, err := c.expr(it, line)
		if err != nil {
			return "", err
		}
		parts[i] = s
	}
	return strings.Join(parts, ", "), nil
}

func (c *compiler) call(fn string, line int, operands ...expr) (string, error) {
	s, err := c.list(operands, line)
	return rtPrefix + fn + "(" + s + ")", err
}

func (c *compiler) args(args []expr, kwargs []kwarg, line int) (string, error) {
	s, err := c.list(args, line)
	if err != nil {
		return "", err
	}
	parts := []string{}
	if s != "" {
		parts = append(parts, s)
	}
	for _, kw := range kwargs {
		if err := checkName(kw.name, line); err != nil {
			return "", err
		}
		v, err := c.expr(kw.val, line)
		if err != nil {
			return "", err
		}
		parts = append(parts, kw.name+"="+v)
	}
	return strings.Join(parts, ", "), nil
}

func (c *compiler) callExpr(x *callExpr, line int) (string, error) {
	switch fn := x.fn.(type) {
	case *getattrExpr:
		o, err := c.expr(fn.obj, line)
		if err != nil {
			return "", err
		}
		args, err := c.args(x.args, x.kwargs, line)
		if err != nil {
			return "", err
		}
		s := rtPrefix + "callattr(" + o + ", " + c.constString(fn.attr)
		if args != "" {
			s += ", " + args
		}
		return s + ")", nil
	case *nameExpr:
		f, err := c.expr(fn, line)
		if err != nil {
			return "", err
		}
		if (fn.name == "dict" || fn.name == "namespace") && len(x.kwargs) > 0 {
			// Keyword order matters for dicts; the target engine passes keywords as a Go map, so
			// pass their names and values positionally.
			names := make([]jinja.Value, len(x.kwargs))
			vals := make([]expr, len(x.kwargs))
			for i, kw := range x.kwargs {
				names[i] = jinja.NewString(kw.name)
				vals[i] = kw.val
			}
			pos, err := c.list(x.args, line)
			if err != nil {
				return "", err
			}
			kv, err := c.list(vals, line)
			if err != nil {
				return "", err
			}
			s := rtPrefix + "callkw(" + f + ", " + c.constValue(jinja.NewList(names)) + ", " + c.constValue(jinja.NewInt(int64(len(x.args))))
			if pos != "" {
				s += ", " + pos
			}
			return s + ", " + kv + ")", nil
		}
		if msg := c.macroCallError(fn.name, x.args, x.kwargs, false); msg != "" {
			return rtPrefix + "fail(" + c.constString(msg) + ")", nil
		}
		args, err := c.args(x.args, x.kwargs, line)
		if err != nil {
			return "", err
		}
		return f + "(" + args + ")", nil
	}
	f, err := c.expr(x.fn, line)
	if err != nil {
		return "", err
	}
	args, err := c.args(x.args, x.kwargs, line)
	if err != nil {
		return "", err
	}
	s := rtPrefix + "call(" + f
	if args != "" {
		s += ", " + args
	}
	return s + ")", nil
}

// filterChain compiles a filter expression; when the chain's innermost node is nil (a filter block
// or filtered set), input names the variable holding the block's rendered body.
func (c *compiler) filterChain(x expr, input string, line int) (string, error) {
	f, ok := x.(*filterExpr)
	if !ok {
		if x == nil {
			return input, nil
		}
		return c.expr(x, line)
	}
	if _, ok := filters[f.name]; !ok {
		return c.unknown("filter", f.name, line)
	}
	inner, err := c.filterChain(f.node, input, line)
	if err != nil {
		return "", err
	}
	args, err := c.args(f.args, f.kwargs, line)
	if err != nil {
		return "", err
	}
	s := rtPrefix + "f_" + f.name + "(" + inner
	if args != "" {
		s += ", " + args
	}
	return s + ")", nil
}
