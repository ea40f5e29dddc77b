package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/draftflow/draftflow/bench/generate"
)

// cmdGenerate runs the admission policy benchmark, or with --multi-turn the multi-turn affinity benchmark.
func cmdGenerate(ctx context.Context, args []string) error {
	fs := newFlagSet("generate")
	var opts generate.BenchOptions
	asJSON := fs.Bool("json", false, "print the results as a JSON list on stdout instead of a table")
	scenarios := fs.String("scenario", "", "comma-separated scenarios (default all: "+strings.Join(generate.Scenarios(), ",")+
		"; also, only when named: "+strings.Join(generate.OptInScenarios(), ",")+")")
	policies := fs.String("policy", "", "comma-separated policies (default all: "+strings.Join(generate.Policies(), ",")+")")
	fs.DurationVar(&opts.SimDuration, "sim-duration", 0, "simulated length of each run (default 60m; runs are discrete-event, not wall-clock)")
	fs.Int64Var(&opts.Seed, "seed", 0, "workload seed (default 1)")
	fs.IntVar(&opts.Prompts, "prompts", 0, "dataset size of the finite scenarios (default 14700, one reference-run partition)")
	fs.Float64Var(&opts.Budget.SafeCompletions, "kv-safe-completions", 0, "the kv-budget policy's --kv-safe-completions (default: the stage's)")
	fs.Float64Var(&opts.Budget.SafeFraction, "kv-safe-fraction", 0, "the kv-budget policy's --kv-safe-fraction")
	fs.Float64Var(&opts.Budget.HeadroomOutputs, "kv-headroom-outputs", 0, "the kv-budget policy's --kv-headroom-outputs (default: the stage's)")
	verbose := fs.Bool("v", false, "log every run (and, with DRAFTFLOW_LOG_LEVEL=debug, every poll) on stderr")
	multiTurn := fs.Bool("multi-turn", false, "run the multi-turn workload instead (every turn of each conversation generated, "+
		"affinity on and off side by side) and print its table")
	var mt generate.MultiTurnOptions
	fs.IntVar(&mt.Conversations, "conversations", 0, fmt.Sprintf("--multi-turn: conversations (default %d)", generate.DefaultConversations))
	fs.IntVar(&mt.Turns, "turns", 0, fmt.Sprintf("--multi-turn: assistant turns per conversation (default %d)", generate.DefaultTurns))
	fs.IntVar(&mt.Servers, "servers", 0, fmt.Sprintf("--multi-turn: simulated servers, default KV pool each (default %d)", generate.DefaultServers))
	fs.IntVar(&mt.Backlog, "backlog", 0, "--multi-turn: requests kept waiting for admission while conversations remain to start (default 64)")
	fs.StringVar(&opts.PlotFile, "plot", "bench-generate.svg", "write an SVG of tok/s and KV usage over time per policy here (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *scenarios != "" {
		opts.Scenarios = strings.Split(*scenarios, ",")
	}
	if *policies != "" {
		opts.Policies = strings.Split(*policies, ",")
	}
	opts.JSON = *asJSON
	if *verbose {
		level := slog.LevelInfo
		if os.Getenv("DRAFTFLOW_LOG_LEVEL") == "debug" {
			level = slog.LevelDebug
		}
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	if *multiTurn {
		mt.Seed, mt.Budget, mt.JSON, mt.Logger = opts.Seed, opts.Budget, opts.JSON, opts.Logger
		results, err := generate.MultiTurn(ctx, mt, os.Stdout)
		return output(results, err, *asJSON)
	}
	results, err := generate.Bench(ctx, opts, os.Stdout)
	return output(results, err, *asJSON)
}

// output ends a benchmark: its results as indented JSON with --json (the tables were printed as it ran
// otherwise), or its error.
func output(results any, err error, asJSON bool) error {
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	fmt.Println()
	return nil
}
