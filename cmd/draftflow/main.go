// Command draftflow turns prompt datasets into EAGLE-3 drafter training data: a streaming pipeline of stages
// connected by Kafka topics (prompts -> tokenized -> generated -> sink).
//
// Each stage subcommand (ingest, tokenize, generate, sink) is what one container runs; `run` starts every
// stage in one process, against an embedded broker and a simulated SGLang server unless told otherwise; `sim`
// serves the simulator over HTTP; `status` shows a running pipeline from Kafka; `replay` moves a stopped stage's
// consumer group back (or forward); `encode`, `inspect`, `merge-turns`, `export` and `vocab` are tools around
// the pipeline (the benchmarks are draftflow-bench's). Each of the pipeline's commands reads its settings from a
// job file (--config, YAML keyed by the flags' names), the DRAFTFLOW_* variables and its flags, in that order of
// precedence; `config` prints the result (config.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/secret"
)

func commands() []cli.Command {
	return []cli.Command{
		{Name: "run", Summary: "run the whole pipeline in one process (embedded broker and simulator by default)", Run: cmdRun},
		{Name: "ingest", Summary: "read JSONL/Parquet conversations into the prompts topic", Run: cmdIngest},
		{Name: "tokenize", Summary: "apply the chat template and tokenizer: prompts -> tokenized", Run: cmdTokenize},
		{Name: "generate", Summary: "generate completions with SGLang: tokenized -> generated", Run: cmdGenerate},
		{Name: "sink", Summary: "write generated records to exactly-once Parquet shards", Run: cmdSink},
		{Name: "capture", Summary: "write each committed shard's EAGLE-3 features (two SGLang capture servers) beside it, exactly once", Run: cmdCapture},
		{Name: "status", Summary: "show a running pipeline: lag, rates, ETA, members, endpoints, rejections (--watch, --json)", Run: cmdStatus},
		{Name: "replay", Summary: "reset a stopped stage's consumer group to the earliest offset, a time or explicit offsets", Run: cmdReplay},
		{Name: "sim", Summary: "serve a simulated SGLang server", Run: cmdSim},
		{Name: "encode", Summary: "print the token ids the tokenize stage would produce for JSONL conversations on stdin", Run: cmdEncode},
		{Name: "inspect", Summary: "validate shards against their manifest and print totals", Run: cmdInspect},
		{Name: "merge-turns", Summary: "write one row per conversation where the turns merge token-exactly (the rest stay turn rows, with the reason)", Run: cmdMergeTurns},
		{Name: "export", Summary: "export one run's shards as SpecForge or speculators JSONL, with the trainer's length limits", Run: cmdExport},
		{Name: "vocab", Summary: "count a run's generated tokens and write the draft vocabulary maps (d2t.npy, t2d.npy)", Run: cmdVocab},
		{Name: "config", Summary: "print a command's effective configuration (job file, DRAFTFLOW_* variables, flags) and where each value came from", Run: cmdConfig},
	}
}

func usage(w io.Writer) { cli.WriteUsage(w, "draftflow", "command", commands()) }

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stderr)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	name := os.Args[1]
	if c, ok := cli.Find(commands(), name); ok {
		ctx, stop := shutdownContext()
		err := c.Run(ctx, os.Args[2:])
		stop()
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "draftflow %s: %v\n", name, err)
			var ec exitCode
			if errors.As(err, &ec) {
				os.Exit(int(ec))
			}
			os.Exit(1)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "draftflow: unknown command %q\n\n", name)
	usage(os.Stderr)
	os.Exit(2)
}

// shutdownContext returns a context that ends on the first SIGTERM or SIGINT: the command stops fetching,
// lets in-flight work finish (generate: --shutdown-grace) and commits what is durable. A second signal exits at
// once with status 130; what was in flight is uncommitted, so it is redelivered, never lost. The same signal
// again within echoWindow is the first one delivered twice (GNU timeout signals the process and its group),
// not a second.
func shutdownContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go watchSignals(ctx, cancel, sig, time.Now, os.Exit)
	return ctx, func() { signal.Stop(sig); cancel() }
}

// echoWindow is how soon after the first signal the same signal counts as the same delivery.
const echoWindow = time.Second

// watchSignals is shutdownContext's watcher: the first signal cancels, a second one calls exit(130).
func watchSignals(ctx context.Context, cancel context.CancelFunc, sig <-chan os.Signal, now func() time.Time, exit func(int)) {
	var first os.Signal
	var at time.Time
	select {
	case first = <-sig:
		at = now()
		slog.Info("shutting down: finishing in-flight work; a second signal exits at once", "signal", first.String())
		cancel()
	case <-ctx.Done():
		return
	}
	for s := range sig {
		if s == first && now().Sub(at) < echoWindow {
			slog.Debug("the same signal again at once: one delivery to the process and its group, not a second signal", "signal", s.String())
			continue
		}
		slog.Warn("second signal: exiting now; in-flight work is redelivered", "signal", s.String())
		exit(130)
		return
	}
}

// exitCode is an error that asks for a specific process exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// common holds the flags every Kafka-facing subcommand shares.
type common struct {
	brokers     string
	partitions  int
	namespace   string
	maxMsgBytes int
	metricsAddr string
	pprof       bool
	logLevel    string
	logFormat   string
	security    kafka.Security // --kafka-tls*, --kafka-sasl-* (and DRAFTFLOW_KAFKA_* variables)
	retention   time.Duration  // --retention of created topics (0: forever)

	// effective is the command's configuration once loaded (load): each setting's value and where it came from.
	effective *cli.Effective

	// served, when not nil, is told the address the process's HTTP server listens on once it does
	// (--metrics-addr may name port 0).
	served func(addr string)
}

func (c *common) register(fs *flag.FlagSet, metricsDefault string) {
	fs.StringVar(&c.brokers, "brokers", "", "Kafka bootstrap brokers, comma-separated (env "+envBrokers+")")
	fs.IntVar(&c.partitions, "partitions", kafka.DefaultPartitions, "partitions of topics this process creates")
	fs.StringVar(&c.namespace, "namespace", "", "prefix for topic and group names (env "+envNamespace+")")
	fs.IntVar(&c.maxMsgBytes, "max-message-bytes", kafka.DefaultMaxMessageBytes, "largest Kafka record batch, set on created topics and writers")
	cli.BindKafkaSecurity(fs, &c.security)
	fs.Func("retention", "how long topics this process creates keep records: forever (default), a duration (72h) or days (7d); existing topics keep theirs (env "+envRetention+")",
		func(v string) error {
			d, err := kafka.ParseRetention(v)
			c.retention = d
			return err
		})
	fs.StringVar(&c.metricsAddr, "metrics-addr", metricsDefault, "serve /metrics, /healthz and /readyz here (empty: off)")
	fs.BoolVar(&c.pprof, "pprof", false, "also serve Go's profiles (/debug/pprof/) on --metrics-addr")
	c.logLevel, c.logFormat = "info", "text"
	fs.Func("log-level", "debug, info, warn or error (default info)", func(v string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("unknown log level %q: want debug, info, warn or error", v)
		}
		c.logLevel = v
		return nil
	})
	fs.Func("log-format", "text or json (default text)", func(v string) error {
		if v != "text" && v != "json" {
			return fmt.Errorf("unknown log format %q: want text or json", v)
		}
		c.logFormat = v
		return nil
	})
}

// process is what a command holds while it runs: its logger, Kafka settings and one Kafka client, metrics
// registry, readiness checks and HTTP server. close releases them.
type process struct {
	log   *slog.Logger
	kc    kafka.Config         // brokers may be empty (run, sim)
	kcl   *kafka.Client        // the process's one client of the cluster (connect)
	reg   *prometheus.Registry // the process's metrics
	ready *metrics.Readiness   // the process's readiness checks
	srv   *metrics.Server      // nil without --metrics-addr
}

// setup installs the logger, makes the process's metrics registry and readiness checks, starts the one HTTP
// server of the process (/metrics, /healthz, /readyz) when --metrics-addr is set, and returns them with the
// Kafka settings (brokers may be empty). The process is not ready until each part named in expect has Added
// its own readiness check: those parts are registered as "starting" before the server answers its first
// /readyz. The command calls close when it is done.
func (c *common) setup(ctx context.Context, expect ...string) (*process, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, err // checked when the flag was parsed
	}
	opts := &slog.HandlerOptions{Level: level}
	// Logs go through the console progress lines are drawn on, so that neither tears the other.
	var h slog.Handler = slog.NewTextHandler(stderr(), opts)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(stderr(), opts)
	}
	p := &process{log: slog.New(h), reg: metrics.NewRegistry(), ready: &metrics.Readiness{}}
	slog.SetDefault(p.log)
	p.ready.Expect(expect...)
	if c.effective != nil && c.effective.File != "" {
		p.log.Info("job file", "path", c.effective.File, "keys_of_other_commands", len(c.effective.Unused))
	}
	if v := os.Getenv(cli.EnvKafkaSASLPassword); v != "" && c.security.SASL.Password.IsZero() {
		c.security.SASL.Password = secret.New(v)
	}
	p.kc = kafka.Config{
		Brokers:         kafka.ParseBrokers(c.brokers),
		Partitions:      c.partitions,
		MaxMessageBytes: c.maxMsgBytes,
		Namespace:       c.namespace,
		Security:        c.security,
		Retention:       c.retention,
		Logger:          p.log,
		Registerer:      p.reg,
	}
	if err := p.kc.Security.Validate(); err != nil {
		return nil, err
	}
	if p.kc.Security != (kafka.Security{}) {
		if len(p.kc.Brokers) == 0 {
			return nil, errors.New("--kafka-tls*/--kafka-sasl-* settings need --brokers: the embedded broker speaks plaintext only")
		}
		p.log.Info("Kafka security", p.kc.Security.Describe()...)
	}
	if c.metricsAddr != "" {
		srv, err := metrics.Serve(ctx, c.metricsAddr, p.reg, p.ready, c.pprof, p.log)
		if err != nil {
			return nil, err
		}
		p.srv = srv
		if c.served != nil {
			c.served(srv.Addr())
		}
	}
	return p, nil
}

// connect makes the process's one client of the cluster --brokers names: every stage of the process is handed
// it. It is an error, naming the flag, when there are no brokers.
func (p *process) connect() error {
	if len(p.kc.Brokers) == 0 {
		return errors.New("no Kafka brokers: pass --brokers host:port[,host:port] or set DRAFTFLOW_BROKERS (only `draftflow run` starts an embedded broker)")
	}
	kcl, err := kafka.NewClient(p.kc)
	if err != nil {
		return err
	}
	p.kcl = kcl
	return nil
}

// close closes the Kafka client and stops the HTTP server, waiting for it.
func (p *process) close() {
	if p.kcl != nil {
		p.kcl.Close()
	}
	if p.srv != nil {
		if err := p.srv.Close(); err != nil {
			p.log.Warn("metrics endpoint", "err", err)
		}
	}
}

// stringList is a repeatable string flag that also splits commas.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}

// newFlagSet is the flag set of a command that has no cli.Table yet.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("draftflow "+name, flag.ContinueOnError)
	return fs
}
