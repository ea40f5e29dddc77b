package cli

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
)

// ConfigFlag is the flag that names a command's job file.
const ConfigFlag = "config"

// Source is where a setting's value came from; each overrides the ones before it.
type Source int

const (
	FromDefault Source = iota // the value the setting's flag.Value held when it was added
	FromFile                  // the job file (--config)
	FromEnv                   // an environment variable
	FromFlag                  // the command line
)

func (s Source) String() string {
	switch s {
	case FromFile:
		return "file"
	case FromEnv:
		return "env"
	case FromFlag:
		return "flag"
	}
	return "default"
}

// Sources are what Load reads beside the command line.
type Sources struct {
	// Schema is the keys of a job file: with it the command takes --config. Nil: no job file.
	Schema *Schema
	// Config is the job file read when the command line names none ("": none).
	Config string
	// Env names the environment variable of a key (key -> variable); an empty variable is unset.
	Env map[string]string
	// Getenv reads a variable (the command passes os.Getenv: package cli reads no environment).
	Getenv func(string) string
}

// Value is one setting's effective value, with where it came from.
type Value struct {
	Key string
	// Flag is the command's flag of the key; "" for a key of the job file the command has no setting for.
	Flag string
	// Texts are the values as given (one; a repeatable setting's items); nil for the default.
	Texts []string
	// Default is the default as -h shows it.
	Default    string
	Source     Source
	Origin     string // "job.yaml:12", "$DRAFTFLOW_BROKERS" or "--brokers"; "" for the default
	Repeatable bool
	Credential bool // its value is never shown (Setting.Credential)
}

// Effective is a command's configuration once Load has set it: each setting's value and where it came from.
type Effective struct {
	Command string
	// File is the job file read ("": none).
	File string
	// Values are the command's settings, in the order the table added them.
	Values []Value
	// Unused are the keys of the job file that the command has no setting for (other commands' keys), in file
	// order: a job file describes every command of a job.
	Unused []Value
	// Notes are lines a renderer adds as comments (the command's secrets given by environment, for example).
	Notes []string
}

// Lookup returns the value of key, or nil.
func (e *Effective) Lookup(key string) *Value {
	for i := range e.Values {
		if e.Values[i].Key == key {
			return &e.Values[i]
		}
	}
	for i := range e.Unused {
		if e.Unused[i].Key == key {
			return &e.Unused[i]
		}
	}
	return nil
}

// given is one value of the command line.
type given struct{ name, text string }

// recorder stands for a setting's flag.Value while the command line is parsed: it records what is given, so that
// Load can apply the layers in their order of precedence.
type recorder struct {
	v    flag.Value
	name string
	log  *[]given
}

func (r *recorder) String() string {
	if r == nil || r.v == nil {
		return ""
	}
	return r.v.String()
}

func (r *recorder) Set(s string) error {
	*r.log = append(*r.log, given{r.name, s})
	return nil
}

func (r *recorder) IsBoolFlag() bool { return r != nil && r.v != nil && isBool(r.v) }

// Load sets the command's settings from the layers, each overriding the one before: the defaults, the job file
// (--config, or src.Config), the environment (src.Env), the command line. A setting takes the values of the last
// layer that gives it any, and only those: a repeatable setting given on the command line drops the file's list.
// Every value of the job file is checked against the schema, also those of other commands and those a later
// layer overrides. Load then runs the checks and returns the flag set (its Args are what follows the flags),
// the effective configuration, or the first error, naming the file and line, the variable or the flag.
func (t *Table) Load(args []string, src Sources) (*flag.FlagSet, *Effective, error) {
	if len(t.errs) > 0 {
		return nil, nil, errors.Join(t.errs...)
	}
	var log []given
	byName := map[string]Setting{}
	fs := flag.NewFlagSet("draftflow "+t.command, flag.ContinueOnError)
	for _, s := range t.settings {
		byName[s.Name] = s
		fs.Var(&recorder{v: s.Value, name: s.Name, log: &log}, s.Name, s.Usage)
		fs.Lookup(s.Name).DefValue = s.Default
	}
	config := src.Config
	if src.Schema != nil {
		fs.StringVar(&config, ConfigFlag, config, configUsage)
	}
	fs.Usage = func() { t.printUsage(fs.Output(), src.Schema != nil) }
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	var file *File
	if config != "" {
		var err error
		if file, err = ReadFile(config, src.Schema); err != nil {
			return nil, nil, err
		}
	}
	eff := &Effective{Command: t.command, File: config}
	fromFlags := map[string][]string{}
	for _, g := range log {
		fromFlags[g.name] = append(fromFlags[g.name], g.text)
	}
	for _, s := range t.settings {
		v := Value{Key: s.Key, Flag: s.Name, Default: s.Default, Repeatable: s.Repeatable(), Credential: s.Credential()}
		if file != nil {
			if texts, ok := file.Get(s.Key); ok {
				v.Texts, v.Source, v.Origin = texts, FromFile, file.Origin(s.Key)
			}
		}
		if name := src.Env[s.Key]; name != "" && src.Getenv != nil {
			if x := strings.TrimSpace(src.Getenv(name)); x != "" {
				v.Texts, v.Source, v.Origin = []string{x}, FromEnv, "$"+name
			}
		}
		if texts := fromFlags[s.Name]; len(texts) > 0 {
			v.Texts, v.Source, v.Origin = texts, FromFlag, "--"+s.Name
		}
		eff.Values = append(eff.Values, v)
	}
	// The file's and the environment's values first, in table order; then the command line's, in its order.
	for _, layer := range []Source{FromFile, FromEnv} {
		for i, s := range t.settings {
			v := eff.Values[i]
			if v.Source != layer {
				continue
			}
			for _, x := range v.Texts {
				switch err := s.Value.Set(x); {
				case err == nil:
				case layer == FromEnv:
					return nil, nil, fmt.Errorf("%s=%q (%s): %v", strings.TrimPrefix(v.Origin, "$"), shown(v.Credential, x), v.Key, err)
				default:
					return nil, nil, fmt.Errorf("%s: %s: invalid value %q: %v", v.Origin, v.Key, shown(v.Credential, x), err)
				}
			}
		}
	}
	for _, g := range log {
		s := byName[g.name]
		if err := s.Value.Set(g.text); err != nil {
			return nil, nil, fmt.Errorf("invalid value %q for flag -%s: %v", shown(s.Credential(), g.text), g.name, err)
		}
	}
	if file != nil {
		for _, key := range file.Keys() {
			if eff.Lookup(key) != nil {
				continue
			}
			texts, _ := file.Get(key)
			k := src.Schema.Lookup(key)
			eff.Unused = append(eff.Unused, Value{Key: key, Texts: texts, Default: k.Uses[0].Setting.Default,
				Source: FromFile, Origin: file.Origin(key), Repeatable: k.Type() == "list", Credential: k.parse.Credential()})
		}
	}
	for _, check := range t.checks {
		if err := check(); err != nil {
			return nil, nil, err
		}
	}
	return fs, eff, nil
}

const configUsage = "job `file` (YAML): settings by key (docs/config.md); the environment and flags override it"

// printUsage prints -h: the command's flags with their types and defaults, and --config when it takes one.
func (t *Table) printUsage(w interface{ Write([]byte) (int, error) }, config bool) {
	fmt.Fprintf(w, "Usage of draftflow %s:\n", t.command)
	fs, err := t.FlagSet()
	if err != nil {
		return
	}
	if config {
		fs.String(ConfigFlag, "", configUsage)
	}
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// Redact returns s with the password of a URL in it replaced (scheme://user:xxxxx@host): a value may hold a
// URL, and a URL may hold a credential.
func Redact(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				parts[i] = u.Redacted()
			}
		}
	}
	return strings.Join(parts, ",")
}
