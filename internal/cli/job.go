package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
)

// Schema is the keys of a job file: every key of the Tables it is made of (one per command that reads job
// files), each with the commands that have it and a setting that parses its values.
type Schema struct {
	keys     map[string]*SchemaKey
	order    []string // keys: the shared ones first, then by group, each in the order its first table added it
	groups   []string // the groups, in order
	commands []string // the commands, in the order given
}

// SchemaKey is one key of a Schema.
type SchemaKey struct {
	Key   string
	Group string
	// Uses are the settings of the key, one per command that has it, in the order of the tables.
	Uses []Use
	// parse is the first use's setting: ReadFile parses the file's values with it.
	parse Setting
}

// Use is one command's setting of a key.
type Use struct {
	Command string
	Setting Setting
}

// NewSchema returns the schema of tables, or the error of a table that does not build or a key whose settings
// differ in kind between two commands (one takes a list and the other one value, or they parse different
// types): a key means one thing in every command.
func NewSchema(tables ...*Table) (*Schema, error) {
	s := &Schema{keys: map[string]*SchemaKey{}}
	var errs []error
	groupSeen := map[string]bool{"": true}
	var shared, grouped []string
	for _, t := range tables {
		if len(t.errs) > 0 {
			errs = append(errs, t.errs...)
			continue
		}
		s.commands = append(s.commands, t.command)
		for _, st := range t.settings {
			k, ok := s.keys[st.Key]
			if !ok {
				k = &SchemaKey{Key: st.Key, Group: st.Group, parse: st}
				s.keys[st.Key] = k
				if st.Group == "" {
					shared = append(shared, st.Key)
				} else {
					grouped = append(grouped, st.Key)
				}
				if !groupSeen[st.Group] {
					groupSeen[st.Group] = true
					s.groups = append(s.groups, st.Group)
				}
			} else if a, b := kindOf(k.parse), kindOf(st); a != b {
				errs = append(errs, fmt.Errorf("job key %s is %s in draftflow %s but %s in draftflow %s", st.Key, a, k.Uses[0].Command, b, t.command))
			}
			k.Uses = append(k.Uses, Use{Command: t.command, Setting: st})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Grouped keys by group, in the order the groups first appear.
	rank := map[string]int{}
	for i, g := range s.groups {
		rank[g] = i
	}
	sort.SliceStable(grouped, func(i, j int) bool { return rank[s.keys[grouped[i]].Group] < rank[s.keys[grouped[j]].Group] })
	s.order = append(shared, grouped...)
	return s, nil
}

// Keys returns the schema's keys, the shared ones first, then by group.
func (s *Schema) Keys() []*SchemaKey {
	out := make([]*SchemaKey, len(s.order))
	for i, k := range s.order {
		out[i] = s.keys[k]
	}
	return out
}

// Groups returns the groups of the schema's keys (the sections of a job file), in order.
func (s *Schema) Groups() []string { return slices.Clone(s.groups) }

// Commands returns the commands whose tables make the schema.
func (s *Schema) Commands() []string { return slices.Clone(s.commands) }

// Lookup returns the key named, or nil.
func (s *Schema) Lookup(key string) *SchemaKey { return s.keys[key] }

// Type describes the values the key takes: "list" (repeatable), "bool", "int", "float", "duration", "string", or
// "text" (a value the setting parses itself).
func (k *SchemaKey) Type() string { return kindOf(k.parse) }

// kindOf names the values a setting takes.
func kindOf(s Setting) string {
	if s.Repeatable() {
		return "list"
	}
	if isBool(s.Value) {
		return "bool"
	}
	g, ok := s.Value.(flag.Getter)
	if !ok {
		return "text"
	}
	switch g.Get().(type) {
	case int, int64, uint, uint64:
		return "int"
	case float64:
		return "float"
	case time.Duration:
		return "duration"
	case string:
		return "string"
	}
	return "text"
}

func isBool(v flag.Value) bool {
	b, ok := v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// want says what a setting of kind expects, for an error.
func want(kind string) string {
	switch kind {
	case "bool":
		return "true or false"
	case "int":
		return "an integer"
	case "float":
		return "a number"
	case "duration":
		return "a duration such as 90s, 5m or 1h"
	}
	return ""
}

// secretHints are keys that would hold a secret itself: a job file names secrets by reference only.
var secretHints = map[string]string{
	"kafka-sasl-password":     "a job file holds no secret: name a file with kafka-sasl-password-file, or set DRAFTFLOW_KAFKA_SASL_PASSWORD",
	"generate.sglang-api-key": "a job file holds no secret: name a file with generate.sglang-api-key-file, or set DRAFTFLOW_SGLANG_API_KEY",
}

// Nearest returns the schema's key nearest to key (Levenshtein distance over the whole key), or, for a bare name
// that is a grouped key's name, that key ("concurrency" -> "generate.concurrency"); "" when nothing is close.
func (s *Schema) Nearest(key string) string {
	if !strings.Contains(key, ".") {
		var in []string
		for _, k := range s.order {
			if g := s.keys[k].Group; g != "" && k == g+"."+key {
				in = append(in, k)
			}
		}
		if len(in) > 0 {
			return strings.Join(in, " or ")
		}
	}
	best, bestD := "", 0
	candidates := append(slices.Clone(s.order), s.groups...)
	for _, k := range candidates {
		d := levenshtein.ComputeDistance(key, k)
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD > max(2, len(key)/2) {
		return ""
	}
	return best
}

// File is a job file read against a Schema: each key it sets, with its values as text and its line.
type File struct {
	Path   string
	values map[string]fileValue
	order  []string // keys in file order
}

type fileValue struct {
	texts []string
	line  int
}

// Origin is where the file sets key ("job.yaml:12").
func (f *File) Origin(key string) string { return fmt.Sprintf("%s:%d", f.Path, f.values[key].line) }

// Keys returns the keys the file sets, in file order.
func (f *File) Keys() []string { return slices.Clone(f.order) }

// Get returns the values the file gives key (one, or a list's items).
func (f *File) Get(key string) ([]string, bool) {
	v, ok := f.values[key]
	return v.texts, ok
}

// ReadFile reads the job file at path (YAML) against the schema. The document is a mapping: a shared key at its
// top, a group's keys in a mapping under the group's name. Every key must be the schema's, given once, with a
// value of its kind (a scalar; a list of scalars for a repeatable setting), which its setting parses: the first
// key that is not is the error, naming the file, the line, the key and, for an unknown key, the nearest valid one.
func ReadFile(path string, s *Schema) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseFile(path, b, s)
}

// ParseFile is ReadFile of a document already read; path names it in errors.
func ParseFile(path string, data []byte, s *Schema) (*File, error) {
	f := &File{Path: path, values: map[string]fileValue{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err == io.EOF {
		return f, nil // empty: every setting keeps its default
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err != io.EOF {
		return nil, fmt.Errorf("%s:%d: a job file is one YAML document", path, more.Line)
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = resolve(root.Content[0])
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: a job file is a mapping of keys to values", path, root.Line)
	}
	groups := map[string]bool{}
	for _, g := range s.groups {
		groups[g] = true
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		name, val := root.Content[i], resolve(root.Content[i+1])
		if groups[name.Value] {
			if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
				continue // an empty group
			}
			if val.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("%s:%d: %s: a group of settings: want a mapping of its keys (%s: {key: value})", path, val.Line, name.Value, name.Value)
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				if err := f.add(s, seen, name.Value+"."+val.Content[j].Value, val.Content[j], resolve(val.Content[j+1])); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err := f.add(s, seen, name.Value, name, val); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// add checks and records key (its name node at keyNode, its value val).
func (f *File) add(s *Schema, seen map[string]int, key string, keyNode, val *yaml.Node) error {
	at := fmt.Sprintf("%s:%d", f.Path, keyNode.Line)
	k := s.keys[key]
	if k == nil {
		msg := fmt.Sprintf("%s: unknown key %s", at, key)
		if hint, ok := secretHints[key]; ok {
			return errors.New(msg + ": " + hint)
		}
		if near := s.Nearest(key); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		return errors.New(msg)
	}
	if line, ok := seen[key]; ok {
		return fmt.Errorf("%s: %s is given twice (first on line %d)", at, key, line)
	}
	seen[key] = keyNode.Line
	kind := kindOf(k.parse)
	var texts []string
	switch val.Kind {
	case yaml.ScalarNode:
		if val.Tag == "!!null" {
			return fmt.Errorf("%s: %s has no value (leave the key out to keep the default)", at, key)
		}
		texts = []string{val.Value}
	case yaml.SequenceNode:
		if kind != "list" {
			return fmt.Errorf("%s: %s takes one value, not a list", at, key)
		}
		for _, item := range val.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return fmt.Errorf("%s:%d: %s: each item of the list is one value", f.Path, item.Line, key)
			}
			texts = append(texts, item.Value)
		}
	default:
		w := "one value"
		if kind == "list" {
			w = "a value or a list of values"
		}
		return fmt.Errorf("%s: %s takes %s, not a mapping", at, key, w)
	}
	for _, x := range texts {
		if err := k.parse.Value.Set(x); err != nil {
			msg := fmt.Sprintf("%s: %s: invalid value %q: %v", at, key, shown(k.parse.Credential(), x), err)
			if w := want(kind); w != "" {
				msg += " (want " + w + ")"
			}
			return errors.New(msg)
		}
	}
	f.values[key] = fileValue{texts: texts, line: keyNode.Line}
	f.order = append(f.order, key)
	return nil
}
