package cli

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Render writes the effective configuration as a job file: every setting the defaults do not decide, at its key,
// followed by a comment saying where it came from; the defaults as comments; the job file's keys of other
// commands as the file gave them; the notes. Values are redacted (Redact): what Render writes holds no
// credential (a credential setting is a comment), and loaded as a job file it gives the command the same
// settings.
func (e *Effective) Render() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# draftflow %s: effective configuration", e.Command)
	if e.File != "" {
		fmt.Fprintf(&b, " (job file %s)", e.File)
	}
	b.WriteString("\n# value  # where it came from: file:line, $VARIABLE, --flag; (default) lines are comments\n")
	values := append(append([]Value(nil), e.Values...), e.Unused...)
	// Shared keys, then each group's, each in order of first appearance.
	var groups []string
	byGroup := map[string][]Value{}
	for _, v := range values {
		g, _ := splitKey(v.Key)
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], v)
	}
	rows := func(vs []Value, indent string) {
		for _, v := range vs {
			_, name := splitKey(v.Key)
			where := v.Origin
			switch {
			case v.Source == FromDefault:
				line := indent + "# " + name + ":"
				if v.Default != "" {
					line += " " + scalar(v.Default)
				}
				b.WriteString(line + "\n")
				continue
			case v.Credential:
				writeLine(&b, indent+"# "+name+": [redacted]", where+" (a credential: not written out)")
				continue
			case v.Flag == "":
				where += ", not used by draftflow " + e.Command
			case v.Flag != name && v.Source != FromFlag:
				where += " (--" + v.Flag + ")"
			}
			if !v.Repeatable {
				writeLine(&b, indent+name+": "+scalar(Redact(v.Texts[0])), where)
				continue
			}
			writeLine(&b, indent+name+":", where)
			for _, x := range v.Texts {
				b.WriteString(indent + "  - " + scalar(Redact(x)) + "\n")
			}
		}
	}
	for _, g := range groups {
		if g == "" {
			rows(byGroup[g], "")
			continue
		}
		b.WriteString(g + ":\n")
		if !hasSet(byGroup[g]) {
			// A group with defaults only: an empty mapping keeps the document valid.
			b.Truncate(b.Len() - 1)
			b.WriteString(" {}\n")
		}
		rows(byGroup[g], "  ")
	}
	for _, n := range e.Notes {
		b.WriteString("# " + n + "\n")
	}
	return b.Bytes()
}

func hasSet(vs []Value) bool {
	for _, v := range vs {
		if v.Source != FromDefault {
			return true
		}
	}
	return false
}

// writeLine writes text and its comment, the comments of a block aligned at column 48 where the text allows.
func writeLine(b *bytes.Buffer, text, comment string) {
	pad := max(2, 48-len(text))
	b.WriteString(text + strings.Repeat(" ", pad) + "# " + comment + "\n")
}

// splitKey returns a key's group and name.
func splitKey(key string) (group, name string) {
	if g, n, ok := strings.Cut(key, "."); ok {
		return g, n
	}
	return "", key
}

// scalar writes s as a YAML scalar whose value reads back as s: plain where YAML reads it so, else quoted.
func scalar(s string) string {
	if s != "" && !strings.ContainsAny(s, "\n\r\t") && !strings.HasPrefix(s, " ") && !strings.HasSuffix(s, " ") {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte("k: "+s), &n); err == nil && len(n.Content) == 1 && len(n.Content[0].Content) == 2 {
			if v := n.Content[0].Content[1]; v.Kind == yaml.ScalarNode && v.Value == s && v.Tag != "!!null" && v.Style == 0 {
				return s
			}
		}
	}
	out, err := yaml.Marshal(s)
	if q := strings.TrimSuffix(string(out), "\n"); err == nil && !strings.Contains(q, "\n") {
		return q
	}
	return strconv.Quote(s) // a YAML double-quoted scalar too
}
