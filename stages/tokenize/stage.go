// Package tokenize is the tokenize stage: it consumes Prompts, renders each with the model's chat template,
// tokenizes the text exactly as Hugging Face would, and produces Tokenized records. Prompts that cannot be
// rendered, or that leave no room for generation in the model's context, go to the dead-letter topic.
//
// The tokenizer (stages/tokenize/tokenizer) and the chat template engine (stages/tokenize/chattemplate) are
// pure Go; Model joins them for one model directory.
package tokenize

import (
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
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/topics"
)

// DefaultGroup is the consumer group of the tokenize stage when Config.Group is empty.
const DefaultGroup = "draftflow-tokenize"

// Config configures the tokenize stage. Zero values are documented defaults.
type Config struct {
	// Kafka says where the topics are.
	Kafka kafka.Config
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

// stageMetrics are the tokenize stage's series, registered on Config.Registerer.
type stageMetrics struct {
	prompts, tokens prometheus.Counter
	foreignTurns    prometheus.Counter
	rejected        *prometheus.CounterVec
	encodeSeconds   prometheus.Histogram
}

func newStageMetrics(reg prometheus.Registerer) *stageMetrics {
	return &stageMetrics{
		prompts: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draftflow_tokenize_prompts_total", Help: "Prompts tokenized and produced.",
		})),
		tokens: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draftflow_tokenize_tokens_total", Help: "Prompt tokens produced.",
		})),
		foreignTurns: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draftflow_tokenize_foreign_turns_skipped_total",
			Help: "Later turns of another namespace's conversations skipped while reading its prompts (--input-namespace).",
		})),
		rejected: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_tokenize_rejected_total", Help: "Prompts dead-lettered, by reason.",
		}, []string{"reason"})),
		encodeSeconds: metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "draftflow_tokenize_encode_seconds", Help: "Time to render and encode one prompt.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		})),
	}
}

// Run consumes prompts until ctx is cancelled.
func Run(ctx context.Context, cfg Config) (err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("stage", "tokenize")
	met := newStageMetrics(cfg.Registerer)
	m := cfg.Model
	if m == nil {
		var err error
		if m, err = LoadModel(cfg.ModelDir); err != nil {
			return err
		}
	}
	name := m.Name
	if cfg.ModelName != "" {
		name = cfg.ModelName
	}
	ctxLen, err := m.ContextWindow(cfg.ContextLength)
	if err != nil {
		return err
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	group := cfg.Group
	if group == "" {
		group = DefaultGroup
	}
	parsers, err := m.Parsers(cfg.ReasoningParser, cfg.ToolCallParser)
	if err != nil {
		return err
	}
	log.Info("tokenize starting", "model", name, "hash", m.Hash, "context_length", ctxLen, "workers", workers,
		"reasoning_parser", parsers.Reasoning, "tool_call_parser", parsers.Tools)

	kcl, err := kafka.NewClient(cfg.Kafka)
	if err != nil {
		return err
	}
	defer kcl.Close()
	out := kcl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{})
	dead := kcl.NewDeadLetters("tokenize")
	// Closing flushes what is in flight: the output first, whose failures may still be dead-lettered. An error
	// closing them is the stage's when it has none.
	defer func() {
		if cerr := errors.Join(out.Close(), dead.Close()); cerr != nil && err == nil {
			err = fmt.Errorf("tokenize: close producers: %w", cerr)
		}
	}()

	// fatal stops the stage when Kafka refuses a write: the delivery stays unfinished and is redelivered later.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fatal := func(err error) { cancel(err) }

	reject := func(d *kafka.Delivery, p *topics.Prompt, reason, label string) {
		met.rejected.WithLabelValues(label).Inc()
		log.Warn("prompt rejected", "id", p.ID, "where", d.Where(), "reason", reason)
		// The one dead-letter policy (kafka.DeadLetters): retried while the stage runs, abandoned (and
		// redelivered) at shutdown.
		dead.Reject(runCtx, d, &topics.Rejection{ID: p.ID, Dataset: p.Dataset, Reason: reason, Class: label, Source: p.Source},
			func(err error) {
				if err != nil {
					d.Abandon()
					return
				}
				d.Done()
			})
	}

	// Whether the chat template shows tools is checked on each dataset's first prompt that has tools.
	var toolsChecked onceEach
	work := make(chan *kafka.Delivery, workers*4)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				if runCtx.Err() != nil {
					d.Abandon()
					continue
				}
				var p topics.Prompt
				if err := topics.Unmarshal(d.Message.Value, &p); err != nil {
					reject(d, &p, fmt.Sprintf("undecodable prompt at %s: %v", d.Where(), err), "decode")
					continue
				}
				start := time.Now()
				text, ids, err := m.encode(&p)
				met.encodeSeconds.Observe(time.Since(start).Seconds())
				if err != nil {
					reject(d, &p, fmt.Sprintf("prompt %s%s: %v", p.ID, origin(&p), err), "template")
					continue
				}
				if len(p.Tools) > 0 && toolsChecked.firstOf(p.Dataset) && m.IgnoresTools(&p, text) {
					log.Warn("the chat template ignores tools: this dataset's prompts carry tools the model is not shown",
						"dataset", p.Dataset, "model", name, "first", fmt.Sprintf("%s%s", p.ID, origin(&p)))
				}
				if !Fits(len(ids), p.Sampling.MaxNewTokens, ctxLen) {
					reject(d, &p, fmt.Sprintf("prompt %s%s is %d tokens; with max_new_tokens %d it does not fit the model context of %d tokens",
						p.ID, origin(&p), len(ids), p.Sampling.MaxNewTokens, ctxLen), "too_long")
					continue
				}
				rec := &topics.Tokenized{ID: p.ID, Dataset: p.Dataset, Turn: p.Turn, Sampling: p.Sampling, Source: p.Source,
					Model: name, TokenizerHash: m.Hash, InputIDs: ids, Endpoint: p.Endpoint, Continuation: p.Continuation}
				if len(p.Rest) > 0 {
					rec.Thread = &topics.Thread{Messages: p.Messages, Tools: p.Tools, Rest: p.Rest}
					rec.Parsers = parsers
					rec.Parsers.ReasoningOpen = parsers.Reasoning != "" && reasoningOpen(text)
				}
				n := len(ids)
				// A record over the message limit, found here or refused by the broker, is dead-lettered:
				// retrying it would fail forever.
				tooLarge := func(err error) {
					reject(d, &p, fmt.Sprintf("prompt %s%s: %v", p.ID, origin(&p), err), "too_large")
				}
				if err := out.Send(runCtx, string(d.Message.Key), rec, func(err error) {
					if kafka.IsRecordTooLarge(err) {
						tooLarge(err)
						return
					}
					if err != nil {
						d.Abandon()
						fatal(fmt.Errorf("tokenize: produce %s: %w", p.ID, err))
						return
					}
					met.prompts.Inc()
					met.tokens.Add(float64(n))
					d.Done()
				}); kafka.IsRecordTooLarge(err) {
					tooLarge(err)
				} else if err != nil {
					d.Abandon()
					fatal(err)
				}
			}
		}()
	}
	in := kcl.NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: group, MaxInFlight: 4096})
	cfg.Ready.Add("tokenize", func() error {
		if in.Assigned() == 0 {
			return errors.New("no partitions of the prompts topic assigned")
		}
		return nil
	})
	feed := func(d *kafka.Delivery) {
		select {
		case work <- d:
		case <-runCtx.Done():
			d.Abandon() // redelivered after a restart
		}
	}
	// Reading another namespace's prompts (--input-namespace): its ingested prompts are ours to tokenize,
	// its continuations (later turns built from its own replies) are not. The later turns of this
	// namespace's conversations come back on this namespace's prompts topic, read by a second consumer
	// (group "<group>-turns").
	foreign := cfg.Kafka.InputNamespace != "" && cfg.Kafka.InputNamespace != cfg.Kafka.Namespace
	var turnsErr error
	var turnsDone sync.WaitGroup
	if foreign {
		own := cfg.Kafka
		own.InputNamespace = ""
		ownCl, err := kafka.NewClient(own)
		if err != nil {
			return err
		}
		defer ownCl.Close()
		turns := ownCl.NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: group + "-turns", MaxInFlight: 4096})
		turnsDone.Add(1)
		go func() {
			defer turnsDone.Done()
			if turnsErr = turns.Run(runCtx, feed); turnsErr != nil {
				cancel(turnsErr)
			}
		}()
		log.Info("reading another namespace's prompts; this namespace's later turns from its own prompts topic",
			"input", cfg.Kafka.InputTopic(topics.TopicPrompts), "turns", own.Topic(topics.TopicPrompts))
	}
	err = in.Run(runCtx, func(d *kafka.Delivery) {
		if foreign {
			var p topics.Prompt
			if topics.Unmarshal(d.Message.Value, &p) == nil && p.Continuation {
				met.foreignTurns.Inc()
				d.Done()
				return
			}
		}
		feed(d)
	})
	if foreign {
		cancel(nil)
		turnsDone.Wait()
		if err == nil && ctx.Err() == nil {
			err = turnsErr
		}
	}
	close(work)
	wg.Wait()
	if cause := context.Cause(runCtx); cause != nil && cause != context.Canceled && ctx.Err() == nil {
		return cause
	}
	return err
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
