package kimi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/stages/tokenize/chattemplate"
)

// DeepSort is the override's deep_sort_dict on JSON text: every object's keys sorted (Python
// sorted() on str, which is code-point order, as Go's byte order of UTF-8 is), lists kept in order,
// scalars kept as written. The result is compact.
func DeepSort(doc json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := deepSort(&b, bytes.TrimSpace(doc)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func deepSort(b *bytes.Buffer, raw json.RawMessage) error {
	switch kindOf(raw) {
	case '{':
		keys, m, err := objectOf(raw)
		if err != nil {
			return err
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			if err := deepSort(b, m[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case '[':
		items, err := list(raw)
		if err != nil {
			return err
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := deepSort(b, it); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		if !json.Valid(raw) {
			return fmt.Errorf("kimi: invalid JSON %.40q", raw)
		}
		return json.Compact(b, raw)
	}
	return nil
}

// kindOf classifies a JSON value by its first byte: '{', '[', '"', 'n' (null), 't'/'f' (bool) or
// '0' (number).
func kindOf(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	switch c := raw[0]; c {
	case '{', '[', '"', 'n', 't', 'f':
		return c
	}
	return '0'
}

// object decodes a JSON object: its keys sorted and its values by key (a repeated key keeps its last
// value, as json.loads does).
func objectOf(raw json.RawMessage) ([]string, map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("kimi: %w", err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, m, nil
}

func list(raw json.RawMessage) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("kimi: %w", err)
	}
	return items, nil
}

func str(raw json.RawMessage) (string, bool) {
	if kindOf(raw) != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// isFloat reports a JSON number json.loads reads as a float.
func isFloat(raw json.RawMessage) bool {
	return kindOf(raw) == '0' && bytes.ContainsAny(raw, ".eE")
}

// truthy is Python truthiness of the decoded value.
func truthy(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	switch kindOf(raw) {
	case 'n', 'f', 0:
		return false
	case 't':
		return true
	case '"':
		return string(raw) != `""`
	case '[':
		items, _ := list(raw)
		return len(items) > 0
	case '{':
		keys, _, _ := objectOf(raw)
		return len(keys) > 0
	}
	if isFloat(raw) {
		f, _ := strconv.ParseFloat(string(raw), 64)
		return f != 0
	}
	n, ok := new(big.Int).SetString(string(raw), 10)
	return !ok || n.Sign() != 0
}

// pyStr is Python's str() of the decoded value.
func pyStr(raw json.RawMessage) (string, error) {
	return chattemplate.PythonStr(raw)
}

// has reports whether a decoded object has key k.
func has(m map[string]json.RawMessage, k string) bool {
	_, ok := m[k]
	return ok
}

// get is dict.get(k) (None when absent).
func get(m map[string]json.RawMessage, k string) json.RawMessage {
	if v, ok := m[k]; ok {
		return v
	}
	return json.RawMessage("null")
}

// formatDescription is _format_description: each line commented, empty lines left empty.
func formatDescription(description, indent string) string {
	lines := strings.Split(description, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = indent + "// " + l
		}
	}
	return strings.Join(lines, "\n")
}

// pythonJSON is json.dumps(value, ensure_ascii=False).
func pythonJSON(raw json.RawMessage) (string, error) {
	return chattemplate.PythonJSON(raw, false)
}
