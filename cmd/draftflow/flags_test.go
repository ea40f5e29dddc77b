package main

import (
	"context"
	"strings"
	"testing"
)

// An unknown --log-level or --log-format is an error naming the value, on every Kafka-facing command,
// never a silent fallback to the default.
func TestUnknownLogFlagsAreErrors(t *testing.T) {
	for _, c := range commands() {
		switch c.name {
		case "run", "ingest", "tokenize", "generate", "sink":
		default:
			continue
		}
		for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "yaml"}} {
			err := c.run(context.Background(), args)
			if err == nil || !strings.Contains(err.Error(), args[1]) {
				t.Errorf("draftflow %s %s: got %v, want an error naming %q", c.name, strings.Join(args, " "), err, args[1])
			}
		}
	}
}

// `draftflow sim` takes the scripted-reply flags into sim.Config.
func TestSimScriptedReplyFlags(t *testing.T) {
	fs, _, cfg, _ := simFlags()
	err := fs.Parse([]string{"--conversations", "conv.jsonl", "--reply-format", "kimi_k2", "--tool-divergence-rate", "0.25", "--seed", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Conversations != "conv.jsonl" || cfg.ReplyFormat != "kimi_k2" || cfg.ToolDivergenceRate != 0.25 || cfg.Seed != 7 {
		t.Fatalf("sim config %+v", cfg)
	}
}
