package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/draftflow/draftflow/internal/progress"
	"github.com/draftflow/draftflow/kafka"

	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// prepare parses flags, sets up logging/metrics and makes sure the topics exist.
func prepare(ctx context.Context, c *common, fs interface{ Parse([]string) error }, args []string, expect ...string) (kafka.Config, error) {
	if err := fs.Parse(args); err != nil {
		return kafka.Config{}, err
	}
	kc, _, err := c.setup(ctx, expect...)
	if err != nil {
		return kc, err
	}
	if err := requireBrokers(kc); err != nil {
		return kc, err
	}
	kcl, err := kafka.NewClient(kc)
	if err != nil {
		return kc, err
	}
	defer kcl.Close()
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := kcl.Admin().EnsureTopics(tctx, topics.Retained()...); err != nil {
		return kc, err
	}
	return kc, nil
}

func cmdIngest(ctx context.Context, args []string) error {
	fs := newFlagSet("ingest")
	var c common
	c.register(fs, "")
	var cfg ingest.Config
	mergeFlags(fs, "ingest", cfg.RegisterFlags)
	progress := fs.Bool("progress", true, "show a progress bar on stderr")
	kc, err := prepare(ctx, &c, fs, args)
	if err != nil {
		return err
	}
	stopStatus := startStatus(ctx, &kc, c.reg, statusIngest)
	cfg.Kafka = kc
	cfg.Logger = kc.Logger
	cfg.Registerer = c.reg
	if *progress {
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

// registerInputNamespace adds --input-namespace to a stage that consumes a topic.
func registerInputNamespace(fs *flag.FlagSet, topic string) *string {
	return fs.String("input-namespace", "", "read "+topic+" from this namespace instead of --namespace (its group, outputs and "+
		"dead letters stay in --namespace): e.g. re-tokenize one pipeline's prompts for another model")
}

// useInputNamespace points kc's consumers at the topic of namespace ns, which must exist.
func useInputNamespace(ctx context.Context, kc kafka.Config, ns, topic string) (kafka.Config, error) {
	if ns == "" {
		return kc, nil
	}
	src := kc
	src.Namespace = ns
	kcl, err := kafka.NewClient(src)
	if err != nil {
		return kc, err
	}
	defer kcl.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := kcl.Admin().PartitionCount(tctx, topic); err != nil {
		return kc, fmt.Errorf("--input-namespace %s: topic %s: %w", ns, src.Topic(topic), err)
	}
	kc.InputNamespace = ns
	kc.Logger.Info("reading another namespace", "topic", kc.InputTopic(topic), "writing_namespace", kc.Namespace)
	return kc, nil
}

func cmdTokenize(ctx context.Context, args []string) error {
	fs := newFlagSet("tokenize")
	var c common
	c.register(fs, ":9090")
	var cfg tokenize.Config
	mergeFlags(fs, "tokenize", cfg.RegisterFlags)
	inputNS := registerInputNamespace(fs, topics.TopicPrompts)
	kc, err := prepare(ctx, &c, fs, args, "tokenize")
	if err != nil {
		return err
	}
	if kc, err = useInputNamespace(ctx, kc, *inputNS, topics.TopicPrompts); err != nil {
		return err
	}
	if cfg.ModelDir == "" {
		return fmt.Errorf("--model is required")
	}
	defer startStatus(ctx, &kc, c.reg, withGroup(statusTokenize, cfg.Group))()
	cfg.Kafka, cfg.Logger, cfg.Registerer, cfg.Ready = kc, kc.Logger, c.reg, c.ready
	return tokenize.Run(ctx, cfg)
}

func cmdGenerate(ctx context.Context, args []string) error {
	fs := newFlagSet("generate")
	var c common
	c.register(fs, ":9090")
	var cfg generate.Config
	mergeFlags(fs, "generate", func(fs *flag.FlagSet) { registerGenerateFlags(fs, &cfg) })
	inputNS := registerInputNamespace(fs, topics.TopicTokenized)
	kc, err := prepare(ctx, &c, fs, args, "generate")
	if err != nil {
		return err
	}
	if kc, err = useInputNamespace(ctx, kc, *inputNS, topics.TopicTokenized); err != nil {
		return err
	}
	defer startStatus(ctx, &kc, c.reg, withGroup(statusGenerate, cfg.Group))()
	cfg.Kafka, cfg.Logger, cfg.Registerer, cfg.Ready = kc, kc.Logger, c.reg, c.ready
	return generate.Run(ctx, cfg)
}

func cmdSink(ctx context.Context, args []string) error { return runSinkCommand(ctx, args, nil) }

// runSinkCommand is `draftflow sink args`; served, when not nil, is told the address the metrics
// server listens on.
func runSinkCommand(ctx context.Context, args []string, served func(addr string)) error {
	fs := newFlagSet("sink")
	c := common{served: served}
	c.register(fs, ":9090")
	var cfg sink.Config
	registerSinkFlags(fs, &cfg)
	kc, err := prepare(ctx, &c, fs, args, "sink")
	if err != nil {
		return err
	}
	defer startStatus(ctx, &kc, c.reg, withGroup(statusSink, cfg.Group))()
	cfg.Kafka, cfg.Logger, cfg.Registerer, cfg.Ready = kc, kc.Logger, c.reg, c.ready
	_, err = sink.Run(ctx, cfg)
	return err
}

// simFlags is the `draftflow sim` flag set: the common flags, --addr and every sim.Config flag
// (--conversations, --reply-format, --tool-divergence-rate among them).
func simFlags() (fs *flag.FlagSet, c *common, cfg *sim.Config, addr *string) {
	fs = newFlagSet("sim")
	c, cfg = &common{}, &sim.Config{}
	c.register(fs, "")
	addr = fs.String("addr", "127.0.0.1:30000", "listen address")
	mergeFlags(fs, "sim", cfg.RegisterFlags)
	return fs, c, cfg, addr
}

func cmdSim(ctx context.Context, args []string) error {
	fs, c, cfg, addr := simFlags()
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, log, err := c.setup(ctx)
	if err != nil {
		return err
	}
	cfg.Logger = log
	log.Info("simulated SGLang server", "addr", *addr)
	return sim.ListenAndServe(ctx, *addr, *cfg)
}

func registerSinkFlags(fs *flag.FlagSet, cfg *sink.Config) {
	if cfg.Dir == "" {
		cfg.Dir = "out/run"
	}
	fs.StringVar(&cfg.Dir, "out", cfg.Dir, "output directory for shards (one subdirectory per run)")
	fs.IntVar(&cfg.RotateRows, "shard-rows", cfg.RotateRows, "rotate a shard after this many rows (0: sink default)")
	fs.Int64Var(&cfg.RotateBytes, "shard-bytes", cfg.RotateBytes, "rotate a shard after about this many bytes (0: sink default)")
	fs.DurationVar(&cfg.RotateInterval, "shard-interval", cfg.RotateInterval, "also rotate a shard once its oldest row is this old (0: never; rows wait in the journal, durable)")
	fs.DurationVar(&cfg.IdleFlush, "idle-flush", cfg.IdleFlush, "write every buffered row into shards once no record arrived for this long (0: 1m; negative: never)")
	fs.DurationVar(&cfg.JournalSync, "journal-sync", cfg.JournalSync, "fsync the journal of buffered rows this often: what a machine crash can lose (0: 1s)")
	fs.IntVar(&cfg.ZstdLevel, "zstd-level", cfg.ZstdLevel, "zstd level of the shards: 1, 3, 7 or 11 (0: zstd's default, 3; higher writes fewer bytes, slower)")
	fs.StringVar(&cfg.Group, "group", cfg.Group, "consumer group (default draftflow-sink)")
	fs.BoolVar(&cfg.AnnounceShards, "announce-shards", cfg.AnnounceShards, "announce each committed shard on the shard-files topic for `draftflow capture`")
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
