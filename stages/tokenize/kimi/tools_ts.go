package kimi

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// This file is tool_declaration_ts.py (Kimi-K2.5) in Go: tool schemas rendered as a TypeScript-like
// namespace. It follows the Python statement by statement, including where the Python raises (an
// unsupported schema makes the override fall back to JSON tools), because the output must be
// byte-identical. Tools arrive deep-sorted (DeepSort), so every object's keys are in sorted order,
// which is the order the Python iterates them in.

const (
	tsIndent         = "  "
	tsFieldDelimiter = ",\n"
)

// errTS is an exception the Python conversion raises; the override then passes no tools_ts_str.
var errTS = errors.New("typescript conversion failed")

func tsErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errTS, fmt.Sprintf(format, args...))
}

// pyValue is what a to_typescript_style call returns: a str, or (for a scalar whose "type" is not a
// string) the JSON value itself.
type pyValue struct {
	s   string
	raw json.RawMessage // non-nil when the value is not a str
}

// fstring is the value formatted in an f-string: str() of it.
func (v pyValue) fstring() (string, error) {
	if v.raw == nil {
		return v.s, nil
	}
	return pyStr(v.raw)
}

// concat is the value used with + or str.join, which need a str.
func (v pyValue) concat() (string, error) {
	if v.raw != nil {
		return "", tsErr("TypeError: can only concatenate str")
	}
	return v.s, nil
}

type tsType interface {
	ts(indent string) (pyValue, error)
	docstring(indent string) (string, error)
}

// base is _BaseType: a description and the allowed constraints.
type base struct {
	description json.RawMessage
	constraints []string // "k: str(v)", sorted by key
}

func newBase(extra map[string]json.RawMessage, allowed ...string) (base, error) {
	b := base{description: extra["description"]}
	if b.description == nil {
		b.description = json.RawMessage(`""`)
	}
	keys := make([]string, 0, len(allowed))
	for _, k := range allowed {
		if has(extra, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, err := pyStr(extra[k])
		if err != nil {
			return b, err
		}
		b.constraints = append(b.constraints, k+": "+s)
	}
	return b, nil
}

func (b base) docstring(indent string) (string, error) {
	var out strings.Builder
	if truthy(b.description) {
		d, ok := str(b.description)
		if !ok {
			return "", tsErr("AttributeError: description has no split")
		}
		out.WriteString(formatDescription(d, indent))
		out.WriteByte('\n')
	}
	if len(b.constraints) > 0 {
		out.WriteString(indent + "// " + strings.Join(b.constraints, ", ") + "\n")
	}
	return out.String(), nil
}

// scalar is _ParameterTypeScalar.
type scalar struct {
	base
	typ json.RawMessage
}

func newScalar(typ json.RawMessage, extra map[string]json.RawMessage) (*scalar, error) {
	var allowed []string
	switch s, _ := str(typ); {
	case kindOf(typ) == '"' && s == "string":
		allowed = []string{"maxLength", "minLength", "pattern"}
	case kindOf(typ) == '"' && (s == "number" || s == "integer"):
		allowed = []string{"maximum", "minimum"}
	}
	b, err := newBase(extra, allowed...)
	return &scalar{b, typ}, err
}

func builtinScalar(name string) *scalar {
	t, _ := json.Marshal(name)
	return &scalar{base{description: json.RawMessage(`""`)}, t}
}

func (s *scalar) ts(string) (pyValue, error) {
	if name, ok := str(s.typ); ok {
		if name == "integer" {
			return pyValue{s: "number"}, nil
		}
		return pyValue{s: name}, nil
	}
	return pyValue{raw: s.typ}, nil
}

// parameter is _Parameter.
type parameter struct {
	typ      tsType
	name     string
	optional bool
	def      json.RawMessage // nil: None
}

func (p *parameter) ts(indent string) (string, error) {
	comments, err := p.typ.docstring(indent)
	if err != nil {
		return "", err
	}
	if p.def != nil && kindOf(p.def) != 'n' {
		var repr string
		switch kindOf(p.def) {
		case '0', 't', 'f': // int, float, bool: repr()
			repr, err = pyStr(p.def)
		default:
			repr, err = pythonJSON(p.def)
		}
		if err != nil {
			return "", err
		}
		comments += indent + "// Default: " + repr + "\n"
	}
	t, err := p.typ.ts(indent)
	if err != nil {
		return "", err
	}
	ts, err := t.fstring()
	if err != nil {
		return "", err
	}
	opt := ""
	if p.optional {
		opt = "?"
	}
	return comments + indent + p.name + opt + ": " + ts, nil
}

// object is _ParameterTypeObject.
type object struct {
	base
	properties []*parameter
	additional json.RawMessage // nil: None; a dict is parsed into additionalType
	additType  tsType
}

func newObject(schema json.RawMessage, reg *registry) (*object, error) {
	if kindOf(schema) != '{' {
		return nil, tsErr("AttributeError: %.20s has no get", schema)
	}
	keys, m, err := objectOf(schema)
	if err != nil {
		return nil, err
	}
	b, err := newBase(m)
	if err != nil {
		return nil, err
	}
	o := &object{base: b}
	if len(keys) == 0 {
		return o, nil
	}
	if has(m, "$defs") {
		if err := reg.register(m["$defs"]); err != nil {
			return nil, err
		}
	}
	if ap := get(m, "additionalProperties"); kindOf(ap) != 'n' {
		o.additional = ap
		if kindOf(ap) == '{' {
			if o.additType, err = parseType(ap, reg); err != nil {
				return nil, err
			}
		}
	}
	if !has(m, "properties") {
		return o, nil
	}
	required := m["required"]
	if required == nil {
		required = json.RawMessage("[]")
	}
	req, err := pySet(required)
	if err != nil {
		return nil, err
	}
	props := m["properties"]
	if kindOf(props) != '{' {
		return nil, tsErr("AttributeError: properties has no keys")
	}
	names, pm, err := objectOf(props)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		prop := pm[name]
		t, err := parseType(prop, reg)
		if err != nil {
			return nil, err
		}
		p := &parameter{typ: t, name: name, optional: !req[`"`+name]}
		if kindOf(prop) == '{' {
			_, propMap, _ := objectOf(prop)
			p.def = propMap["default"]
		}
		o.properties = append(o.properties, p)
	}
	return o, nil
}

// pySet is set(x) for the "required" value, as the keys it can match a property name with: strings
// are keyed as `"`+s, anything else can never equal a name. Unhashable members or a non-iterable
// value raise TypeError.
func pySet(raw json.RawMessage) (map[string]bool, error) {
	out := map[string]bool{}
	switch kindOf(raw) {
	case '[':
		items, err := list(raw)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			switch kindOf(it) {
			case '[', '{':
				return nil, tsErr("TypeError: unhashable type")
			case '"':
				s, _ := str(it)
				out[`"`+s] = true
			}
		}
	case '"':
		s, _ := str(raw)
		for _, r := range s {
			out[`"`+string(r)] = true
		}
	case '{':
		keys, _, err := objectOf(raw)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			out[`"`+k] = true
		}
	default:
		return nil, tsErr("TypeError: object is not iterable")
	}
	return out, nil
}

func (o *object) ts(indent string) (pyValue, error) {
	var required, optional []*parameter
	for _, p := range o.properties {
		if p.optional {
			optional = append(optional, p)
		} else {
			required = append(required, p)
		}
	}
	byName := func(ps []*parameter) {
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	}
	byName(required)
	byName(optional)
	var parts []string
	for _, p := range append(required, optional...) {
		s, err := p.ts(indent + tsIndent)
		if err != nil {
			return pyValue{}, err
		}
		parts = append(parts, s)
	}
	if o.additional != nil {
		var ap string
		switch kindOf(o.additional) {
		case 't':
			ap = "any"
		case 'f':
			ap = "never"
		case '{':
			v, err := o.additType.ts(indent + tsIndent)
			if err != nil {
				return pyValue{}, err
			}
			if ap, err = v.fstring(); err != nil {
				return pyValue{}, err
			}
		default:
			return pyValue{}, tsErr("ValueError: Unknown additionalProperties")
		}
		parts = append(parts, indent+tsIndent+"[k: string]: "+ap)
	}
	if len(parts) == 0 {
		return pyValue{s: "{}"}, nil
	}
	return pyValue{s: "{\n" + strings.Join(parts, tsFieldDelimiter) + "\n" + indent + "}"}, nil
}

// array is _ParameterTypeArray.
type array struct {
	base
	item tsType
}

func newArray(m map[string]json.RawMessage, reg *registry) (*array, error) {
	b, err := newBase(m, "minItems", "maxItems")
	if err != nil {
		return nil, err
	}
	a := &array{base: b}
	if items := get(m, "items"); truthy(items) {
		a.item, err = parseType(items, reg)
		return a, err
	}
	a.item = builtinScalar("any")
	return a, nil
}

func (a *array) ts(indent string) (pyValue, error) {
	doc, err := a.item.docstring(indent + tsIndent)
	if err != nil {
		return pyValue{}, err
	}
	if doc != "" {
		v, err := a.item.ts(indent + tsIndent)
		if err != nil {
			return pyValue{}, err
		}
		s, err := v.concat()
		if err != nil {
			return pyValue{}, err
		}
		return pyValue{s: "Array<\n" + doc + indent + tsIndent + s + "\n" + indent + ">"}, nil
	}
	v, err := a.item.ts(indent)
	if err != nil {
		return pyValue{}, err
	}
	s, err := v.fstring()
	return pyValue{s: "Array<" + s + ">"}, err
}

// enum is _ParameterTypeEnum.
type enum struct {
	base
	values []json.RawMessage
}

func newEnum(m map[string]json.RawMessage) (*enum, error) {
	b, err := newBase(m)
	if err != nil {
		return nil, err
	}
	e := &enum{base: b}
	raw := m["enum"]
	switch kindOf(raw) {
	case '[':
		if e.values, err = list(raw); err != nil {
			return nil, err
		}
	case '"':
		s, _ := str(raw)
		for _, r := range s {
			c, _ := json.Marshal(string(r))
			e.values = append(e.values, c)
		}
	case '{':
		keys, _, err := objectOf(raw)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			c, _ := json.Marshal(k)
			e.values = append(e.values, c)
		}
	default: // not iterable: validating or rendering it raises TypeError
		return nil, tsErr("TypeError: enum is not iterable")
	}
	if !has(m, "type") {
		return e, nil
	}
	typ := m["type"]
	if kindOf(typ) == '[' {
		ts, _ := list(typ)
		switch len(ts) {
		case 1:
			typ = ts[0]
		case 2:
			isNull := func(r json.RawMessage) bool { s, ok := str(r); return ok && s == "null" }
			if !isNull(ts[0]) && !isNull(ts[1]) {
				return nil, tsErr("ValueError: Enum type is not supported")
			}
			typ = ts[0]
			if isNull(ts[0]) {
				typ = ts[1]
			}
		default:
			return nil, tsErr("ValueError: Enum type is not supported")
		}
	}
	name, _ := str(typ)
	if kindOf(typ) != '"' {
		name = ""
	}
	for _, v := range e.values {
		k := kindOf(v)
		if k == 'n' {
			continue
		}
		ok := true
		switch name {
		case "string":
			ok = k == '"'
		case "number":
			ok = k == '0' || k == 't' || k == 'f'
		case "integer":
			ok = (k == '0' && !isFloat(v)) || k == 't' || k == 'f'
		case "boolean":
			ok = k == 't' || k == 'f'
		}
		if !ok {
			return nil, tsErr("ValueError: Enum value is not a %s", name)
		}
	}
	return e, nil
}

func (e *enum) ts(string) (pyValue, error) {
	parts := make([]string, len(e.values))
	for i, v := range e.values {
		if s, ok := str(v); ok {
			parts[i] = `"` + s + `"`
			continue
		}
		s, err := pyStr(v)
		if err != nil {
			return pyValue{}, err
		}
		parts[i] = s
	}
	return pyValue{s: strings.Join(parts, " | ")}, nil
}

// anyOf is _ParameterTypeAnyOf.
type anyOf struct {
	base
	types []tsType
}

func newAnyOf(m map[string]json.RawMessage, reg *registry) (*anyOf, error) {
	b, err := newBase(m)
	if err != nil {
		return nil, err
	}
	a := &anyOf{base: b}
	raw := m["anyOf"]
	var items []json.RawMessage
	switch kindOf(raw) {
	case '[':
		if items, err = list(raw); err != nil {
			return nil, err
		}
	case '"', '{':
		if truthy(raw) { // iterating a str or a dict yields str items, which are not schemas
			return nil, tsErr("AttributeError: str has no get")
		}
	default:
		return nil, tsErr("TypeError: anyOf is not iterable")
	}
	for _, it := range items {
		t, err := parseType(it, reg)
		if err != nil {
			return nil, err
		}
		a.types = append(a.types, t)
	}
	return a, nil
}

func (a *anyOf) ts(indent string) (pyValue, error) {
	parts := make([]string, len(a.types))
	for i, t := range a.types {
		v, err := t.ts(indent)
		if err != nil {
			return pyValue{}, err
		}
		if parts[i], err = v.concat(); err != nil {
			return pyValue{}, err
		}
	}
	return pyValue{s: strings.Join(parts, " | ")}, nil
}

// union is _ParameterTypeUnion: a list of type names.
type union struct {
	base
	types []string
}

var unionNames = map[string]string{
	"string": "string", "number": "number", "integer": "number", "boolean": "boolean",
	"null": "null", "object": "{}", "array": "Array<any>",
}

func newUnion(m map[string]json.RawMessage) (*union, error) {
	b, err := newBase(m)
	if err != nil {
		return nil, err
	}
	u := &union{base: b}
	items, err := list(m["type"])
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		s, ok := str(it)
		name, known := unionNames[s]
		if !ok || !known {
			return nil, tsErr("KeyError: %s", it)
		}
		u.types = append(u.types, name)
	}
	return u, nil
}

func (u *union) ts(string) (pyValue, error) { return pyValue{s: strings.Join(u.types, " | ")}, nil }

// ref is _ParameterTypeRef.
type ref struct {
	base
	name string
}

func newRef(m map[string]json.RawMessage, reg *registry) (*ref, error) {
	b, err := newBase(m)
	if err != nil {
		return nil, err
	}
	target, ok := str(m["$ref"])
	if !ok {
		return nil, tsErr("AttributeError: $ref is not a str")
	}
	resolved, err := reg.resolve(target)
	if err != nil {
		return nil, err
	}
	if kindOf(resolved) != '{' {
		return nil, tsErr("AttributeError: resolved schema has no get")
	}
	_, rm, err := objectOf(resolved)
	if err != nil {
		return nil, err
	}
	if truthy(get(rm, "$self_ref")) {
		return &ref{b, "parameters"}, nil
	}
	parts := strings.Split(target, "/")
	return &ref{b, parts[len(parts)-1]}, nil
}

func (r *ref) ts(string) (pyValue, error) { return pyValue{s: r.name}, nil }

// registry is _SchemaRegistry: $defs by name, in insertion order.
type registry struct {
	names   []string
	defs    map[string]json.RawMessage
	selfRef bool
}

func (r *registry) register(defs json.RawMessage) error {
	if !truthy(defs) {
		return nil
	}
	if kindOf(defs) != '{' {
		return tsErr("AttributeError: $defs has no items")
	}
	keys, m, err := objectOf(defs)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, seen := r.defs[k]; !seen {
			r.names = append(r.names, k)
		}
		r.defs[k] = m[k]
	}
	return nil
}

func (r *registry) resolve(target string) (json.RawMessage, error) {
	if target == "#" {
		r.selfRef = true
		return json.RawMessage(`{"$self_ref":true}`), nil
	}
	if strings.HasPrefix(target, "#/$defs/") {
		parts := strings.Split(target, "/")
		def, ok := r.defs[parts[len(parts)-1]]
		if !ok {
			return nil, tsErr("ValueError: Reference not found: %s", target)
		}
		return def, nil
	}
	return nil, tsErr("ValueError: Unsupported reference format: %s", target)
}

// parseType is _parse_parameter_type.
func parseType(schema json.RawMessage, reg *registry) (tsType, error) {
	switch kindOf(schema) {
	case 't':
		return builtinScalar("any"), nil
	case 'f':
		return builtinScalar("null"), nil
	case '{':
	default:
		return nil, tsErr("invalid JSON Schema object: %.40s", schema)
	}
	keys, m, err := objectOf(schema)
	if err != nil {
		return nil, err
	}
	switch {
	case has(m, "$ref"):
		return newRef(m, reg)
	case has(m, "anyOf"):
		return newAnyOf(m, reg)
	case has(m, "enum"):
		return newEnum(m)
	case has(m, "type"):
		typ := m["type"]
		s, isStr := str(typ)
		switch {
		case kindOf(typ) == '[':
			return newUnion(m)
		case isStr && s == "object":
			return newObject(schema, reg)
		case isStr && s == "array":
			return newArray(m, reg)
		}
		return newScalar(typ, m)
	case len(keys) == 0:
		return builtinScalar("any"), nil
	}
	return nil, tsErr("ValueError: Invalid JSON Schema object")
}

// functionTS is _openai_function_to_typescript_style.
func functionTS(fn json.RawMessage) (string, error) {
	if kindOf(fn) != '{' {
		return "", tsErr("AttributeError: function has no get")
	}
	_, fm, err := objectOf(fn)
	if err != nil {
		return "", err
	}
	reg := &registry{defs: map[string]json.RawMessage{}}
	params := get(fm, "parameters")
	if !truthy(params) {
		params = json.RawMessage("{}")
	}
	parsed, err := newObject(params, reg)
	if err != nil {
		return "", err
	}
	var interfaces []string
	root := false
	if reg.selfRef {
		root = true
		parts := make([]string, len(parsed.properties))
		for i, p := range parsed.properties {
			if parts[i], err = p.ts(tsIndent); err != nil {
				return "", err
			}
		}
		body := strings.Join(parts, tsFieldDelimiter)
		if body != "" {
			body = "\n" + body + "\n"
		}
		interfaces = append(interfaces, "interface parameters {"+body+"}")
	}
	names := append([]string(nil), reg.names...)
	defs := make(map[string]json.RawMessage, len(names))
	for _, n := range names {
		defs[n] = reg.defs[n]
	}
	for _, name := range names {
		schema := defs[name]
		t, err := parseType(schema, reg)
		if err != nil {
			return "", err
		}
		v, err := t.ts("")
		if err != nil {
			return "", err
		}
		body, err := v.fstring()
		if err != nil {
			return "", err
		}
		if kindOf(schema) != '{' {
			return "", tsErr("AttributeError: definition has no get")
		}
		_, sm, _ := objectOf(schema)
		desc := ""
		if d := get(sm, "description"); truthy(d) {
			s, ok := str(d)
			if !ok {
				return "", tsErr("AttributeError: description has no split")
			}
			desc = formatDescription(s, "") + "\n"
		}
		interfaces = append(interfaces, desc+"interface "+name+" "+body)
	}
	fname := "function"
	if raw, ok := fm["name"]; ok {
		if fname, err = pyStr(raw); err != nil {
			return "", err
		}
	}
	var typeDef string
	if root {
		typeDef = "type " + fname + " = (_: parameters) => any;"
	} else {
		v, err := parsed.ts("")
		if err != nil {
			return "", err
		}
		typeDef = "type " + fname + " = (_: " + v.s + ") => any;"
	}
	description := ""
	if d := get(fm, "description"); truthy(d) {
		s, ok := str(d)
		if !ok {
			return "", tsErr("AttributeError: description has no split")
		}
		description = formatDescription(s, "")
	}
	var out []string
	for _, s := range []string{strings.Join(interfaces, "\n"), description, typeDef} {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n"), nil
}

// ToolsTypeScript is encode_tools_to_typescript_style: the "# Tools" block of the function tools, ""
// when there are none. tools must be a deep-sorted JSON list of objects. An error means the Python
// raises, so the override passes no tools_ts_str.
func ToolsTypeScript(tools json.RawMessage) (string, error) {
	if !truthy(tools) {
		return "", nil
	}
	items, err := list(tools)
	if err != nil {
		return "", tsErr("tools is not a list")
	}
	var functions []string
	for _, tool := range items {
		if kindOf(tool) != '{' {
			return "", tsErr("AttributeError: tool has no get")
		}
		_, tm, err := objectOf(tool)
		if err != nil {
			return "", err
		}
		if s, ok := str(tm["type"]); !ok || s != "function" {
			continue
		}
		fn, ok := tm["function"]
		if !ok || !truthy(fn) {
			continue
		}
		f, err := functionTS(fn)
		if err != nil {
			return "", err
		}
		functions = append(functions, f)
	}
	if len(functions) == 0 {
		return "", nil
	}
	return "# Tools\n\n## functions\nnamespace functions {\n" + strings.Join(functions, "\n") + "\n}\n", nil
}
