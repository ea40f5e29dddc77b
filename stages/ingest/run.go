package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/idset"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/topics"
)

// Stage is the name ingest gives itself in Rejection records.
const Stage = "ingest"

// DefaultMaxInFlight bounds the records Run has sent and Kafka has not yet acknowledged.
const DefaultMaxInFlight = 4096

// Progress is told how far a run has read its inputs, by bytes of input files. Begin is called once,
// before the first input is read, End once after the last record is acknowledged; Read is called between
// them from the goroutine reading the inputs.
type Progress interface {
	// Begin gives the total size of the run's inputs in bytes.
	Begin(totalBytes int64)
	// Read adds n input bytes consumed since the last call.
	Read(n int64)
	// End says the run is over; ok is false when it failed.
	End(ok bool)
}

// Config configures Run. Zero values are documented defaults; Kafka.Brokers and Inputs are required.
type Config struct {
	// Kafka says how to reach the brokers; prompts and rejected are created if missing.
	Kafka kafka.Config
	// Inputs are JSONL (optionally .gz/.zst) or Parquet files, or directories holding them.
	Inputs []string
	// Dataset names the dataset of every input; empty means each file's stem (see DatasetName).
	Dataset string
	// SettingsFile is an optional JSON file of per-dataset generation settings (see Settings).
	SettingsFile string
	// Defaults are the generation settings of every dataset, before the settings file's overrides.
	Defaults topics.Sampling
	// Turns is the turns setting of datasets whose settings do not say (TurnsAll or TurnsLast; default
	// TurnsAll): every assistant turn of a conversation, or only the last.
	Turns string
	// Logger receives the stage's logs (default slog.Default()).
	Logger *slog.Logger
	// Progress, when set, is told how far the run has read its inputs (the command line draws a bar from
	// it); nil means nobody is.
	Progress Progress
	// MaxLineBytes is the longest accepted JSONL line (default DefaultMaxLineBytes).
	MaxLineBytes int
	// MaxInFlight bounds records sent but not yet acknowledged (default DefaultMaxInFlight).
	MaxInFlight int
	// Registerer receives the stage's metrics (default prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// OnPrompt, if set, is called with the id and source of each prompt once Kafka acknowledged it, from the
	// producer's goroutine (not in input order). Run keeps no list of ids: a caller that needs them keeps them.
	OnPrompt func(id string, src topics.Source)
	// TempDir is where Run keeps the ids it has seen, for the duplicate check, in a temporary file of its own
	// (default os.TempDir()); memory holds only a bounded number of them (see internal/idset).
	TempDir string
}

// Result summarises a Run.
type Result struct {
	// Prompts is the number of prompts Kafka acknowledged on the prompts topic.
	Prompts int
	// Rejected is the number of lines Kafka acknowledged on the rejected topic.
	Rejected int
	// Datasets counts acknowledged prompts per dataset.
	Datasets map[string]int
	// Reasons counts acknowledged rejections per reason.
	Reasons map[Reason]int
	// IgnoredKeys lists, per dataset, the row keys (Parquet columns) its rows have and ingest does not read
	// (see RowKeys), sorted; each was logged once, with the first line that has it.
	IgnoredKeys map[string][]string
}

// ingestMetrics are ingest's series, registered on Config.Registerer.
type ingestMetrics struct {
	prompts, rejected *prometheus.CounterVec
	bytesRead         prometheus.Counter
}

func newIngestMetrics(reg prometheus.Registerer) *ingestMetrics {
	return &ingestMetrics{
		prompts: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_ingest_prompts_total", Help: "Prompts ingest wrote to the prompts topic (acknowledged), per dataset.",
		}, []string{"dataset"})),
		rejected: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draftflow_ingest_rejected_total", Help: "Input lines ingest sent to the rejected topic (acknowledged), per reason.",
		}, []string{"reason"})),
		bytesRead: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draftflow_ingest_input_bytes_total", Help: "Input file bytes read by ingest.",
		})),
	}
}

// maxLoggedRejections is how many rejections a run logs at warning level; the rest are logged at debug.
const maxLoggedRejections = 20

// Run reads every input, writes each valid conversation to topics.TopicPrompts keyed by its id and each bad
// line to topics.TopicRejected, and returns once Kafka has acknowledged every record it sent. A bad line
// never stops the run; an unreadable file, a failed write or a cancelled ctx does, and Run then returns the
// error together with what was acknowledged so far.
func Run(ctx context.Context, cfg Config) (Result, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("stage", Stage)
	if len(cfg.Kafka.Brokers) == 0 {
		return Result{}, errors.New("ingest: no Kafka brokers configured")
	}
	if len(cfg.Inputs) == 0 {
		return Result{}, errors.New("ingest: no inputs (use --input)")
	}
	inputs, err := ExpandInputs(cfg.Inputs)
	if err != nil {
		return Result{}, err
	}
	if cfg.Turns == "" {
		cfg.Turns = TurnsAll
	}
	if err := checkTurns(cfg.Turns); err != nil {
		return Result{}, fmt.Errorf("ingest: --turns: %w", err)
	}
	var settings Settings
	if cfg.SettingsFile != "" {
		if settings, err = LoadSettings(cfg.SettingsFile); err != nil {
			return Result{}, err
		}
	}
	var total int64
	for _, in := range inputs {
		st, err := os.Stat(in)
		if err != nil {
			return Result{}, fmt.Errorf("ingest: %w", err)
		}
		total += st.Size()
	}
	kcl, err := kafka.NewClient(cfg.Kafka)
	if err != nil {
		return Result{}, fmt.Errorf("ingest: %w", err)
	}
	defer kcl.Close()
	if err := kcl.Admin().EnsureTopics(ctx, topics.TopicPrompts, topics.TopicRejected); err != nil {
		return Result{}, fmt.Errorf("ingest: %w", err)
	}

	maxInFlight := cfg.MaxInFlight
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	maxMsg := cfg.Kafka.MaxMessageBytes
	if maxMsg <= 0 {
		maxMsg = kafka.DefaultMaxMessageBytes
	}
	seen, err := idset.New(cfg.TempDir)
	if err != nil {
		return Result{}, fmt.Errorf("ingest: %w", err)
	}
	defer seen.Close()
	r := &runner{
		log:      log,
		settings: settings,
		defaults: cfg.Defaults,
		turns:    cfg.Turns,
		sampling: map[string]topics.Sampling{},
		prompts:  kcl.NewProducer(topics.TopicPrompts, kafka.ProducerConfig{}),
		dead:     kcl.NewDeadLetters(Stage),
		met:      newIngestMetrics(cfg.Registerer),
		ctx:      ctx,
		slots:    make(chan struct{}, maxInFlight),
		maxMsg:   maxMsg,
		seen:     seen,
		fileIdx:  map[string]int{},
		onPrompt: cfg.OnPrompt,
		datasets: map[string]int{},
		reasons:  map[Reason]int{},
		ignored:  map[string][]string{},
	}
	readBytes := func(n int64) { r.met.bytesRead.Add(float64(n)) }
	if p := cfg.Progress; p != nil {
		p.Begin(total)
		readBytes = func(n int64) { r.met.bytesRead.Add(float64(n)); p.Read(n) }
	}

	start := time.Now()
	var runErr error
	for _, path := range inputs {
		before := r.counts()
		opt := readOptions{dataset: cfg.Dataset, maxLineBytes: cfg.MaxLineBytes, progress: readBytes, unknownKeys: r.unknownKeys}
		if err := readFile(ctx, path, opt, r.handle); err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				runErr = err
				break
			}
			// The rest of this file is unreadable: one rejection says from where and why; the next file is read.
			log.Error("input file unreadable; the rest of it is rejected", "file", path, "from_line", fe.Line, "err", fe.Err.Detail)
			dataset := cfg.Dataset
			if dataset == "" {
				dataset = DatasetName(path)
			}
			r.rejectWith(true, "", dataset, topics.Source{File: path, Line: fe.Line}, fe.Err, nil)
		}
		after := r.counts()
		log.Info("input read", "file", path, "prompts", after.sent-before.sent, "rejected", after.rejected-before.rejected)
	}
	// Close flushes both writers; every done callback has run when Close returns.
	if err := r.prompts.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("ingest: flush prompts: %w", err)
	}
	if err := r.dead.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("ingest: flush rejected: %w", err)
	}
	r.acks.Wait()
	if cfg.Progress != nil {
		cfg.Progress.End(runErr == nil)
	}

	res := r.result()
	if runErr == nil && r.ackErr != nil {
		runErr = fmt.Errorf("ingest: %d records not acknowledged by Kafka: %w", r.failed, r.ackErr)
	}
	for _, name := range settings.datasetNames() {
		if _, ok := r.datasets[name]; !ok {
			log.Warn("settings name a dataset no input produced", "dataset", name)
		}
	}
	log.Info("ingest done", "prompts", res.Prompts, "rejected", res.Rejected, "datasets", len(res.Datasets),
		"elapsed", time.Since(start).Round(time.Millisecond), "err", runErr)
	return res, runErr
}

// runner is the state of one Run: what was sent, what Kafka acknowledged, and the ids seen so far.
type runner struct {
	log      *slog.Logger
	settings Settings
	defaults topics.Sampling
	turns    string                     // Config.Turns
	sampling map[string]topics.Sampling // resolved settings per dataset
	prompts  *kafka.Producer
	dead     *kafka.DeadLetters
	ctx      context.Context // the run's: dead letters are retried while it lasts
	met      *ingestMetrics
	slots    chan struct{}
	maxMsg   int
	acks     sync.WaitGroup
	seen     *idset.Set // id -> first occurrence in this run (seenValue)
	files    []string   // input files, indexed by seenValue
	fileIdx  map[string]int
	onPrompt func(id string, src topics.Source)

	ignored map[string][]string // dataset -> row keys not read, reported (only the reading goroutine uses it)

	mu        sync.Mutex
	sent      int // prompts sent and not failed
	acked     int // prompts Kafka acknowledged
	nRejected int
	logged    int
	datasets  map[string]int
	reasons   map[Reason]int
	failed    int
	ackErr    error
}

type counts struct{ sent, rejected int }

func (r *runner) counts() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return counts{r.sent, r.nRejected}
}

// unknownKeys reports the row keys of a dataset that ingest does not read, each once per dataset: datasets
// carry metadata (MT-bench's question_id, category) that is not an error, but a misspelt key is worth a look.
func (r *runner) unknownKeys(dataset string, keys []string, src topics.Source) {
	var fresh []string
	for _, k := range keys {
		if !slices.Contains(r.ignored[dataset], k) {
			fresh = append(fresh, k)
		}
	}
	if len(fresh) == 0 {
		return
	}
	r.ignored[dataset] = append(r.ignored[dataset], fresh...)
	slices.Sort(r.ignored[dataset])
	r.log.Warn("rows carry keys ingest does not read; they are ignored", "dataset", dataset, "keys", strings.Join(fresh, ", "),
		"first", fmt.Sprintf("%s line %d", src.File, src.Line), "read", strings.Join(RowKeys, ", "))
}

// handle is the RecordFunc of Run: route one line to prompts or rejected.
func (r *runner) handle(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
	if perr != nil {
		return r.reject(p.ID, p.Dataset, src, perr, raw)
	}
	if v, dup, err := r.seen.Get(p.ID); err != nil {
		return fmt.Errorf("ingest: duplicate check: %w", err)
	} else if dup {
		first := r.source(v)
		return r.reject(p.ID, p.Dataset, src, lineErr(ReasonDuplicateID,
			"duplicate id %q: already used by %s line %d in this run", p.ID, first.File, first.Line), raw)
	}
	samp, ok := r.sampling[p.Dataset]
	if !ok {
		samp = r.settings.For(p.Dataset, r.defaults)
		r.sampling[p.Dataset] = samp
	}
	p.Sampling = samp
	if r.settings.TurnsFor(p.Dataset, r.turns) == TurnsLast {
		p = LastTurn(p)
	}
	value, err := topics.Marshal(&p)
	if err != nil {
		return fmt.Errorf("ingest: encode prompt %q: %w", p.ID, err)
	}
	if len(value)+len(p.ID)+64 > r.maxMsg {
		return r.reject(p.ID, p.Dataset, src, lineErr(ReasonTooLarge,
			"prompt record is %d bytes, over the %d-byte Kafka message limit", len(value), r.maxMsg), raw)
	}
	if err := r.seen.Put(p.ID, r.seenValue(src)); err != nil {
		return fmt.Errorf("ingest: duplicate check: %w", err)
	}

	r.mu.Lock()
	r.sent++
	r.mu.Unlock()
	id, dataset := p.ID, p.Dataset
	return r.send(r.prompts, p.ID, value, func(err error) {
		if kafka.IsRecordTooLarge(err) {
			// The broker refused the record (the topic's max.message.bytes is below ours): dead-letter the
			// line as if it had failed the check above, and go on. The line itself is no longer at hand; its
			// source says where it is.
			r.mu.Lock()
			r.sent--
			r.mu.Unlock()
			r.rejectWith(false, id, dataset, src, lineErr(ReasonTooLarge, "prompt record refused: %v", err), nil)
			return
		}
		r.mu.Lock()
		if err != nil {
			r.fail(err)
			r.mu.Unlock()
			return
		}
		r.acked++
		r.datasets[dataset]++
		r.met.prompts.WithLabelValues(dataset).Inc()
		r.mu.Unlock()
		if r.onPrompt != nil {
			r.onPrompt(id, src)
		}
	})
}

// seenValue encodes where an id first occurred: the index of its file in r.files, then its line.
func (r *runner) seenValue(src topics.Source) []byte {
	i, ok := r.fileIdx[src.File]
	if !ok {
		i = len(r.files)
		r.files = append(r.files, src.File)
		r.fileIdx[src.File] = i
	}
	return binary.AppendVarint(binary.AppendUvarint(nil, uint64(i)), src.Line)
}

// source decodes a seenValue.
func (r *runner) source(v []byte) topics.Source {
	i, n := binary.Uvarint(v)
	line, _ := binary.Varint(v[max(n, 0):])
	if n <= 0 || i >= uint64(len(r.files)) {
		return topics.Source{}
	}
	return topics.Source{File: r.files[i], Line: line}
}

// reject dead-letters one line.
func (r *runner) reject(id, dataset string, src topics.Source, perr error, raw []byte) error {
	r.rejectWith(true, id, dataset, src, perr, raw)
	return nil
}

// rejectWith dead-letters one line through the one dead-letter policy (kafka.DeadLetters: the payload fits
// the message limit, failed writes are retried while the run lasts). bounded takes an in-flight slot, as
// prompts do; a done callback passes false, since waiting there for a slot could wait on the very callbacks
// the writer runs after it.
func (r *runner) rejectWith(bounded bool, id, dataset string, src topics.Source, perr error, raw []byte) {
	reason := ReasonOf(perr)
	if reason == "" {
		reason = ReasonBadField
	}
	r.mu.Lock()
	r.nRejected++
	r.logged++
	verbose := r.logged <= maxLoggedRejections
	lastLogged := r.logged == maxLoggedRejections
	r.mu.Unlock()
	level := slog.LevelDebug
	if verbose {
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, "line rejected", "file", src.File, "line", src.Line, "reason", perr.Error())
	if lastLogged {
		r.log.Warn(fmt.Sprintf("%d lines rejected: the next rejections are logged at debug level only; every one is on the rejected topic "+
			"(and in rejected.jsonl beside the shards of draftflow run)", maxLoggedRejections))
	}
	if len(raw) > topics.MaxRejectedPayload {
		raw = raw[:topics.MaxRejectedPayload]
	}
	if bounded {
		r.slots <- struct{}{}
	}
	r.acks.Add(1)
	r.dead.Reject(r.ctx, nil, &topics.Rejection{ID: id, Dataset: dataset, Reason: perr.Error(), Class: string(reason), Source: src, Payload: raw},
		func(err error) {
			defer r.acks.Done()
			if bounded {
				<-r.slots
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.nRejected--
				r.fail(fmt.Errorf("ingest: dead letter of %s line %d: %w", src.File, src.Line, err))
				return
			}
			r.reasons[reason]++
			r.met.rejected.WithLabelValues(string(reason)).Inc()
		})
}

// send writes one encoded record, bounding the records in flight; done runs once Kafka answered.
func (r *runner) send(p *kafka.Producer, key string, value []byte, done func(error)) error {
	r.slots <- struct{}{}
	r.acks.Add(1)
	err := p.SendRaw(context.Background(), key, value, func(err error) {
		done(err)
		<-r.slots
		r.acks.Done()
	})
	if err != nil {
		<-r.slots
		r.acks.Done()
		return err
	}
	return nil
}

// fail records a failed acknowledgement; r.mu is held.
func (r *runner) fail(err error) {
	r.failed++
	if r.ackErr == nil {
		r.ackErr = err
	}
}

func (r *runner) result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{Prompts: r.acked, Datasets: r.datasets, Reasons: r.reasons, IgnoredKeys: r.ignored}
	for _, n := range r.reasons {
		res.Rejected += n
	}
	return res
}
