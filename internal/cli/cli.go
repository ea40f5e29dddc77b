// Package cli holds the settings of draftflow's commands: one Table per command, in which every setting has
// one name (its flag), one key in a job file, one usage line, and one flag.Value that holds its default, parses
// a given value and rejects a bad one. A command's settings come from four layers, each overriding the one
// before: the defaults, a job file (--config, YAML; Schema, ReadFile), the environment, the command line (Load).
//
// The convention every command follows:
//   - A setting is defined once, where its Config lives: a stage's Config.RegisterFlags binds the stage's
//     settings, the command binds its own. A command adds them to its Table by group: the stage's name, the
//     command's own name for its own settings, "" for the settings every command shares. A command that combines
//     several stages (run) leaves out, renames or re-describes a setting explicitly, with an Option.
//   - A setting's key in a job file is its group and the name its group defines it under ("generate.lane",
//     whatever a command renames the flag to), or the bare name for a shared setting ("brokers"): one job file
//     serves every command, each reading the keys of its own groups.
//   - A setting that takes several values, one per flag, says "repeatable" in its usage: a job file gives it a
//     list.
//   - A setting whose name ends in "api-key", "password", "secret" or "token" holds a credential: nothing
//     printed or written shows its value. A shared job's credentials are named by reference instead (a
//     "-file" setting, or a variable).
//   - A setting's default is the value its flag.Value holds when it is added (-h shows it): a command that wants
//     another default sets the field before adding the group. A field whose zero value means "the stage's
//     default" says that default in its usage ("(0: 1m)").
//   - A value is validated where it is parsed (the flag.Value's Set); what depends on several settings, or a
//     setting a command requires, is a Check of the Table, run once every value is parsed.
//   - A name defined twice in one command is an error when the command builds its flag set, before anything is
//     parsed: never a silent rename.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Setting is one setting of a command.
type Setting struct {
	// Name is the flag's name (without dashes).
	Name string
	// Group is who defined it: a stage ("generate"), the command itself ("run"), or "" for the settings every
	// command shares.
	Group string
	// Key is the setting's key in a job file (KeyOf its group and the name the group defines it under).
	Key string
	// Usage is the help line -h prints.
	Usage string
	// Value parses the setting and holds it; its String when the setting was added is the default.
	Value flag.Value
	// Default is the value as -h shows it.
	Default string
}

// Table is the settings of one command, in the order they were added.
type Table struct {
	command  string
	settings []Setting
	errs     []error
	checks   []func() error
}

// New returns the empty Table of the command named ("run", "replay").
func New(command string) *Table { return &Table{command: command} }

// Option adjusts the settings of one group as a command adds them.
type Option func(*options)

type options struct {
	only   []string
	skip   []string
	rename map[string]string
	usage  map[string]string
}

// Only adds just the named settings of the group.
func Only(names ...string) Option { return func(o *options) { o.only = append(o.only, names...) } }

// Skip leaves the named settings of the group out.
func Skip(names ...string) Option { return func(o *options) { o.skip = append(o.skip, names...) } }

// Rename adds the group's setting from under the name to.
func Rename(from, to string) Option {
	return func(o *options) {
		if o.rename == nil {
			o.rename = map[string]string{}
		}
		o.rename[from] = to
	}
}

// Usage replaces the usage line of the group's setting name in this command (where the command gives it
// another meaning: run's --capture-aux also takes "sim").
func Usage(name, usage string) Option {
	return func(o *options) {
		if o.usage == nil {
			o.usage = map[string]string{}
		}
		o.usage[name] = usage
	}
}

// Add adds the settings that register binds on a flag set (a stage's Config.RegisterFlags, or the command's
// own), as group, adjusted by opts. An option that names a setting the group does not define is an error of
// FlagSet, like a name already taken.
func (t *Table) Add(group string, register func(*flag.FlagSet), opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	scratch := flag.NewFlagSet(group, flag.ContinueOnError)
	register(scratch)
	for _, name := range slices.Concat(o.only, o.skip, keys(o.rename), keys(o.usage)) {
		if scratch.Lookup(name) == nil {
			t.errs = append(t.errs, fmt.Errorf("draftflow %s: an option names --%s, which %s does not define", t.command, name, describe(group)))
		}
	}
	scratch.VisitAll(func(f *flag.Flag) {
		if slices.Contains(o.skip, f.Name) || (o.only != nil && !slices.Contains(o.only, f.Name)) {
			return
		}
		s := Setting{Name: f.Name, Group: group, Key: KeyOf(group, f.Name), Usage: f.Usage, Value: f.Value, Default: f.DefValue}
		if to, ok := o.rename[f.Name]; ok {
			s.Name = to
		}
		if u, ok := o.usage[f.Name]; ok {
			s.Usage = u
		}
		t.add(s)
	})
}

// add appends s, or records the error of a name already taken.
func (t *Table) add(s Setting) {
	for _, have := range t.settings {
		if have.Name == s.Name {
			t.errs = append(t.errs, fmt.Errorf("draftflow %s: --%s is defined twice, by %s and by %s", t.command, s.Name, describe(have.Group), describe(s.Group)))
			return
		}
	}
	t.settings = append(t.settings, s)
}

func describe(group string) string {
	if group == "" {
		return "the command"
	}
	return group
}

// KeyOf is the job file key of the setting a group defines under name: "group.name", or name for a shared
// setting (group "").
func KeyOf(group, name string) string {
	if group == "" {
		return name
	}
	return group + "." + name
}

// Repeatable reports whether the setting takes several values, one per flag (its usage says "repeatable"): a job
// file gives it a list.
func (s Setting) Repeatable() bool { return strings.Contains(s.Usage, "repeatable") }

// Credential reports whether the setting holds a credential (its name ends in api-key, password, secret or
// token): its value is never printed or written out.
func (s Setting) Credential() bool { return isCredential(s.Name) }

func isCredential(name string) bool {
	for _, suffix := range []string{"api-key", "password", "secret", "token"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// shown is a value as errors and renderings show it: "[redacted]" for a credential, else Redact(text).
func shown(credential bool, text string) string {
	if credential {
		return "[redacted]"
	}
	return Redact(text)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Check adds a check that Parse runs once every value is parsed: a setting the command requires, or settings
// that depend on each other. Its error is the command's.
func (t *Table) Check(check func() error) { t.checks = append(t.checks, check) }

// Settings returns the command's settings, in the order they were added.
func (t *Table) Settings() []Setting { return slices.Clone(t.settings) }

// FlagSet returns the command's flag set ("draftflow <command>", errors returned, not printed), or the error of
// every name defined twice and every option naming a setting its group does not define.
func (t *Table) FlagSet() (*flag.FlagSet, error) {
	if len(t.errs) > 0 {
		return nil, errors.Join(t.errs...)
	}
	fs := flag.NewFlagSet("draftflow "+t.command, flag.ContinueOnError)
	for _, s := range t.settings {
		fs.Var(s.Value, s.Name, s.Usage)
		fs.Lookup(s.Name).DefValue = s.Default
	}
	return fs, nil
}

// Parse builds the flag set, parses args and runs the checks. It returns the flag set (its Args are what
// follows the flags) or the first error: a table that does not build, a bad value (flag.ErrHelp for -h), or a
// failed check.
func (t *Table) Parse(args []string) (*flag.FlagSet, error) {
	fs, err := t.FlagSet()
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, check := range t.checks {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return fs, nil
}
