package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
)

// An unknown --log-level or --log-format is an error naming the value, on every Kafka-facing command,
// never a silent fallback to the default.
func TestUnknownLogFlagsAreErrors(t *testing.T) {
	for _, c := range commands() {
		switch c.Name {
		case "run", "ingest", "tokenize", "generate", "sink":
		default:
			continue
		}
		for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "yaml"}} {
			err := c.Run(context.Background(), args)
			if err == nil || !strings.Contains(err.Error(), args[1]) {
				t.Errorf("draftflow %s %s: got %v, want an error naming %q", c.Name, strings.Join(args, " "), err, args[1])
			}
		}
	}
}

// `draftflow sim` takes the scripted-reply flags into sim.Config.
func TestSimScriptedReplyFlags(t *testing.T) {
	tb, _, cfg, _ := simFlags()
	_, err := tb.Parse([]string{"--conversations", "conv.jsonl", "--reply-format", "kimi_k2", "--tool-divergence-rate", "0.25", "--seed", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Conversations != "conv.jsonl" || cfg.ReplyFormat != "kimi_k2" || cfg.ToolDivergenceRate != 0.25 || cfg.Seed != 7 {
		t.Fatalf("sim config %+v", cfg)
	}
}

// Every command's flags build: no name is defined twice (a collision is an error of the command, before it
// parses anything), and -h answers flag.ErrHelp.
func TestCommandsBuildTheirFlags(t *testing.T) {
	for _, c := range commands() {
		if err := c.Run(context.Background(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("draftflow %s -h: %v, want flag.ErrHelp", c.Name, err)
		}
	}
}

// Two stages defining one name in one command is an error when the command is built, naming both; run
// renames generate's --lane and --max-new-tokens explicitly, and adding a stage twice fails.
func TestFlagCollisionIsAnError(t *testing.T) {
	var in ingest.Config
	var gen generate.Config
	tb := cli.New("run")
	tb.Add("ingest", in.RegisterFlags)
	tb.Add("generate", func(fs *flag.FlagSet) { registerGenerateFlags(fs, &gen) }, cli.Skip("group"))
	_, err := tb.FlagSet()
	for _, name := range []string{"--lane", "--max-new-tokens"} {
		if err == nil || !strings.Contains(err.Error(), name+" is defined twice, by ingest and by generate") {
			t.Errorf("ingest's and generate's flags in one command: %v, want the collision of %s", err, name)
		}
	}
	var c common
	var cfg pipeline.Config
	var mergeTurns string
	run := runFlags(&c, &cfg, &mergeTurns)
	if _, err := run.FlagSet(); err != nil {
		t.Fatalf("run's flags: %v", err)
	}
	run.Add("sink", cfg.Sink.RegisterFlags)
	if _, err := run.Parse([]string{"--input", "x.jsonl"}); err == nil || !strings.Contains(err.Error(), "--out is defined twice") {
		t.Fatalf("run with the sink's flags twice: %v", err)
	}
}
