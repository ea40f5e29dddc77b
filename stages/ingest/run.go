package ingest

import (
	"cmp"
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
	"github.com/draftflow/draftflow/kafka/stream"
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

// Config configures Run. Zero values are documented defaults; Client and Inputs are required.
type Config struct {
	// Client is the process's client of the cluster; prompts and rejected are created if missing. Run does not
	// close it.
	Client *kafka.Client
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
	// Replies is the replies setting of datasets whose settings do not say (RepliesGenerate or RepliesKeep;
	// default RepliesGenerate): the target generates the assistant turns, or the dataset's own replies are kept
	// as rows (one per assistant reply, topics.OriginDataset). Rows of token ids are kept whatever it says.
	Replies string
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
	// OnPrompt, if set, is called with each prompt once Kafka acknowledged it, from the producer's goroutine
	// (not in input order); p is not to be changed. Run keeps no list of ids: a caller that needs them keeps
	// them (a run accounts for each by topics.AccountKey).
	OnPrompt func(p *topics.Prompt)
	// TempDir is where Run keeps the ids it has seen, for the duplicate check, in a temporary file of its own
	// (default os.TempDir()); memory holds only a bounded number of them (see internal/idset).
	TempDir string
}

// Result summarises a Run.
type Result struct {
	// Prompts is the number of prompts Kafka acknowledged on the prompts topic: conversations to generate and
	// rows brought in with their output.
	Prompts int
	// Origins counts the acknowledged prompts by origin: topics.OriginGenerated for a conversation to generate,
	// the row's origin for one brought in with its output (topics.Kept).
	Origins map[string]int
	// Rejected is the number of lines Kafka acknowledged on the rejected topic.
	Rejected int
	// Datasets counts acknowledged prompts per dataset.
	Datasets map[string]int
	// Reasons counts acknowledged rejections per reason.
	Reasons map[Reason]int
	// IgnoredKeys lists, per dataset, the row keys (Parquet columns) its rows have and ingest does not read
	// (see rowKeys), sorted; each was logged once, with the first line that has it.
	IgnoredKeys map[string][]string
}

// bytesRead is ingest's own series, registered on Config.Registerer; its records are counted by the record
// lifecycle (draftflow_records_total{stage="ingest"}, results ingested and rejected).
func bytesRead(reg prometheus.Registerer) prometheus.Counter {
	return metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "draftflow_ingest_input_bytes_total", Help: "Input file bytes read by ingest.",
	}))
}

// resultIngested is the result of a prompt written to the prompts topic (draftflow_records_total{stage="ingest"}).
const resultIngested = "ingested"

// Run reads every input, writes each valid conversation to topics.TopicPrompts keyed by its id and each bad
// line to topics.TopicRejected, and returns once Kafka has acknowledged every record it sent. Every line is a
// record of the lifecycle (package kafka/stream): its writes follow the one produce policy (retried while ctx
// lives; a prompt over the message size limit is rejected as too_large). A bad line never stops the run; an
// unreadable input, Kafka refusing the stage's credentials or a cancelled ctx does, and Run then returns the
// error together with what was acknowledged so far.
func Run(ctx context.Context, cfg Config) (Result, error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	inputs, total, settings, err := prepare(&cfg)
	if err != nil {
		return Result{}, err
	}
	kcl := cfg.Client
	if err := kcl.Admin().EnsureTopics(ctx, topics.TopicPrompts, topics.TopicRejected); err != nil {
		return Result{}, fmt.Errorf("ingest: %w", err)
	}
	seen, err := idset.New(cfg.TempDir)
	if err != nil {
		return Result{}, fmt.Errorf("ingest: %w", err)
	}
	defer seen.Close()
	life := stream.New(ctx, stream.Config{Client: kcl, Stage: Stage, Logger: log, Registerer: cfg.Registerer,
		MaxInFlight: cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)})
	r := &runner{log: log.With("stage", Stage), settings: settings, defaults: cfg.Defaults, turns: cfg.Turns, replies: cfg.Replies,
		sampling: map[string]topics.Sampling{}, life: life, prompts: life.Output(topics.TopicPrompts), seen: seen, fileIdx: map[string]int{},
		onPrompt: cfg.OnPrompt, datasets: map[string]int{}, origins: map[string]int{}, reasons: map[Reason]int{}, ignored: map[string][]string{}}
	met := bytesRead(cfg.Registerer)
	readBytes := func(n int64) { met.Add(float64(n)) }
	if p := cfg.Progress; p != nil {
		p.Begin(total)
		readBytes = func(n int64) { met.Add(float64(n)); p.Read(n) }
	}
	start := time.Now()
	runErr := r.readAll(ctx, inputs, readOptions{dataset: cfg.Dataset, maxLineBytes: cfg.MaxLineBytes, progress: readBytes, unknownKeys: r.unknownKeys})
	// Every record ends (acknowledged, or abandoned when ctx ended) before the writers close.
	life.Wait()
	if err := life.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("ingest: %w", err)
	}
	if cfg.Progress != nil {
		cfg.Progress.End(runErr == nil)
	}
	res := r.result()
	if runErr == nil && r.ackErr != nil {
		runErr = fmt.Errorf("ingest: %d records not acknowledged by Kafka: %w", r.failed, r.ackErr)
	}
	for _, name := range settings.datasetNames() {
		if _, ok := r.datasets[name]; !ok {
			r.log.Warn("settings name a dataset no input produced", "dataset", name)
		}
	}
	r.log.Info("ingest done", "prompts", res.Prompts, "rejected", res.Rejected, "datasets", len(res.Datasets),
		"elapsed", time.Since(start).Round(time.Millisecond), "err", runErr)
	return res, runErr
}

// prepare checks cfg (filling in its defaults), expands the inputs and loads the settings; it returns the input
// files and their total size.
func prepare(cfg *Config) (inputs []string, total int64, settings Settings, err error) {
	if cfg.Client == nil {
		return nil, 0, settings, errors.New("ingest: no Kafka client")
	}
	if len(cfg.Inputs) == 0 {
		return nil, 0, settings, errors.New("ingest: no inputs (use --input)")
	}
	if inputs, err = ExpandInputs(cfg.Inputs); err != nil {
		return nil, 0, settings, err
	}
	cfg.Turns = cmp.Or(cfg.Turns, TurnsAll)
	if err := checkTurns(cfg.Turns); err != nil {
		return nil, 0, settings, fmt.Errorf("ingest: --turns: %w", err)
	}
	cfg.Replies = cmp.Or(cfg.Replies, RepliesGenerate)
	if err := checkReplies(cfg.Replies); err != nil {
		return nil, 0, settings, fmt.Errorf("ingest: --replies: %w", err)
	}
	if cfg.SettingsFile != "" {
		if settings, err = LoadSettings(cfg.SettingsFile); err != nil {
			return nil, 0, settings, err
		}
	}
	for _, in := range inputs {
		st, err := os.Stat(in)
		if err != nil {
			return nil, 0, settings, fmt.Errorf("ingest: %w", err)
		}
		total += st.Size()
	}
	return inputs, total, settings, nil
}

// readAll reads every input in turn; the rest of a file that cannot be read is one rejection, and the next file
// is read. It returns what stopped the reading: a cancelled ctx, a failed duplicate check, or the stage's error.
func (r *runner) readAll(ctx context.Context, inputs []string, opt readOptions) error {
	for _, path := range inputs {
		before := r.counts()
		if err := readFile(ctx, path, opt, r.handle); err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				return err
			}
			r.log.Error("input file unreadable; the rest of it is rejected", "file", path, "from_line", fe.Line, "err", fe.Err.Detail)
			src := topics.Source{File: path, Line: fe.Line}
			r.reject(&topics.Prompt{Dataset: cmp.Or(opt.dataset, DatasetName(path)), Source: src}, fe.Err, nil)
		}
		after := r.counts()
		r.log.Info("input read", "file", path, "prompts", after.sent-before.sent, "rejected", after.rejected-before.rejected)
	}
	return nil
}

// runner is the state of one Run: what was sent, what Kafka acknowledged, and the ids seen so far.
type runner struct {
	log      *slog.Logger
	settings Settings
	defaults topics.Sampling
	turns    string                     // Config.Turns
	replies  string                     // Config.Replies
	sampling map[string]topics.Sampling // resolved settings per dataset
	life     *stream.Stage
	prompts  *stream.Output
	seen     *idset.Set // id -> first occurrence in this run (seenValue)
	files    []string   // input files, indexed by seenValue
	fileIdx  map[string]int
	onPrompt func(p *topics.Prompt)

	ignored map[string][]string // dataset -> row keys not read, reported (only the reading goroutine uses it)

	mu        sync.Mutex
	sent      int // prompts sent and not rejected
	acked     int // prompts Kafka acknowledged
	nRejected int // lines rejected (dead letter sent or acknowledged)
	datasets  map[string]int
	origins   map[string]int
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
		"first", fmt.Sprintf("%s line %d", src.File, src.Line), "read", strings.Join(conversationKeys, ", "),
		"read_token_rows", strings.Join(tokenKeys, ", "))
}

// handle is the RecordFunc of Run: route one line to prompts or rejected. A conversation becomes the prompt of
// its first turn to generate (of its last under `turns: last`), or under `replies: keep` one row per assistant
// reply; a row of token ids is one prompt.
func (r *runner) handle(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
	if err := r.life.Err(); err != nil {
		return err // Kafka refuses the stage's writes: reading on cannot help
	}
	p.Source = src
	if perr != nil {
		r.reject(&p, perr, raw)
		return nil
	}
	rows := []topics.Prompt{p}
	if !topics.Kept(p.Origin) {
		last := r.settings.TurnsFor(p.Dataset, r.turns) == TurnsLast
		switch {
		case r.settings.RepliesFor(p.Dataset, r.replies) == RepliesKeep:
			kept, err := keptReplies(p, last)
			if err != nil {
				r.reject(&p, err, raw)
				return nil
			}
			rows = kept
		case last:
			rows[0] = LastTurn(p)
		}
	}
	// Each row is accounted for by its key (topics.AccountKey): a conversation's id, a kept row's id and turn.
	for _, row := range rows {
		key := topics.AccountKey(row.ID, row.Turn, row.Origin)
		if v, dup, err := r.seen.Get(key); err != nil {
			return fmt.Errorf("ingest: duplicate check: %w", err)
		} else if dup {
			first := r.source(v)
			what := fmt.Sprintf("id %q", row.ID)
			if topics.Kept(row.Origin) {
				what = fmt.Sprintf("row of id %q turn %d", row.ID, row.Turn)
			}
			r.reject(&p, lineErr(ReasonDuplicateID, "duplicate %s: already used by %s line %d in this run", what, first.File, first.Line), raw)
			return nil
		}
	}
	samp, ok := r.sampling[p.Dataset]
	if !ok {
		samp = r.settings.For(p.Dataset, r.defaults)
		r.sampling[p.Dataset] = samp
	}
	for i := range rows {
		row := &rows[i]
		if err := r.seen.Put(topics.AccountKey(row.ID, row.Turn, row.Origin), r.seenValue(src)); err != nil {
			return fmt.Errorf("ingest: duplicate check: %w", err)
		}
		row.Sampling = samp
		r.mu.Lock()
		r.sent++
		r.mu.Unlock()
		// A prompt over the message size limit, the client's or the topic's, is rejected as too_large by the
		// lifecycle's produce policy; the run goes on.
		rec := stream.From(r.life, row, where(src), r.ended(row, true))
		rec.Produce(r.prompts, row.ID, row, stream.Outcome{Result: resultIngested})
	}
	return nil
}

// where names an input line for logs.
func where(src topics.Source) string { return fmt.Sprintf("%s line %d", src.File, src.Line) }

// ended returns what runs once the record of one line (or one of its rows) ended: with its outcome (ingested or
// rejected), or with the error that abandoned it. produced says p was sent as a prompt (a rejection then moves it
// from the sent to the rejected records).
func (r *runner) ended(p *topics.Prompt, produced bool) func(stream.Outcome, error) {
	return func(o stream.Outcome, err error) {
		r.mu.Lock()
		switch {
		case err != nil:
			if !produced {
				r.nRejected--
			}
			r.fail(fmt.Errorf("ingest: %s: %w", where(p.Source), err))
		case o.Result == stream.Rejected:
			if produced {
				r.sent--
				r.nRejected++
			}
			r.reasons[Reason(o.Class)]++
		default:
			r.acked++
			r.datasets[p.Dataset]++
			r.origins[topics.OriginOf(p.Origin)]++
		}
		r.mu.Unlock()
		if err == nil && o.Result == resultIngested && r.onPrompt != nil {
			r.onPrompt(p)
		}
	}
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

// reject dead-letters one line (p holds what was parsed of it, at least its source) through the lifecycle.
func (r *runner) reject(p *topics.Prompt, perr error, raw []byte) {
	reason := ReasonOf(perr)
	if reason == "" {
		reason = ReasonBadField
	}
	r.mu.Lock()
	r.nRejected++
	r.mu.Unlock()
	rec := stream.From(r.life, p, where(p.Source), r.ended(p, false))
	rec.Reject(string(reason), perr.Error(), raw)
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
	res := Result{Prompts: r.acked, Datasets: r.datasets, Origins: r.origins, Reasons: r.reasons, IgnoredKeys: r.ignored}
	for _, n := range r.reasons {
		res.Rejected += n
	}
	return res
}
