package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/background"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/topics"
)

// Results every stage shares; a stage names its own for what it makes (tokenized, generated, written, ...).
const (
	// Rejected is the result of a record dead-lettered (Record.Reject); its class says why.
	Rejected = "rejected"
	// Undecodable is the class of a consumed record the topics/ codec cannot decode.
	Undecodable = "undecodable"
	// TooLarge is the class of a record whose result can never be written: over the message size limit.
	TooLarge = "too_large"
	// Unencodable is the class of a record whose result cannot be encoded.
	Unencodable = "unencodable"
)

// Outcome is what became of a record: Result names it, Class says why (for Rejected), Tokens counts the tokens
// the result carried (draftflow_tokens_total).
type Outcome struct {
	Result, Class string
	Tokens        int
}

// Config configures a Stage; zero values are documented defaults.
type Config struct {
	// Client makes the stage's producers (its outputs and dead letters); the caller closes it after the Stage.
	Client *kafka.Client
	// Stage names the stage in metrics (label stage) and in its dead letters (Rejection.Stage).
	Stage string
	// Logger receives the lifecycle's logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives draftflow_records_total and draftflow_tokens_total (default
	// prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// MaxInFlight bounds the records started with From and not yet finished (default 4096); consumed records
	// are bounded by their kafka.Consumer.
	MaxInFlight int
}

// Stage is one running stage's side of the lifecycle: its dead letters, its outputs, its metrics and the context
// its writes are retried in. It is safe for concurrent use. Close it once no record is started any more.
type Stage struct {
	name string
	cl   *kafka.Client
	log  *slog.Logger
	ctx  context.Context // writes are retried while it lives
	dead *kafka.Producer // the rejected topic (deadletter.go)
	met  *lifeMetrics

	slots chan struct{}    // From records in flight
	open  sync.WaitGroup   // From records not finished
	bg    background.Group // done callbacks that must not run within the call given them (later)

	failed context.Context // cancelled with the stage's error (Fail)
	fail   context.CancelCauseFunc

	mu         sync.Mutex
	outs       []*Output
	closing    atomic.Bool
	rejections atomic.Int64 // dead letters logged
	closeOnce  sync.Once
	closeErr   error
}

// New returns the lifecycle of stage cfg.Stage. Its writes (results and dead letters) are retried while ctx lives;
// when ctx ends, the records whose writes are still pending are abandoned, to be redelivered.
func New(ctx context.Context, cfg Config) *Stage {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
	}
	failed, fail := context.WithCancelCause(context.Background())
	return &Stage{name: cfg.Stage, cl: cfg.Client, log: cfg.Logger.With("stage", cfg.Stage), ctx: ctx,
		dead: cfg.Client.NewProducer(topics.TopicRejected, kafka.ProducerConfig{}), met: newLifeMetrics(cfg.Registerer, cfg.Stage),
		slots: make(chan struct{}, cfg.MaxInFlight), failed: failed, fail: fail}
}

// Name is the stage's name.
func (s *Stage) Name() string { return s.name }

// Failed is closed when the stage met an error it cannot go on with (Err): credentials the brokers refuse, or a
// security setting that cannot be used. Consume stops then.
func (s *Stage) Failed() <-chan struct{} { return s.failed.Done() }

// Err returns the error that made the stage fail, or nil.
func (s *Stage) Err() error {
	if s.failed.Err() == nil {
		return nil
	}
	return context.Cause(s.failed)
}

// stop makes the stage fail with err (the first error wins).
func (s *Stage) stop(err error) {
	if s.failed.Err() == nil {
		s.log.Error("stage stops: Kafka refuses its writes", "err", err)
	}
	s.fail(err)
}

// Count records an outcome of a record the stage holds no Record for (the sink's next turns): once, now.
func (s *Stage) Count(o Outcome) { s.met.count(o) }

// DeadLetter writes r to the rejected topic for a record the stage holds no Record for, its payload trimmed to
// fit (see Record.DeadLetter), and calls done once, never before DeadLetter returns: nil once it is durable, or the
// error that stopped it (the stage's context ended; or Kafka refuses the stage's writes: the stage fails).
// Nothing is counted: count the record's outcome with Count when done reports nil.
func (s *Stage) DeadLetter(r *topics.Rejection, done func(error)) {
	s.deadLetter(nil, r, done)
}

// ended reports whether err only says the stage's context ended, or an output closed, before a write succeeded:
// the record is then abandoned and redelivered, and nothing is wrong with the stage.
func (s *Stage) ended(err error) bool {
	return s.ctx.Err() != nil || s.closing.Load() || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func rejectedWhat(r *topics.Rejection) string {
	switch {
	case r.ID != "":
		return r.ID
	case r.Source.File != "":
		return fmt.Sprintf("%s line %d", r.Source.File, r.Source.Line)
	}
	return "a record"
}

// Wait blocks until every record started with From has finished (its result or dead letter acknowledged, or
// abandoned).
func (s *Stage) Wait() { s.open.Wait() }

// Close flushes and closes the stage's outputs and dead letters: writes still retrying give up (their records
// are abandoned) and every callback has run when it returns. It returns the errors of closing them; a second
// call returns the same and does nothing else.
func (s *Stage) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.mu.Lock()
		outs := s.outs
		s.mu.Unlock()
		var errs []error
		for _, o := range outs {
			if err := o.p.Close(); err != nil {
				errs = append(errs, fmt.Errorf("%s: close the %s producer: %w", s.name, o.topic, err))
			}
		}
		s.bg.Wait() // the callbacks of results that could not be encoded, which dead-letter their records
		if err := s.dead.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: close the %s producer: %w", s.name, topics.TopicRejected, err))
		}
		s.bg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// later runs f, a done callback, on a goroutine Close waits for: a callback must never run within the call it
// was given to (its caller may hold a lock it takes).
func (s *Stage) later(f func()) { s.bg.Go(f) }

// lifeMetrics are the lifecycle's series, curried with the stage's name.
type lifeMetrics struct {
	records *prometheus.CounterVec // result, class
	tokens  prometheus.Counter
}

func newLifeMetrics(reg prometheus.Registerer, stage string) *lifeMetrics {
	records := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_records_total",
		Help: "Records a stage finished, by result (what became of the record: the stage's product, e.g. ingested, tokenized, " +
			"generated, written; rejected: dead-lettered; or why it was skipped) and class (why it was rejected; empty otherwise). " +
			"Each record counts once, when its result is decided.",
	}, []string{"stage", "result", "class"}))
	tokens := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "draftflow_tokens_total",
		Help: "Tokens of the records a stage finished: prompt tokens tokenized, output tokens generated, prompt and output tokens taken into shards.",
	}, []string{"stage"}))
	m, _ := records.CurryWith(prometheus.Labels{"stage": stage})
	return &lifeMetrics{records: m, tokens: tokens.WithLabelValues(stage)}
}

func (m *lifeMetrics) count(o Outcome) {
	m.records.WithLabelValues(o.Result, o.Class).Inc()
	if o.Tokens > 0 {
		m.tokens.Add(float64(o.Tokens))
	}
}
