package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
)

// jobCommands are the commands that read a job file (--config), each with the function that builds its settings'
// Table into fresh targets: the job file's keys are theirs (jobSchema).
var jobCommands = []struct {
	name  string
	table func() *cli.Table
}{
	{"run", func() *cli.Table { return runFlags(&common{}, &pipeline.Config{}, new(string)) }},
	{"ingest", func() *cli.Table { return ingestFlags(&common{}, &ingest.Config{}, new(bool)) }},
	{"tokenize", func() *cli.Table { return tokenizeFlags(&common{}, &tokenize.Config{}) }},
	{"generate", func() *cli.Table { return generateFlags(&common{}, &generate.Config{}) }},
	{"sink", func() *cli.Table { return sinkFlags(&common{}, &sink.Config{}) }},
	{"capture", func() *cli.Table {
		return captureFlags(&common{}, &capturestage.Config{}, new(int), new(string))
	}},
	{"sim", func() *cli.Table { t, _, _, _ := simFlags(); return t }},
	{"status", func() *cli.Table { return statusFlags(&common{}, &statusOptions{}) }},
	{"replay", func() *cli.Table { return replayFlags(&common{}, &replayOptions{}) }},
}

// jobSchema is the keys of a job file: those of every command of jobCommands, parsed by settings of their own.
func jobSchema() (*cli.Schema, error) {
	tables := make([]*cli.Table, len(jobCommands))
	for i, c := range jobCommands {
		tables[i] = c.table()
	}
	return cli.NewSchema(tables...)
}

// schemaOnce is jobSchema for the keys alone (reference, tests); a job file is checked against a schema of its
// own (load), whose settings parse that file's values.
var schemaOnce = sync.OnceValues(jobSchema)

// load sets a command's settings (t) from the defaults, the job file (--config), the DRAFTFLOW_* variables and
// the command line, in that order of precedence (cli.Table.Load).
func load(t *cli.Table, args []string) (*flag.FlagSet, *cli.Effective, error) {
	return loadFile(t, args, "")
}

// loadFile is load with a job file read when the command line names none.
func loadFile(t *cli.Table, args []string, config string) (*flag.FlagSet, *cli.Effective, error) {
	schema, err := jobSchema()
	if err != nil {
		return nil, nil, err
	}
	fs, eff, err := t.Load(args, cli.Sources{Schema: schema, Config: config, Env: envVars, Getenv: os.Getenv})
	if err != nil {
		return nil, nil, err
	}
	eff.Notes = append(eff.Notes, secretNotes(eff)...)
	return fs, eff, nil
}

// secretNotes says which credentials the command takes from the environment: they have no key, and no
// configuration written out holds them.
func secretNotes(eff *cli.Effective) []string {
	var notes []string
	has := func(key string) bool { v := eff.Lookup(key); return v != nil && v.Flag != "" }
	unset := func(key string) bool { v := eff.Lookup(key); return v == nil || v.Source == cli.FromDefault }
	if has("kafka-sasl-password-file") && os.Getenv(cli.EnvKafkaSASLPassword) != "" {
		notes = append(notes, "the Kafka SASL password: $"+cli.EnvKafkaSASLPassword+" (a credential: never written out)")
	}
	if has("generate.sglang-api-key-file") && unset("generate.sglang-api-key-file") && strings.TrimSpace(os.Getenv(envSGLangAPIKey)) != "" {
		notes = append(notes, "the SGLang API key: $"+envSGLangAPIKey+" (a credential: never written out)")
	}
	return notes
}

// record is the process's effective configuration as a job file, with the build that ran it: what the sink
// writes beside a run's shards. Nil when the command's settings were not loaded.
func (c *common) record() []byte {
	if c.effective == nil {
		return nil
	}
	eff := *c.effective
	if bi, ok := debug.ReadBuildInfo(); ok {
		build := "draftflow " + bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				build += " " + s.Value
			}
		}
		eff.Notes = append(slices.Clone(eff.Notes), "built as "+build+" with "+bi.GoVersion)
	}
	return eff.Render()
}

// cmdConfig is `draftflow config [--command NAME] JOB.yaml [flags]`: the effective configuration the command
// would run with, from the job file, the environment and the flags, each value with where it came from.
func cmdConfig(ctx context.Context, args []string) error { return printConfig(os.Stdout, args) }

// printConfig is `draftflow config args`, printing on w.
func printConfig(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("draftflow config", flag.ContinueOnError)
	command := fs.String("command", "run", "the command whose configuration to print: "+strings.Join(jobCommandNames(), ", "))
	keys := fs.Bool("keys", false, "print every key of a job file (Markdown: docs/config.md's reference) and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: draftflow config [--command NAME] JOB.yaml [the command's flags]\n\n"+
			"Prints the configuration the command would run with: the job file under the DRAFTFLOW_* variables and the\n"+
			"flags, each value with where it came from, credentials left out. It is a job file itself.\n\nUsage of draftflow config:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keys {
		s, err := schemaOnce()
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, s.Markdown(envVars))
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("name a job file: draftflow config JOB.yaml [flags]")
	}
	var table func() *cli.Table
	for _, c := range jobCommands {
		if c.name == *command {
			table = c.table
		}
	}
	if table == nil {
		return fmt.Errorf("--command %q: want one of %s", *command, strings.Join(jobCommandNames(), ", "))
	}
	rest, eff, err := loadFile(table(), fs.Args()[1:], fs.Arg(0))
	if err != nil {
		return err
	}
	if rest.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", rest.Args())
	}
	_, err = w.Write(eff.Render())
	return err
}

func jobCommandNames() []string {
	var out []string
	for _, c := range jobCommands {
		out = append(out, c.name)
	}
	return out
}
