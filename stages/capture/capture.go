// Package capture is the capture stage: it writes the target model's EAGLE-3 features of every row of the
// sink's shards into a feature file beside each shard (shard/features), for offline drafter training. It reads
// the shards through package shard, never through the sink stage.
//
// It consumes topics.TopicShardFiles, on which the sink announces each committed shard (sink
// Config.AnnounceShards). For each shard it reads the rows, asks two SGLang servers for a prefill of each row's
// input_ids (max_new_tokens 1, return_hidden_states): the aux server (started with
// --enable-return-aux-hidden-states --speculative-algorithm EAGLE3 --disable-radix-cache) answers the three
// EAGLE-3 layers, the final server (--enable-return-hidden-states --disable-radix-cache) the final norm's output;
// docs/hidden-states.md says why it takes two servers and why capture is a consumer of committed shards rather
// than part of generation. The row's [tokens, 3H] and [tokens, H] become one bf16 [tokens, 4H] row of the file.
//
// Exactly once: the file is written as X.dff.tmp and renamed into place after an fsync, then listed in
// the run's features.json, then the announcement is acknowledged. A kill at any point leaves at most a .tmp
// that the next attempt replaces; a redelivered announcement whose shard already has a complete feature file
// (its index matches the shard row by row and every block's CRC) is skipped; nothing is ever regenerated.
//
// A row whose features cannot be captured (an error answer: over the server's context, an answer without
// every position, ...) is dead-lettered on the rejected topic with class capture_failed and a reason naming the
// row, and listed in the file's Index.Missing; the shard's file is still written, and `draftflow inspect`
// reports the rows without features. A server that cannot be reached, or answers 5xx or 429, is retried with
// backoff for as long as the stage runs: an unreachable server never makes a row go missing.
package capture

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/internal/progress"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/features"
	"github.com/draftflow/draftflow/topics"
)

// Stage is the stage's name in metrics and dead letters.
const Stage = "capture"

// DefaultGroup is the consumer group of the capture stage when Config.Group is empty.
const DefaultGroup = "draftflow-capture"

// The results of the stage's records (draftflow_records_total{stage="capture"}): an announcement counts once,
// as captured (its feature file written now; its tokens are the tokens given features), complete (its file
// was already complete: a redelivery) or other_dir (a shard of another output directory). A row without
// features counts once more, as rejected with class ClassFailed, when its dead letter is durable.
const (
	ResultCaptured = "captured"
	ResultComplete = "complete"
	ResultOtherDir = "other_dir"
	// ClassFailed is the class of a row whose features could not be captured.
	ClassFailed = "capture_failed"
	// ClassShard is the class of an announcement whose shard cannot be read (missing, changed, unreadable).
	ClassShard = "shard_unreadable"
)

// Config configures the capture stage. Zero values are documented defaults.
type Config struct {
	// Client is the process's client of the cluster (required); Run does not close it.
	Client *kafka.Client
	// Group is the consumer group (default DefaultGroup).
	Group string
	// Dir is the sink's output directory (the run directories are in it); the feature files go beside the
	// shards. Required.
	Dir string
	// Aux and Final are the base URLs of the aux-capture and final-state servers. Required.
	Aux, Final string
	// HTTPClient makes the requests (default: a client without a timeout; requests end with the stage).
	HTTPClient *http.Client
	// AuxLayers are the decoder layers whose inputs the aux server captures, in order (SGLang's default for
	// Qwen3/Llama: 2, L/2, L-3 of L layers; DefaultAuxLayers). Required.
	AuxLayers []int
	// Concurrency is the requests in flight per server (default 4).
	Concurrency int
	// Shards is how many shards are captured at once (default 2).
	Shards int
	// Codec is the feature files' block codec (default features.CodecZstd).
	Codec string
	// Logger receives the stage's logs (default slog.Default()); Registerer its metrics (default
	// prometheus.DefaultRegisterer).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Ready, when set, gets the stage's readiness check.
	Ready *metrics.Readiness
	// Progress, when set, shows tokens captured of the tokens in Dir's shards, with rate and ETA.
	Progress io.Writer
	// OnShard, when set, is called after each announcement is finished (captured or already complete), with
	// the shard's path.
	OnShard func(shardPath string)
}

// DefaultAuxLayers is SGLang's default EAGLE-3 capture of a Qwen3/Qwen2/Llama model of n decoder layers: the
// inputs of layers 2, n/2 and n-3 (set_eagle3_layers_to_capture).
func DefaultAuxLayers(n int) []int { return []int{2, n / 2, n - 3} }

// RegisterFlags binds the stage's flags to c (the servers' and the directory's flags are the command's).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Aux, "sglang-aux", c.Aux, "aux-capture server URL (sglang started with --enable-return-aux-hidden-states --speculative-algorithm EAGLE3 --disable-radix-cache)")
	fs.StringVar(&c.Final, "sglang-final", c.Final, "final-state server URL (sglang started with --enable-return-hidden-states --disable-radix-cache)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "requests in flight per capture server (default 4)")
	fs.IntVar(&c.Shards, "shards", c.Shards, "shards captured at once (default 2)")
	fs.Func("aux-layers", "decoder layers the aux server captures, comma-separated (default: 2,L/2,L-3 from --num-layers or the model's config.json)", func(s string) error {
		layers, err := ParseLayers(s)
		c.AuxLayers = layers
		return err
	})
	fs.StringVar(&c.Group, "group", c.Group, "consumer group (default "+DefaultGroup+")")
}

// ParseLayers parses a comma-separated list of layer indices.
func ParseLayers(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("layer %q is not a layer index", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Header is the feature files' header for hidden size hidden: the aux layers then the final state.
func (c *Config) header(hidden int) features.Header {
	h := features.Header{Hidden: hidden, Codec: cmp.Or(c.Codec, features.CodecZstd)}
	for _, l := range c.AuxLayers {
		h.Layers = append(h.Layers, "aux:"+strconv.Itoa(l))
	}
	h.Layers = append(h.Layers, "final")
	return h
}

// Run consumes shard announcements until ctx ends, writing each shard's feature file.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Dir == "" || cfg.Aux == "" || cfg.Final == "" {
		return errors.New("capture: the output directory and both servers (aux, final) are required")
	}
	if len(cfg.AuxLayers) == 0 {
		return errors.New("capture: the aux layers are required (--aux-layers, or --num-layers / a model directory)")
	}
	if cfg.Client == nil {
		return errors.New("capture: Config.Client is required")
	}
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), 4)
	cfg.Shards = cmp.Or(max(cfg.Shards, 0), 2)
	log := cmp.Or(cfg.Logger, slog.Default()).With("stage", Stage)
	kcl := cfg.Client
	if err := kcl.Admin().EnsureCompactedTopic(ctx, topics.TopicShardFiles); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	dirID, err := shard.ReadDirID(cfg.Dir)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	hc := cmp.Or(cfg.HTTPClient, http.DefaultClient)
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	c := &capturer{ctx: ctx, cfg: cfg, log: log, dirID: dirID, met: newMetrics(cfg.Registerer), stop: stop,
		aux: sglang.NewClient(cfg.Aux, hc, secret.Value{}), final: sglang.NewClient(cfg.Final, hc, secret.Value{}),
		auxSlots: make(chan struct{}, cfg.Concurrency), finalSlots: make(chan struct{}, cfg.Concurrency),
		shardSlots: make(chan struct{}, cfg.Shards)}
	c.life = stream.New(ctx, stream.Config{Client: kcl, Stage: Stage, Logger: cmp.Or(cfg.Logger, slog.Default()), Registerer: cfg.Registerer})
	if cfg.Progress != nil {
		c.bar = progress.New(cfg.Progress, "capture", totalTokens(cfg.Dir), progress.Options{Unit: "tokens"})
		defer c.bar.Finish()
	}
	in := kcl.NewConsumer(topics.TopicShardFiles, kafka.ConsumerConfig{Group: cmp.Or(cfg.Group, DefaultGroup), MaxInFlight: 4 * cfg.Shards})
	cfg.Ready.Add(Stage, func() error {
		if in.Assigned() == 0 {
			return errors.New("no partition of the shard-files topic assigned")
		}
		return nil
	})
	log.Info("capture starting", "dir", cfg.Dir, "aux", cfg.Aux, "final", cfg.Final, "aux_layers", cfg.AuxLayers,
		"concurrency", cfg.Concurrency, "shards", cfg.Shards)
	err = stream.Consume(ctx, c.life, stream.Options[topics.ShardFile]{}, c.handle, in)
	c.work.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = errors.Join(err, cause)
	}
	return errors.Join(err, c.life.Close())
}

// totalTokens sums the tokens of the shards under dir (0 when none can be read).
func totalTokens(dir string) int64 {
	runs, _ := shard.RunDirs(dir)
	var n int64
	for _, rd := range runs {
		if m, err := shard.ReadManifest(rd); err == nil {
			n += m.Totals.Tokens
		}
	}
	return n
}

// capturer is one running stage.
type capturer struct {
	ctx   context.Context // the stage's: work stops when it ends
	cfg   Config
	log   *slog.Logger
	dirID string // the output directory's identity (shard.DirIDFile), "" while the sink has not written it
	life  *stream.Stage
	met   *captureMetrics
	stop  context.CancelCauseFunc
	bar   *progress.Bar

	aux, final                       *sglang.Client
	auxSlots, finalSlots, shardSlots chan struct{}
	work                             sync.WaitGroup

	hidden    atomic.Int64            // the final server's width, once known
	busy      sync.Map                // shard path -> *sync.Mutex: one capture of a shard at a time (shard)
	manifests features.ManifestWriter // the run directories' features.json
}

// handle takes one announcement: it waits for a shard slot, then captures the shard on its own goroutine.
func (c *capturer) handle(r *stream.Record[topics.ShardFile]) {
	select {
	case c.shardSlots <- struct{}{}:
	case <-r.Lost().Done():
		r.Abandon()
		return
	case <-c.ctx.Done():
		r.Abandon()
		return
	case <-c.life.Failed():
		r.Abandon()
		return
	}
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer func() { <-c.shardSlots }()
		c.shard(r)
	}()
}

// shardRow is one row of a shard, as capture needs it.
type shardRow struct {
	features.RowRef
	dataset string
	ids     []uint32
}

// shard captures one announced shard, or skips it when its feature file is complete.
func (c *capturer) shard(r *stream.Record[topics.ShardFile]) {
	// The shard's work ends when the stage stops or the partition is lost; it is then abandoned (redelivered).
	ctx, cancel := context.WithCancel(r.Lost())
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	a := r.Value
	if a.RunDir == "" || a.File == "" || strings.ContainsAny(a.RunDir+a.File, `/\`) || a.RunDir == ".." || a.File == ".." {
		r.Reject(ClassShard, fmt.Sprintf("announcement at %s names no shard of a run directory (run_dir %q, file %q)", r.Where(), a.RunDir, a.File), nil)
		return
	}
	if a.Dir != "" && c.dirID != "" && a.Dir != c.dirID {
		c.log.Debug("a shard of another output directory", "shard", a.File, "dir", a.Path)
		r.Finish(stream.Outcome{Result: ResultOtherDir})
		return
	}
	runDir := filepath.Join(c.cfg.Dir, a.RunDir)
	path := filepath.Join(runDir, a.File)
	// Two announcements of one shard can be in flight at once (the sink announces a shard when it commits it
	// and again on every start; run's final capture announces every shard again): the second waits for the
	// first and then finds the file complete, instead of writing the same file beside it (two writers of one
	// .tmp: a failed rename, or features.json listing the other writer's checksum).
	mu, _ := c.busy.LoadOrStore(path, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	digest, _, err := durable.FileSHA256(path)
	if err != nil || (a.SHA256 != "" && digest != a.SHA256) {
		reason := fmt.Sprintf("shard %s announced at %s: ", path, r.Where())
		if err != nil {
			reason += err.Error()
		} else {
			reason += fmt.Sprintf("sha256 %s, announced %s (another directory's shard of the same name?)", digest, a.SHA256)
		}
		r.Reject(ClassShard, reason, nil)
		return
	}
	var rows []shardRow
	cols := []shard.Col{shard.ColID, shard.ColInputIDs, shard.ColTurn, shard.ColDataset}
	err = shard.ScanFile(ctx, path, cols, func(sr *shard.Row) error {
		ids := make([]uint32, len(sr.InputIDs))
		for i, v := range sr.InputIDs {
			ids[i] = uint32(v)
		}
		rows = append(rows, shardRow{RowRef: features.RowRef{ID: sr.ID, Turn: int(sr.Turn), Tokens: len(ids)}, dataset: sr.Dataset, ids: ids})
		return nil
	})
	if err != nil {
		r.Reject(ClassShard, fmt.Sprintf("shard %s: %v", path, err), nil)
		return
	}
	featPath := features.PathFor(path)
	if ok := c.complete(featPath, rows); ok {
		// A torn .tmp of an attempt killed after another completed the file: nothing reads it; tidy it away.
		if err := os.Remove(featPath + ".tmp"); err == nil {
			c.log.Info("removed a torn temporary feature file", "file", featPath+".tmp")
		}
		if err := c.list(runDir, featPath, a.File); err != nil {
			c.log.Error("cannot list a feature file in the run's features.json; the shard is done again on redelivery", "file", featPath, "err", err)
			r.Abandon()
			return
		}
		c.log.Info("feature file already complete", "shard", a.File)
		r.Finish(stream.Outcome{Result: ResultComplete})
		c.done(path)
		return
	}
	start := time.Now()
	missing, tokens, err := c.capture(ctx, r, featPath, rows)
	if err != nil {
		if ctx.Err() == nil && c.life.Err() == nil && !errors.Is(err, context.Canceled) {
			c.log.Error("capture of a shard failed; it is done again after a restart", "shard", path, "err", err)
		}
		r.Abandon()
		return
	}
	if err := c.list(runDir, featPath, a.File); err != nil {
		c.log.Error("cannot list a feature file in the run's features.json; the shard is done again on redelivery", "file", featPath, "err", err)
		r.Abandon()
		return
	}
	for range missing {
		c.life.Count(stream.Outcome{Result: stream.Rejected, Class: ClassFailed})
	}
	var size int64
	if st, err := os.Stat(featPath); err == nil {
		size = st.Size()
	}
	c.met.bytes.Add(float64(size))
	c.met.shards.Inc()
	c.log.Info("feature file written", "shard", a.File, "rows", len(rows)-len(missing), "missing", len(missing), "tokens", tokens,
		"bytes", size, "took", time.Since(start).Round(time.Millisecond))
	r.Finish(stream.Outcome{Result: ResultCaptured, Tokens: int(tokens)})
	c.done(path)
}

func (c *capturer) done(path string) {
	if c.cfg.OnShard != nil {
		c.cfg.OnShard(path)
	}
}

// list adds the complete feature file at featPath to the run's features.json.
func (c *capturer) list(runDir, featPath, shard string) error {
	e, h, err := features.Entry(featPath, shard)
	if err != nil {
		return err
	}
	return c.manifests.Add(runDir, h, e)
}

// complete reports whether featPath is a complete feature file of rows (features.Check) with this stage's
// layers; a file that is not is logged and replaced.
func (c *capturer) complete(featPath string, rows []shardRow) bool {
	f, err := features.Open(featPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("replacing an unreadable feature file", "file", featPath, "err", err)
		}
		return false
	}
	defer f.Close()
	refs := make([]features.RowRef, len(rows))
	for i, r := range rows {
		refs[i] = r.RowRef
	}
	want := c.cfg.header(int(c.hidden.Load()))
	if err := features.Check(f, refs, want); err != nil {
		c.log.Warn("replacing a feature file that does not match its shard", "file", featPath, "err", err)
		return false
	}
	return true
}

// rowResult is what became of one row's capture.
type rowResult struct {
	aux, final *sglang.HiddenStates
	class      string // "" when captured
	reason     string
	err        error // the stage stopped (the shard is abandoned)
}

// capture writes the feature file of rows at featPath (through a .tmp, renamed into place) and returns the
// rows it holds without features (each dead-lettered, durably, before the rename) and the tokens captured.
func (c *capturer) capture(ctx context.Context, r *stream.Record[topics.ShardFile], featPath string, rows []shardRow) ([]features.MissingRow, int64, error) {
	results := make([]chan rowResult, len(rows))
	window := make(chan struct{}, c.cfg.Concurrency)
	launch := func(i int) {
		results[i] = make(chan rowResult, 1)
		go func() { results[i] <- c.row(ctx, rows[i]) }()
	}
	// Rows in flight: up to Concurrency ahead of the one being written.
	next := 0
	fill := func() {
		for next < len(rows) {
			select {
			case window <- struct{}{}:
				launch(next)
				next++
			default:
				return
			}
		}
	}
	fill()
	var (
		w       *features.Writer
		missing []features.MissingRow
		tokens  int64
	)
	abort := func(err error) ([]features.MissingRow, int64, error) {
		if w != nil {
			w.Abort()
		}
		// Let the rows still in flight end (their requests end with ctx or answer).
		for i := range next {
			if results[i] != nil {
				select {
				case <-results[i]:
				default:
				}
			}
		}
		return nil, 0, err
	}
	for i, row := range rows {
		var res rowResult
		select {
		case res = <-results[i]:
		case <-ctx.Done():
			return abort(ctx.Err())
		}
		results[i] = nil
		<-window
		fill()
		if res.err != nil {
			return abort(res.err)
		}
		if w == nil {
			hidden := int(c.hidden.Load())
			if hidden == 0 && res.final != nil {
				hidden = res.final.Width
			}
			if hidden == 0 {
				var err error
				if hidden, err = c.probe(ctx, row.ids[:1]); err != nil {
					return abort(err)
				}
			}
			c.hidden.CompareAndSwap(0, int64(hidden))
			var err error
			if w, err = features.Create(featPath, c.cfg.header(int(c.hidden.Load()))); err != nil {
				return abort(err)
			}
		}
		if res.class == "" {
			hidden := int(c.hidden.Load())
			if res.final.Width != hidden || res.aux.Width != hidden*len(c.cfg.AuxLayers) {
				res.class, res.reason = ClassFailed, fmt.Sprintf("row %s turn %d: the aux server answered width %d and the final server %d; with hidden %d and %d aux layers they must be %d and %d (are the servers swapped, or --aux-layers wrong?)",
					row.ID, row.Turn, res.aux.Width, res.final.Width, hidden, len(c.cfg.AuxLayers), hidden*len(c.cfg.AuxLayers), hidden)
			}
		}
		if res.class != "" {
			m := features.MissingRow{ID: row.ID, Turn: row.Turn, Row: i, Tokens: row.Tokens, Class: res.class, Reason: res.reason}
			if err := w.AddMissing(m); err != nil {
				return abort(err)
			}
			missing = append(missing, m)
			c.met.rows.WithLabelValues("missing").Inc()
			continue
		}
		if err := w.AddLayersRow(features.RowInfo{ID: row.ID, Turn: row.Turn, Row: i, Tokens: row.Tokens}, res.aux.Data, res.final.Data); err != nil {
			return abort(err)
		}
		tokens += int64(row.Tokens)
		c.met.rows.WithLabelValues("captured").Inc()
		c.met.tokens.Add(float64(row.Tokens))
		if c.bar != nil {
			c.bar.Add(int64(row.Tokens))
		}
	}
	if w == nil { // an empty shard
		hidden := int(c.hidden.Load())
		if hidden == 0 {
			return abort(errors.New("an empty shard before any row gave the hidden size"))
		}
		var err error
		if w, err = features.Create(featPath, c.cfg.header(hidden)); err != nil {
			return abort(err)
		}
	}
	// The rows without features are dead-lettered, durably, before the file commits: a kill in between
	// writes them again (a duplicate dead letter), never loses one.
	if err := c.deadLetters(r, missing); err != nil {
		return abort(err)
	}
	if err := w.Close(); err != nil {
		return nil, 0, err
	}
	if err := durable.SyncDir(filepath.Dir(featPath)); err != nil {
		return nil, 0, err
	}
	return missing, tokens, nil
}

// deadLetters writes a dead letter for each missing row and waits until all are durable.
func (c *capturer) deadLetters(r *stream.Record[topics.ShardFile], missing []features.MissingRow) error {
	if len(missing) == 0 {
		return nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i, m := range missing {
		if i < 20 {
			c.log.Warn("row without features", "id", m.ID, "turn", m.Turn, "class", m.Class, "reason", m.Reason)
		}
		rej := r.Rejection(m.Class, m.Reason)
		rej.ID = m.ID
		wg.Add(1)
		c.life.DeadLetter(rej, func(err error) {
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	return first
}

// row captures one row on both servers.
func (c *capturer) row(ctx context.Context, row shardRow) rowResult {
	rid := fmt.Sprintf("capture-%s-%d-%x", row.ID, row.Turn, rand.Uint32())
	var res rowResult
	var wg sync.WaitGroup
	var auxErr, finalErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		res.aux, auxErr = c.request(ctx, c.aux, c.auxSlots, "aux", rid+"-aux", row.ids)
	}()
	go func() {
		defer wg.Done()
		res.final, finalErr = c.request(ctx, c.final, c.finalSlots, "final", rid+"-final", row.ids)
	}()
	wg.Wait()
	for _, e := range []struct {
		server string
		err    error
	}{{"aux", auxErr}, {"final", finalErr}} {
		if e.err == nil {
			continue
		}
		var perm *permanentError
		if !errors.As(e.err, &perm) {
			res.err = e.err
			return res
		}
		if res.class == "" {
			res.class, res.reason = ClassFailed, fmt.Sprintf("row %s turn %d (%d tokens): the %s server: %v", row.ID, row.Turn, row.Tokens, e.server, perm.err)
		}
	}
	return res
}

// permanentError is an answer that a retry would not change.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

// request asks one server for a row's hidden states, retrying transient failures with backoff while ctx lives.
func (c *capturer) request(ctx context.Context, cl *sglang.Client, slots chan struct{}, server, rid string, ids []uint32) (*sglang.HiddenStates, error) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		start := time.Now()
		hs, _, err := cl.CaptureHidden(ctx, rid, ids)
		<-slots
		if err == nil {
			c.met.seconds.WithLabelValues(server).Observe(time.Since(start).Seconds())
			return hs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var auth *sglang.AuthError
		if errors.As(err, &auth) {
			c.stop(fmt.Errorf("capture: %w", err))
			return nil, err
		}
		if permanent(err) {
			return nil, &permanentError{err}
		}
		c.met.retries.WithLabelValues(server).Inc()
		if attempt == 1 || attempt%10 == 0 {
			c.log.Warn("capture request failed; retrying", "server", cl.URL(), "attempt", attempt, "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// permanent reports whether a capture error is the server's answer about the row (a 4xx but 429, an answer
// that cannot be used), not a failure a retry may get past.
func permanent(err error) bool {
	var se *sglang.StatusError
	if errors.As(err, &se) {
		return se.Code >= 400 && se.Code < 500 && se.Code != http.StatusTooManyRequests && se.Code != http.StatusRequestTimeout
	}
	var ir *sglang.InvalidResponseError
	return errors.As(err, &ir)
}

// probe learns the hidden size from the final server with a one-token prefill.
func (c *capturer) probe(ctx context.Context, ids []uint32) (int, error) {
	hs, err := c.request(ctx, c.final, c.finalSlots, "final", fmt.Sprintf("capture-probe-%x", rand.Uint32()), ids)
	if err != nil {
		return 0, fmt.Errorf("capture: learn the hidden size from %s: %w", c.cfg.Final, err)
	}
	return hs.Width, nil
}

// captureMetrics are the stage's own series.
type captureMetrics struct {
	rows    *prometheus.CounterVec // result: captured, missing
	tokens  prometheus.Counter
	bytes   prometheus.Counter
	shards  prometheus.Counter
	seconds *prometheus.HistogramVec // server
	retries *prometheus.CounterVec   // server
}

func newMetrics(reg prometheus.Registerer) *captureMetrics {
	return &captureMetrics{
		rows: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "draftflow_capture_rows_total",
			Help: "Rows the capture stage wrote into feature files, by result (captured: with features; missing: listed without)."}, []string{"result"})),
		tokens: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "draftflow_capture_tokens_total",
			Help: "Tokens whose features the capture stage wrote."})),
		bytes: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "draftflow_capture_bytes_total",
			Help: "Bytes of the feature files the capture stage wrote."})),
		shards: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "draftflow_capture_files_total",
			Help: "Feature files the capture stage wrote (one per shard)."})),
		seconds: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "draftflow_capture_request_seconds",
			Help: "Time of one row's capture request, by server (aux, final).", Buckets: prometheus.ExponentialBuckets(0.005, 3, 10)}, []string{"server"})),
		retries: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "draftflow_capture_retries_total",
			Help: "Capture requests retried after a transient failure (unreachable server, 5xx, 429), by server."}, []string{"server"})),
	}
}
