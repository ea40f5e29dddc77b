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
	b.WriteString("\n# each value is followed by where it came from: default (a comment), file FILE:LINE, env $VARIABLE or flag --name\n")
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
			where := v.Source.String() + " " + v.Origin
			switch {
			case v.Source == FromDefault:
				line := indent + "# " + name + ":"
				if v.Default != "" {
					line += " " + scalar(v.Default)
				}
				writeLine(&b, line, "default")
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

// Markdown returns the schema as Markdown: per group (the shared keys first) a table of its keys, each with the
// flags that set it in each command, its type, default, environment variable (env, by key) and usage.
func (s *Schema) Markdown(env map[string]string) string {
	var b strings.Builder
	for _, g := range append([]string{""}, s.groups...) {
		if g == "" {
			b.WriteString("#### Shared keys (top level)\n\n")
		} else {
			fmt.Fprintf(&b, "#### `%s:`\n\n", g)
		}
		b.WriteString("| key | flag: commands | type | default | env | what |\n|---|---|---|---|---|---|\n")
		for _, k := range s.Keys() {
			if k.Group != g {
				continue
			}
			_, name := splitKey(k.Key)
			usage := k.Uses[0].Setting.Usage
			for _, u := range k.Uses { // the usage of the command that defines it under its own name
				if u.Setting.Name == name {
					usage = u.Setting.Usage
					break
				}
			}
			e := ""
			if v := env[k.Key]; v != "" {
				e = "`" + v + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", name, k.flags(len(s.commands)), k.Type(), k.defaults(), e, cell(usage))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// flags lists the key's flags and the commands that have each: "`--lane`: generate; `--generate-lane`: run", or
// "every command" for a flag of all commands (of commands).
func (k *SchemaKey) flags(commands int) string {
	var names []string
	cmds := map[string][]string{}
	for _, u := range k.Uses {
		if _, ok := cmds[u.Setting.Name]; !ok {
			names = append(names, u.Setting.Name)
		}
		cmds[u.Setting.Name] = append(cmds[u.Setting.Name], u.Command)
	}
	var parts []string
	for _, n := range names {
		if len(cmds[n]) == commands {
			parts = append(parts, fmt.Sprintf("`--%s`: every command", n))
			continue
		}
		parts = append(parts, fmt.Sprintf("`--%s`: %s", n, strings.Join(cmds[n], ", ")))
	}
	return strings.Join(parts, "; ")
}

// defaults is the key's default, or each command's where they differ.
func (k *SchemaKey) defaults() string {
	var vals []string
	cmds := map[string][]string{}
	for _, u := range k.Uses {
		d := u.Setting.Default
		if _, ok := cmds[d]; !ok {
			vals = append(vals, d)
		}
		cmds[d] = append(cmds[d], u.Command)
	}
	show := func(d string) string {
		if d == "" {
			return ""
		}
		return "`" + d + "`"
	}
	if len(vals) == 1 {
		return cell(show(vals[0]))
	}
	var parts []string
	for _, d := range vals {
		s := show(d)
		if s == "" {
			s = "none"
		}
		parts = append(parts, s+" ("+strings.Join(cmds[d], ", ")+")")
	}
	return cell(strings.Join(parts, "; "))
}

// cell makes s fit a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
