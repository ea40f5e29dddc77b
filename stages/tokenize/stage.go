// Package tokenize is the tokenize stage: it consumes Prompts, renders each with the model's chat template,
// tokenizes the text exactly as Hugging Face would, and produces Tokenized records. Prompts that cannot be
// rendered, or that leave no room for generation in the model's context, go to the dead-letter topic. A row
// brought in with its output (topics.Kept) is checked against the model (vocabulary, context window) and keeps
// its ids, or has the dataset's reply rendered after its prompt (EncodeReply); see kept.go.
//
// The tokenizer (stages/tokenize/tokenizer) and the chat template engine (stages/tokenize/chattemplate) are
// pure Go; Model joins them for one model directory.
package tokenize

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/topics"
)

// DefaultGroup is the consumer group of the tokenize stage when Config.Group is empty.
const DefaultGroup = "draftflow-tokenize"

// Config configures the tokenize stage. Zero values are documented defaults.
type Config struct {
	// Client is the process's client of the cluster (required); Run does not close it.
	Client *kafka.Client
	// InputNamespace, when set, is the namespace the prompts are read from instead of the Client's; the group,
	// outputs and dead letters stay in the Client's (see consumers).
	InputNamespace string
	// Group is the consumer group (default "draftflow-tokenize"); replicas share it.
	Group string
	// ModelDir holds tokenizer.json and tokenizer_config.json. Ignored when Model is set.
	ModelDir string
	// Model, when set, is used instead of loading ModelDir (the single-process run shares one).
	Model *Model
	// ModelName overrides the model name recorded downstream (default: the directory name).
	ModelName string
	// ContextLength is the model's context window in tokens (default: from the model directory's
	// config.json or tokenizer_config.json; required when the directory gives none).
	ContextLength int
	// ReasoningParser and ToolCallParser name how generate splits the replies of multi-turn conversations
	// (SGLang's --reasoning-parser and --tool-call-parser names, or "none"); empty means detected from the
	// chat template (DetectParsers).
	ReasoningParser, ToolCallParser string
	// Workers is the number of concurrent encoders (default GOMAXPROCS).
	Workers int
	// Logger receives stage logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the stage's metrics (default prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// Ready, when set, gets the stage's readiness check: it owns partitions of the prompts topic.
	Ready *metrics.Readiness
}

// RegisterFlags binds the stage's flags to c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ModelDir, "model", c.ModelDir, "model directory with tokenizer.json and tokenizer_config.json")
	fs.StringVar(&c.ModelName, "model-name", c.ModelName, "model name recorded in outputs (default: the directory name)")
	fs.IntVar(&c.ContextLength, "context-length", c.ContextLength,
		"the model's context window in tokens (default: from the model directory; required when it gives none)")
	fs.StringVar(&c.ReasoningParser, "reasoning-parser", c.ReasoningParser,
		"how replies split into reasoning and content for the next turn: "+strings.Join(reasoningParsers, ", ")+" or none (default: from the chat template)")
	fs.StringVar(&c.ToolCallParser, "tool-call-parser", c.ToolCallParser,
		"how replies' tool calls are parsed for the next turn: "+strings.Join(toolParsers, ", ")+" or none (default: from the chat template)")
	fs.IntVar(&c.Workers, "workers", c.Workers, "concurrent encoders (default: number of CPUs)")
	fs.StringVar(&c.Group, "group", c.Group, "consumer group (default draftflow-tokenize)")
}

// The results of the stage's records (draftflow_records_total{stage="tokenize"}), besides stream.Rejected.
const (
	resultTokenized   = "tokenized"    // produced to the tokenized topic
	resultForeignTurn = "foreign_turn" // a later turn of another namespace's conversation (--input-namespace): skipped
)

// encodeSeconds is the tokenize stage's own series, registered on Config.Registerer.
func encodeSeconds(reg prometheus.Registerer) prometheus.Histogram {
	return metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "draftflow_tokenize_encode_seconds", Help: "Time to render and encode one prompt.",
		Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
	}))
}

// Run consumes prompts until ctx is cancelled. Each is decoded, rendered and encoded by the record lifecycle
// (package kafka/stream) on cfg.Workers goroutines; its Tokenized record is written under the lifecycle's produce
// policy, and a prompt that cannot be rendered, or leaves no room for generation, is dead-lettered.
func Run(ctx context.Context, cfg Config) error {
	log := cmp.Or(cfg.Logger, slog.Default()).With("stage", "tokenize")
	t, err := newWorker(cfg, log)
	if err != nil {
		return err
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	log.Info("tokenize starting", "model", t.name, "hash", t.m.Hash, "context_length", t.ctxLen, "workers", workers,
		"reasoning_parser", t.parsers.Reasoning, "tool_call_parser", t.parsers.Tools)
	kcl := cfg.Client
	if kcl == nil {
		return errors.New("tokenize: Config.Client is required")
	}
	life := stream.New(ctx, stream.Config{Client: kcl, Stage: "tokenize", Logger: cmp.Or(cfg.Logger, slog.Default()), Registerer: cfg.Registerer})
	t.out = life.Output(topics.TopicTokenized)
	ins := t.consumers(cfg, kcl, log)
	cfg.Ready.Add("tokenize", func() error {
		if ins[0].Assigned() == 0 {
			return errors.New("no partitions of the prompts topic assigned")
		}
		return nil
	})
	err = stream.Consume(ctx, life, stream.Options[topics.Prompt]{Workers: workers}, t.handle, ins...)
	return errors.Join(err, life.Close())
}

// worker is the work of one running stage: a prompt in, a Tokenized record out.
type worker struct {
	m       *Model
	name    string // the model name recorded downstream
	ctxLen  int
	parsers topics.Parsers
	log     *slog.Logger
	encode  prometheus.Histogram
	out     *stream.Output
	// foreign is the physical prompts topic of another namespace read with --input-namespace (empty: none):
	// its continuations are not this namespace's to tokenize.
	foreign      string
	toolsChecked onceEach // whether the chat template shows tools is checked on each dataset's first prompt with tools
}

// newWorker loads the model (unless cfg.Model is set) and resolves the context window and reply parsers.
func newWorker(cfg Config, log *slog.Logger) (*worker, error) {
	m := cfg.Model
	if m == nil {
		var err error
		if m, err = LoadModel(cfg.ModelDir); err != nil {
			return nil, err
		}
	}
	ctxLen, err := m.ContextWindow(cfg.ContextLength)
	if err != nil {
		return nil, err
	}
	parsers, err := m.Parsers(cfg.ReasoningParser, cfg.ToolCallParser)
	if err != nil {
		return nil, err
	}
	return &worker{m: m, name: cmp.Or(cfg.ModelName, m.Name), ctxLen: ctxLen, parsers: parsers, log: log,
		encode: encodeSeconds(cfg.Registerer)}, nil
}

// consumers returns the stage's consumers of the prompts topic: its group's, and, when it reads another
// namespace's prompts (InputNamespace), a second one (group "<group>-turns") for the later turns of this
// namespace's conversations, which come back on this namespace's prompts topic. The foreign ingested prompts
// are ours to tokenize, the foreign continuations (later turns built from that namespace's replies) are not.
func (t *worker) consumers(cfg Config, kcl *kafka.Client, log *slog.Logger) []*kafka.Consumer {
	group := cmp.Or(cfg.Group, DefaultGroup)
	own := kcl.Config()
	ins := []*kafka.Consumer{kcl.NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: group, Namespace: cfg.InputNamespace, MaxInFlight: 4096})}
	if cfg.InputNamespace == "" || cfg.InputNamespace == own.Namespace {
		return ins
	}
	t.foreign = kafka.Config{Namespace: cfg.InputNamespace}.Topic(topics.TopicPrompts)
	log.Info("reading another namespace's prompts; this namespace's later turns from its own prompts topic",
		"input", t.foreign, "turns", own.Topic(topics.TopicPrompts))
	turns := kcl.NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: group + "-turns", Namespace: own.Namespace, MaxInFlight: 4096})
	return append(ins, turns)
}

// handle tokenizes one prompt and produces its Tokenized record, or rejects it.
func (t *worker) handle(r *stream.Record[topics.Prompt]) {
	p := r.Value
	if p.Continuation && t.foreign != "" && r.Message().Topic == t.foreign {
		r.Finish(stream.Outcome{Result: resultForeignTurn})
		return
	}
	if p.Origin != "" && p.Origin != topics.OriginGenerated {
		t.keep(r) // a row brought in with its output: kept.go
		return
	}
	start := time.Now()
	text, ids, err := t.m.encode(p)
	t.encode.Observe(time.Since(start).Seconds())
	if err != nil {
		r.Reject("template", fmt.Sprintf("prompt %s%s: %v", p.ID, origin(p), err), nil)
		return
	}
	if len(p.Tools) > 0 && t.toolsChecked.firstOf(p.Dataset) && t.m.IgnoresTools(p, text) {
		t.log.Warn("the chat template ignores tools: this dataset's prompts carry tools the model is not shown",
			"dataset", p.Dataset, "model", t.name, "first", fmt.Sprintf("%s%s", p.ID, origin(p)))
	}
	if !Fits(len(ids), p.Sampling.MaxNewTokens, t.ctxLen) {
		r.Reject("too_long", fmt.Sprintf("prompt %s%s is %d tokens; with max_new_tokens %d it does not fit the model context of %d tokens",
			p.ID, origin(p), len(ids), p.Sampling.MaxNewTokens, t.ctxLen), nil)
		return
	}
	rec := &topics.Tokenized{ID: p.ID, Dataset: p.Dataset, Turn: p.Turn, Sampling: p.Sampling, Source: p.Source,
		Model: t.name, TokenizerHash: t.m.Hash, InputIDs: ids, Endpoint: p.Endpoint, Continuation: p.Continuation}
	if len(p.Rest) > 0 {
		rec.Thread = &topics.Thread{Messages: p.Messages, Tools: p.Tools, Rest: p.Rest}
		rec.Parsers = t.parsers
		rec.Parsers.ReasoningOpen = t.parsers.Reasoning != "" && reasoningOpen(text)
	}
	r.Produce(t.out, r.Key(), rec, stream.Outcome{Result: resultTokenized, Tokens: len(ids)})
}

// onceEach answers true once per key.
type onceEach struct {
	mu   sync.Mutex
	seen map[string]bool
}

// firstOf reports whether key is asked about for the first time.
func (o *onceEach) firstOf(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] {
		return false
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[key] = true
	return true
}

// origin says where a prompt came from, for rejection reasons: " (file line N)", or "" when unknown.
func origin(p *topics.Prompt) string {
	if p.Source.File == "" {
		return ""
	}
	return fmt.Sprintf(" (%s line %d)", p.Source.File, p.Source.Line)
}
