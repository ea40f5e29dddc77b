package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/internal/progress"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/status"
	"github.com/draftflow/draftflow/topics"
)

// prepare parses the flags of a stage's command (t), sets up logging, metrics and the process's one Kafka
// client, named to the brokers by the process's status instance (so that `draftflow status` lists group members
// by the same name as their status records), and makes sure the topics exist. The command calls close when it
// is done.
func prepare(ctx context.Context, c *common, t *cli.Table, args []string, expect ...string) (*process, error) {
	fs, eff, err := load(t, args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.effective = eff
	p, err := c.setup(ctx, expect...)
	if err != nil {
		return nil, err
	}
	p.kc.ClientID = "draftflow-" + status.DefaultInstance()
	if err := p.connect(); err != nil {
		p.close()
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := p.kcl.Admin().EnsureTopics(tctx, topics.Retained()...); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// publishStatus starts publishing this process's status records for stage (status.Start) on p's client, from
// its registry, and returns the function that stops it after writing the last record: call it once the stage
// returned.
func (p *process) publishStatus(ctx context.Context, stage status.Stage) (stop func()) {
	return status.Start(ctx, status.PublisherConfig{Client: p.kcl, Gatherer: p.reg, Stages: []status.Stage{stage},
		Instance: status.DefaultInstance(), Logger: p.log})
}

// ingestFlags is the `draftflow ingest` settings: the shared ones, the stage's and --progress.
func ingestFlags(c *common, cfg *ingest.Config, showProgress *bool) *cli.Table {
	t := cli.New("ingest")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, "") })
	t.Add(ingest.Stage, cfg.RegisterFlags)
	t.Add(ingest.Stage, func(fs *flag.FlagSet) {
		fs.BoolVar(showProgress, "progress", true, "show a progress bar on stderr")
	})
	return t
}

func cmdIngest(ctx context.Context, args []string) error {
	var c common
	var cfg ingest.Config
	var showProgress bool
	p, err := prepare(ctx, &c, ingestFlags(&c, &cfg, &showProgress), args)
	if err != nil {
		return err
	}
	defer p.close()
	stopStatus := p.publishStatus(ctx, pipeline.StatusStage(ingest.Stage, ""))
	cfg.Client, cfg.Logger, cfg.Registerer = p.kcl, p.log, p.reg
	if showProgress {
		cfg.Progress = &ingestBar{w: stderr()}
	}
	res, err := ingest.Run(ctx, cfg)
	stopStatus()
	if err != nil {
		return err
	}
	fmt.Printf("ingested %d prompts, rejected %d lines\n", res.Prompts, res.Rejected)
	return nil
}

// registerInputNamespace binds --input-namespace of a stage that consumes topic to ns.
func registerInputNamespace(fs *flag.FlagSet, ns *string, topic string) {
	fs.StringVar(ns, "input-namespace", *ns, "read "+topic+" from this namespace instead of --namespace (its group, outputs and "+
		"dead letters stay in --namespace): e.g. re-tokenize one pipeline's prompts for another model")
}

// checkInputNamespace checks that topic exists in namespace ns, the one a stage reads with --input-namespace.
func (p *process) checkInputNamespace(ctx context.Context, ns, topic string) error {
	if ns == "" {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := p.kcl.Admin().In(ns).PartitionCount(tctx, topic); err != nil {
		return fmt.Errorf("--input-namespace %s: topic %s.%s: %w", ns, ns, topic, err)
	}
	p.log.Info("reading another namespace", "topic", ns+"."+topic, "writing_namespace", p.kc.Namespace)
	return nil
}

// tokenizeFlags is the `draftflow tokenize` settings: the shared ones, the stage's and --input-namespace.
func tokenizeFlags(c *common, cfg *tokenize.Config) *cli.Table {
	t := cli.New("tokenize")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, ":9090") })
	t.Add("tokenize", func(fs *flag.FlagSet) {
		registerInputNamespace(fs, &cfg.InputNamespace, topics.TopicPrompts)
		cfg.RegisterFlags(fs)
	})
	t.Check(func() error {
		if cfg.ModelDir == "" {
			return fmt.Errorf("--model is required")
		}
		return nil
	})
	return t
}

func cmdTokenize(ctx context.Context, args []string) error {
	var c common
	var cfg tokenize.Config
	p, err := prepare(ctx, &c, tokenizeFlags(&c, &cfg), args, "tokenize")
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.checkInputNamespace(ctx, cfg.InputNamespace, topics.TopicPrompts); err != nil {
		return err
	}
	defer p.publishStatus(ctx, pipeline.StatusStage("tokenize", cfg.Group))()
	cfg.Client, cfg.Logger, cfg.Registerer, cfg.Ready = p.kcl, p.log, p.reg, p.ready
	return tokenize.Run(ctx, cfg)
}

// generateFlags is the `draftflow generate` settings: the shared ones, the stage's and --input-namespace.
func generateFlags(c *common, cfg *generate.Config) *cli.Table {
	t := cli.New("generate")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, ":9090") })
	t.Add("generate", func(fs *flag.FlagSet) {
		registerInputNamespace(fs, &cfg.InputNamespace, topics.TopicTokenized)
		registerGenerateFlags(fs, cfg)
	})
	return t
}

func cmdGenerate(ctx context.Context, args []string) error {
	var c common
	var cfg generate.Config
	p, err := prepare(ctx, &c, generateFlags(&c, &cfg), args, "generate")
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.checkInputNamespace(ctx, cfg.InputNamespace, topics.TopicTokenized); err != nil {
		return err
	}
	cfg.Stall = &generate.Stall{}
	st := pipeline.StatusStage("generate", cfg.Group)
	st.Stalled = cfg.Stall.Reason // the status records say why the stage gets no answers
	defer p.publishStatus(ctx, st)()
	cfg.Client, cfg.Logger, cfg.Registerer, cfg.Ready = p.kcl, p.log, p.reg, p.ready
	return generate.Run(ctx, cfg)
}

func cmdSink(ctx context.Context, args []string) error { return runSinkCommand(ctx, args, nil) }

// runSinkCommand is `draftflow sink args`; served, when not nil, is told the address the metrics
// server listens on.
func runSinkCommand(ctx context.Context, args []string, served func(addr string)) error {
	c := common{served: served}
	var cfg sink.Config
	p, err := prepare(ctx, &c, sinkFlags(&c, &cfg), args, "sink")
	if err != nil {
		return err
	}
	defer p.close()
	cfg.JobConfig = c.record()
	defer p.publishStatus(ctx, pipeline.StatusStage("sink", cfg.Group))()
	cfg.Client, cfg.Logger, cfg.Registerer, cfg.Ready = p.kcl, p.log, p.reg, p.ready
	_, err = sink.Run(ctx, cfg)
	return err
}

// sinkFlags is the `draftflow sink` settings: the shared ones and the stage's.
func sinkFlags(c *common, cfg *sink.Config) *cli.Table {
	t := cli.New("sink")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, ":9090") })
	t.Add("sink", cfg.RegisterFlags)
	return t
}

// simFlags is the `draftflow sim` settings: the common flags, --addr and every sim.Config flag
// (--conversations, --reply-format, --tool-divergence-rate among them).
func simFlags() (t *cli.Table, c *common, cfg *sim.Config, addr *string) {
	c, cfg, addr = &common{}, &sim.Config{}, new(string)
	t = cli.New("sim")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, "") })
	t.Add("sim", func(fs *flag.FlagSet) {
		fs.StringVar(addr, "addr", "127.0.0.1:30000", "listen address")
		cfg.RegisterFlags(fs)
	})
	return t, c, cfg, addr
}

func cmdSim(ctx context.Context, args []string) error {
	t, c, cfg, addr := simFlags()
	fs, eff, err := load(t, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.effective = eff
	p, err := c.setup(ctx)
	if err != nil {
		return err
	}
	defer p.close()
	cfg.Logger = p.log
	p.log.Info("simulated SGLang server", "addr", *addr)
	return sim.ListenAndServe(ctx, *addr, *cfg)
}

// ingestBar draws an ingest run's progress (input bytes read, rate and ETA) as a progress bar on w.
type ingestBar struct {
	w   io.Writer
	bar *progress.Bar
}

func (b *ingestBar) Begin(total int64) {
	b.bar = progress.New(b.w, "ingest", total, progress.Options{Bytes: true})
}

func (b *ingestBar) Read(n int64) { b.bar.Add(n) }

func (b *ingestBar) End(ok bool) {
	if ok {
		b.bar.Finish()
	} else {
		b.bar.Clear()
	}
}

// console is the process's stderr, shared by log lines and progress lines.
var console = progress.NewConsole(os.Stderr)

// stderr is where logs and progress lines go.
func stderr() io.Writer { return console }
