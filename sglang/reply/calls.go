package reply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// CallsOf reads a dataset's original tool_calls: a JSON list (null or empty
// means none) of OpenAI-shaped entries {"id", "type", "function": {"name",
// "arguments"}} whose arguments are a JSON string holding an object or an
// object itself, or of bare {"name", "arguments"} entries. Missing or null
// arguments read as {}. It returns an error for anything else.
func CallsOf(toolCalls json.RawMessage) ([]Call, error) {
	v := bytes.TrimSpace(toolCalls)
	if len(v) == 0 || string(v) == "null" {
		return nil, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(v, &entries); err != nil {
		return nil, fmt.Errorf("reply: tool_calls is not a JSON list: %w", err)
	}
	calls := make([]Call, 0, len(entries))
	for i, e := range entries {
		var entry struct {
			ID        string          `json:"id"`
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Function  *struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if err := json.Unmarshal(e, &entry); err != nil {
			return nil, fmt.Errorf("reply: tool_calls[%d]: %w", i, err)
		}
		var name string
		var args json.RawMessage
		switch {
		case entry.Function != nil:
			name, args = entry.Function.Name, entry.Function.Arguments
		case entry.Name != nil:
			name, args = *entry.Name, entry.Arguments
		default:
			return nil, fmt.Errorf("reply: tool_calls[%d] has neither function nor name", i)
		}
		if name == "" {
			return nil, fmt.Errorf("reply: tool_calls[%d] has no name", i)
		}
		a, err := argumentsObject(args)
		if err != nil {
			return nil, fmt.Errorf("reply: tool_calls[%d] (%s): %w", i, name, err)
		}
		calls = append(calls, Call{Name: name, Arguments: a, ID: entry.ID})
	}
	return calls, nil
}

// argumentsObject accepts an object, a JSON string holding an object, or
// null/absent ({}), and returns the object compacted.
func argumentsObject(raw json.RawMessage) (json.RawMessage, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return json.RawMessage("{}"), nil
	}
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, err
		}
		if strings.TrimSpace(s) == "" {
			return json.RawMessage("{}"), nil
		}
		v = bytes.TrimSpace([]byte(s))
		if !json.Valid(v) {
			return nil, fmt.Errorf("arguments string is not valid JSON: %.80q", s)
		}
	}
	if len(v) == 0 || v[0] != '{' {
		return nil, fmt.Errorf("arguments are not a JSON object: %.80s", v)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	return json.RawMessage(b.Bytes()), nil
}

// SameCalls reports whether a and b are the same calls in the same order:
// same names, and arguments equal as JSON values (object key order ignored,
// numbers equal by value, so 1, 1.0 and 1e0 are equal and big integers are
// compared exactly; strings, arrays, booleans and null exactly). IDs are
// ignored. Arguments that are not valid JSON are never equal.
func SameCalls(a, b []Call) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
		x, errX := decodeJSON(a[i].Arguments)
		y, errY := decodeJSON(b[i].Arguments)
		if errX != nil || errY != nil || !jsonEqual(x, y) {
			return false
		}
	}
	return true
}

func decodeJSON(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil // an absent Arguments is {}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func jsonEqual(x, y any) bool {
	switch x := x.(type) {
	case map[string]any:
		y, ok := y.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := y.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := y.(json.Number)
		if !ok {
			return false
		}
		return numberEqual(string(x), string(y))
	case string:
		y, ok := y.(string)
		return ok && x == y
	case bool:
		y, ok := y.(bool)
		return ok && x == y
	case nil:
		return y == nil
	}
	return false
}

// maxExponent bounds the exponents numberEqual expands exactly: 1e999999999
// as a big.Rat would take gigabytes. Numbers beyond it compare as written.
const maxExponent = 4096

// numberEqual compares two JSON numbers by value, exactly.
func numberEqual(x, y string) bool {
	if x == y {
		return true
	}
	if hugeExponent(x) || hugeExponent(y) {
		return false
	}
	rx, okx := new(big.Rat).SetString(x)
	ry, oky := new(big.Rat).SetString(y)
	return okx && oky && rx.Cmp(ry) == 0
}

func hugeExponent(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return false
	}
	e := strings.TrimLeft(n[i+1:], "+-")
	e = strings.TrimLeft(e, "0")
	return len(e) > 4 || (len(e) == 4 && e > strconv.Itoa(maxExponent))
}
