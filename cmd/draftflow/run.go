package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// runFlags is the `draftflow run` settings into cfg: the common flags, every stage's but its consumer group
// (generate's --lane and --max-new-tokens as --generate-lane and --generate-max-new-tokens: ingest's are the
// records' defaults), the capture stage's and the simulator's under run's names, and run's own.
func runFlags(c *common, cfg *pipeline.Config, mergeTurns *string) *cli.Table {
	t := cli.New("run")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, "") })
	t.Add("ingest", cfg.Ingest.RegisterFlags)
	t.Add("tokenize", cfg.Tokenize.RegisterFlags, cli.Skip("group"))
	t.Add("generate", func(fs *flag.FlagSet) { registerGenerateFlags(fs, &cfg.Generate) }, cli.Skip("group"),
		cli.Rename("lane", "generate-lane"), cli.Rename("max-new-tokens", "generate-max-new-tokens"))
	t.Add("sink", cfg.Sink.RegisterFlags, cli.Skip("group"))
	t.Add("capture", cfg.Capture.Stage.RegisterFlags, cli.Only("sglang-aux", "sglang-final", "concurrency", "aux-layers"),
		cli.Rename("sglang-aux", "capture-aux"), cli.Usage("sglang-aux", "capture the rows' EAGLE-3 features: the aux-capture server URL, or sim (with --capture-final)"),
		cli.Rename("sglang-final", "capture-final"), cli.Usage("sglang-final", "capture: the final-state server URL, or sim (with --capture-aux)"),
		cli.Rename("concurrency", "capture-concurrency"), cli.Usage("concurrency", "capture: requests in flight per capture server (default 4)"),
		cli.Rename("aux-layers", "capture-aux-layers"), cli.Usage("aux-layers", "capture: the decoder layers the aux server captures (default 2,L/2,L-3 from --capture-num-layers or the model's config.json)"))
	var modelDir string // capture's --model: run's is tokenize's
	t.Add("capture", func(fs *flag.FlagSet) { registerCaptureModelFlags(fs, &cfg.Capture.NumLayers, &modelDir) }, cli.Only("num-layers"),
		cli.Rename("num-layers", "capture-num-layers"), cli.Usage("num-layers", "capture: the target model's decoder layers (default: the model's config.json)"))
	cfg.Sim.OutputLenMean = 600
	t.Add("sim", cfg.Sim.RegisterFlags, cli.Only("output-len-mean", "time-scale", "reply-format", "tool-divergence-rate"),
		cli.Rename("output-len-mean", "sim-output-mean"), cli.Usage("output-len-mean", "mean output length of the built-in simulator (tokens)"),
		cli.Rename("time-scale", "sim-time-scale"), cli.Usage("time-scale", "simulated seconds per wall second of the built-in simulator (0: instant)"),
		cli.Rename("reply-format", "sim-reply-format"), cli.Usage("reply-format", "the built-in simulator answers each turn with the input's original reply "+
			"written as this family writes it (qwen3, kimi_k2, llama3, deepseekv3), so reasoning and tool calls parse; empty: random tokens"),
		cli.Rename("tool-divergence-rate", "sim-tool-divergence-rate"), cli.Usage("tool-divergence-rate", "with --sim-reply-format, the share of tool-call "+
			"turns whose call the simulator changes (the conversation ends there as a tool divergence)"))
	t.Add("run", func(fs *flag.FlagSet) {
		fs.IntVar(&cfg.Capture.SimHidden, "capture-sim-hidden", sim.DefaultHiddenSize, "capture with sim: the simulated model's hidden size")
		fs.DurationVar(&cfg.Timeout, "timeout", 0, "give up (exit non-zero) after this long (0: no limit)")
		fs.StringVar(mergeTurns, "merge-turns", "", "after the run, also write one row per conversation where its turns merge token-exactly into this `dir` (see draftflow merge-turns)")
	})
	t.Check(func() error {
		if len(cfg.Ingest.Inputs) == 0 {
			return errors.New("no input: pass --input FILE (repeatable)")
		}
		// The simulator scripts each turn's original reply from the input it was ingested from.
		if cfg.Sim.ReplyFormat != "" && (len(cfg.Ingest.Inputs) != 1 || !strings.Contains(filepath.Base(cfg.Ingest.Inputs[0]), ".jsonl")) {
			return errors.New("--sim-reply-format needs exactly one JSONL --input (the simulator reads the original replies from it)")
		}
		return nil
	})
	return t
}

func cmdRun(ctx context.Context, args []string) error {
	var c common
	var cfg pipeline.Config
	var mergeTurns string
	fs, eff, err := load(runFlags(&c, &cfg, &mergeTurns), args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.effective = eff
	p, err := c.setup(ctx, "tokenize", "generate", "sink")
	if err != nil {
		return err
	}
	defer p.close()
	cfg.Sink.JobConfig = c.record()
	// One registry and one set of readiness checks for the whole process; the run makes its one Kafka client.
	cfg.Kafka, cfg.Logger, cfg.Gatherer = p.kc, p.log, p.reg
	cfg.Ingest.Registerer = p.reg
	cfg.Tokenize.Registerer, cfg.Tokenize.Ready = p.reg, p.ready
	cfg.Generate.Registerer, cfg.Generate.Ready = p.reg, p.ready
	cfg.Sink.Registerer, cfg.Sink.Ready = p.reg, p.ready
	cfg.Capture.Stage.Registerer = p.reg
	cfg.Sim.Instant = cfg.Sim.TimeScale == 0
	if cfg.Sim.ReplyFormat != "" {
		cfg.Sim.Conversations = cfg.Ingest.Inputs[0]
	}
	cfg.Progress = stderr()
	res, err := pipeline.Run(ctx, cfg)
	if res != nil {
		printSummary(os.Stdout, res)
	}
	if err != nil {
		return err
	}
	if mergeTurns != "" {
		dirs, err := shard.RunDirs(cfg.Sink.Dir)
		if err != nil {
			return err
		}
		var names []string
		for _, d := range dirs {
			names = append(names, filepath.Base(d))
		}
		sum, err := offline.MergeTurns(context.WithoutCancel(ctx), cfg.Sink.Dir, mergeTurns, offline.MergeOptions{Runs: names})
		if err != nil {
			return err
		}
		printMergeSummary(os.Stdout, sum, mergeTurns)
	}
	if res.Lost > 0 {
		return exitCode(3)
	}
	return nil
}

func printSummary(w io.Writer, r *pipeline.Result) {
	fmt.Fprintf(w, "\ndraftflow run: shards in %s\n", r.Dir)
	fmt.Fprintf(w, "  prompts   %d valid (%d written now, %d already in the shards)\n", r.Prompts, r.Written, r.AlreadyPresent)
	fmt.Fprintf(w, "  rows      %d in %d shards, %d tokens (one row per regenerated turn or row brought in)\n", r.Rows, r.Shards, r.Tokens)
	var origins []string
	for _, o := range topics.Origins() {
		if n := r.Origins[o]; n > 0 {
			origins = append(origins, fmt.Sprintf("%d %s", n, o))
		}
	}
	if len(origins) > 0 && r.Origins[topics.OriginGenerated] != r.Rows {
		fmt.Fprintf(w, "  origins   %s (rows in the shards: generated, or brought in with their output and never sent to a server)\n", strings.Join(origins, ", "))
	}
	var turns []string
	for _, reason := range topics.StopReasons() {
		if n := r.Turns[reason]; n > 0 {
			turns = append(turns, fmt.Sprintf("%d %s", n, reason))
		}
	}
	if len(turns) > 0 {
		fmt.Fprintf(w, "  turns     %s (written now, by stop reason)\n", strings.Join(turns, ", "))
	}
	if r.FeatureFiles > 0 {
		fmt.Fprintf(w, "  features  %d files beside the shards, %d rows with features, %d without (dead-lettered; draftflow inspect lists them)\n",
			r.FeatureFiles, r.FeatureRows, r.FeatureMissing)
	}
	where := fmt.Sprintf("topic %q", topics.TopicRejected)
	if r.RejectedFile != "" {
		where = r.RejectedFile
	}
	fmt.Fprintf(w, "  rejected  %d (%d malformed input lines, %d by the pipeline; see %s)\n",
		r.IngestRejected+r.PipelineRejected, r.IngestRejected, r.PipelineRejected, where)
	for _, ex := range r.Examples {
		fmt.Fprintf(w, "    e.g.    %s line %d: %s\n", ex.Source.File, ex.Source.Line, ex.Reason)
	}
	fmt.Fprintf(w, "  reused    %d turns already in the shards, not sent to a server again\n", r.InShards)
	fmt.Fprintf(w, "  redone    %d generations dropped by the sink as duplicates (work done twice after a rebalance, crash or retry)\n",
		r.Duplicates)
	fmt.Fprintf(w, "  elapsed   %s\n", r.Elapsed.Round(time.Millisecond))
	if r.Lost > 0 {
		fmt.Fprintf(w, "  LOST      %d prompts never reached the shards, e.g. %v\n", r.Lost, r.Missing)
	}
}
