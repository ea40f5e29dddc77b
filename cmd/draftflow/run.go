package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/draftflow/draftflow/internal/idset"
	"github.com/draftflow/draftflow/internal/progress"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// runConfig is everything `draftflow run` needs; tests build one directly.
type runConfig struct {
	Kafka    kafka.Config // Brokers empty: start an embedded broker
	Ingest   ingest.Config
	Tokenize tokenize.Config
	Generate generate.Config // Endpoints empty: start an in-process simulator
	Sink     sink.Config
	Sim      sim.Config
	// Capture, when enabled, captures the EAGLE-3 features of every shard (--capture-aux, --capture-final).
	Capture runCapture
	// Timeout bounds the whole run (0: none).
	Timeout time.Duration
	// MergeTurns, when set, is where the run's conversations are also written merged (offline.MergeTurns).
	MergeTurns string
	// Progress receives a progress bar (nil: none).
	Progress io.Writer
	Logger   *slog.Logger
	// Gatherer is the process's registry, the one the stages' Registerers name: the run publishes its status
	// records from it (nil: no status records).
	Gatherer prometheus.Gatherer
	// StatusInterval is how often the status records are written (0: status.DefaultInterval).
	StatusInterval time.Duration
}

// runResult is what a run reports.
type runResult struct {
	Prompts          int              // valid prompts ingested (unique ids)
	Written          int              // of them, rows now in the shards (written by this run)
	AlreadyPresent   int              // of them, already in the shards from an earlier run
	IngestRejected   int              // malformed input lines
	PipelineRejected int              // prompts dead-lettered by tokenize, generate or sink
	Lost             int              // prompts that reached none of these
	Missing          []string         // the first maxListedMissing of them
	Duplicates       int64            // generations the sink dropped as already written or buffered (redone work)
	InShards         int64            // turns not sent to a server because the shards already held them
	Tokens           int64            // tokens in the shards of this run's output
	Rows             int64            // rows in the shards of this run's output (one per regenerated turn)
	Turns            map[string]int64 // rows written by this run, by stop reason (topics.StopReasons)
	Shards           int
	// FeatureFiles, FeatureRows and FeatureMissing count the feature files of the output (with capture), the
	// rows with features and the rows listed without.
	FeatureFiles                int
	FeatureRows, FeatureMissing int64
	Dir                         string
	RejectedFile                string             // where the run's rejections are ("" when none)
	Examples                    []topics.Rejection // the first rejections, without payloads
	Elapsed                     time.Duration
}

func cmdRun(ctx context.Context, args []string) error {
	fs := newFlagSet("run")
	var c common
	c.register(fs, "")
	var rc runConfig
	// Each stage's own flags but its consumer group, merged; a name an earlier stage took gets the stage's
	// prefix (--generate-lane, --generate-max-new-tokens).
	stageFlags := func(prefix string, register func(*flag.FlagSet)) { mergeFlags(fs, prefix, register, "group") }
	stageFlags("ingest", rc.Ingest.RegisterFlags)
	stageFlags("tokenize", rc.Tokenize.RegisterFlags)
	stageFlags("generate", func(fs *flag.FlagSet) { registerGenerateFlags(fs, &rc.Generate) })
	stageFlags("sink", func(fs *flag.FlagSet) { registerSinkFlags(fs, &rc.Sink) })
	rc.Capture.register(fs)
	fs.Float64Var(&rc.Sim.OutputLenMean, "sim-output-mean", 600, "mean output length of the built-in simulator (tokens)")
	fs.Float64Var(&rc.Sim.TimeScale, "sim-time-scale", 0, "simulated seconds per wall second of the built-in simulator (0: instant)")
	fs.DurationVar(&rc.Timeout, "timeout", 0, "give up (exit non-zero) after this long (0: no limit)")
	fs.StringVar(&rc.MergeTurns, "merge-turns", "", "after the run, also write one row per conversation where its turns merge token-exactly into this `dir` (see draftflow merge-turns)")
	fs.StringVar(&rc.Sim.ReplyFormat, "sim-reply-format", "", "the built-in simulator answers each turn with the input's original reply written as this family writes it (qwen3, kimi_k2, llama3, deepseekv3), so reasoning and tool calls parse; empty: random tokens")
	fs.Float64Var(&rc.Sim.ToolDivergenceRate, "sim-tool-divergence-rate", 0, "with --sim-reply-format, the share of tool-call turns whose call the simulator changes (the conversation ends there as a tool divergence)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(rc.Ingest.Inputs) == 0 {
		return errors.New("no input: pass --input FILE (repeatable)")
	}
	var err error
	if rc.Kafka, rc.Logger, err = c.setup(ctx, "tokenize", "generate", "sink"); err != nil {
		return err
	}
	// One registry and one set of readiness checks for the whole process.
	rc.Ingest.Registerer = c.reg
	rc.Tokenize.Registerer, rc.Tokenize.Ready = c.reg, c.ready
	rc.Generate.Registerer, rc.Generate.Ready = c.reg, c.ready
	rc.Sink.Registerer, rc.Sink.Ready = c.reg, c.ready
	rc.Capture.cfg.Registerer = c.reg
	rc.Gatherer = c.reg
	rc.Sim.Instant = rc.Sim.TimeScale == 0
	if rc.Sim.ReplyFormat != "" {
		// The simulator scripts each turn's original reply from the input it was ingested from.
		if len(rc.Ingest.Inputs) != 1 || !strings.Contains(filepath.Base(rc.Ingest.Inputs[0]), ".jsonl") {
			return errors.New("--sim-reply-format needs exactly one JSONL --input (the simulator reads the original replies from it)")
		}
		rc.Sim.Conversations = rc.Ingest.Inputs[0]
	}
	rc.Progress = stderr()
	res, err := runPipeline(ctx, rc)
	if res != nil {
		printSummary(os.Stdout, res)
	}
	if err != nil {
		return err
	}
	if rc.MergeTurns != "" {
		dirs, err := shard.RunDirs(rc.Sink.Dir)
		if err != nil {
			return err
		}
		var names []string
		for _, d := range dirs {
			names = append(names, filepath.Base(d))
		}
		// After a first signal the run stopped gracefully and its shards are merged still; a second signal exits.
		sum, err := offline.MergeTurns(context.WithoutCancel(ctx), rc.Sink.Dir, rc.MergeTurns, offline.MergeOptions{Runs: names})
		if err != nil {
			return err
		}
		printMergeSummary(os.Stdout, sum, rc.MergeTurns)
	}
	if res.Lost > 0 {
		return exitCode(3)
	}
	return nil
}

func printSummary(w io.Writer, r *runResult) {
	fmt.Fprintf(w, "\ndraftflow run: shards in %s\n", r.Dir)
	fmt.Fprintf(w, "  prompts   %d valid (%d written now, %d already in the shards)\n", r.Prompts, r.Written, r.AlreadyPresent)
	fmt.Fprintf(w, "  rows      %d in %d shards, %d tokens (one row per regenerated turn)\n", r.Rows, r.Shards, r.Tokens)
	var turns []string
	for _, reason := range topics.StopReasons {
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

// The outcomes the tracker records per id, as bits of its one-byte value.
const (
	idExpected byte = 1 << iota // ingest wrote it (Kafka acknowledged the prompt)
	idWritten                   // the sink made a row of it durable in this run
	idPresent                   // the sink dropped it: already in the shards
	idRejected                  // a stage after ingest dead-lettered it
	idOutcomes = idWritten | idPresent | idRejected
)

// maxListedMissing is how many missing ids a run lists.
const maxListedMissing = 10

// tracker accounts for every ingested id: written, already present, or rejected downstream. The ids live in a
// temporary file (internal/idset); memory holds two counters and a bounded number of pending ids.
type tracker struct {
	mu       sync.Mutex
	ids      *idset.Set // id -> outcome bits
	expected int        // ids with idExpected
	done     int        // of them, ids with an outcome too
	err      error      // the first failure of the id set
	changed  chan struct{}
}

func newTracker() (*tracker, error) {
	ids, err := idset.New("")
	if err != nil {
		return nil, err
	}
	return &tracker{ids: ids, changed: make(chan struct{}, 1)}, nil
}

func (t *tracker) close() error { return t.ids.Close() }

func (t *tracker) poke() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// mark records the outcome bit for ids.
func (t *tracker) mark(bit byte, ids ...string) {
	t.mu.Lock()
	for _, id := range ids {
		if t.err != nil {
			break
		}
		v, _, err := t.ids.Get(id)
		if err != nil {
			t.err = err
			break
		}
		var old byte
		if len(v) > 0 {
			old = v[0]
		}
		now := old | bit
		if now == old {
			continue
		}
		if old&idExpected == 0 && now&idExpected != 0 {
			t.expected++
		}
		if accounted(now) && !accounted(old) {
			t.done++
		}
		t.err = t.ids.Put(id, []byte{now})
	}
	t.mu.Unlock()
	t.poke()
}

// accounted reports whether an expected id has an outcome.
func accounted(bits byte) bool { return bits&idExpected != 0 && bits&idOutcomes != 0 }

// status counts the accounted-for expected ids and the rest.
func (t *tracker) status() (done, missing int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done, t.expected - t.done, t.err
}

// account fills in res's counts of the expected ids by outcome (written before present before rejected) and
// lists up to maxListedMissing of the ids without one.
func (t *tracker) account(res *runResult) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return t.ids.ForEach(func(id string, v []byte) error {
		bits := v[0]
		switch {
		case bits&idExpected == 0:
		case bits&idWritten != 0:
			res.Written++
		case bits&idPresent != 0:
			res.AlreadyPresent++
		case bits&idRejected != 0:
			res.PipelineRejected++
		default:
			res.Lost++
			if len(res.Missing) < maxListedMissing {
				res.Missing = append(res.Missing, id)
			}
		}
		return nil
	})
}

// runPipeline runs every stage in this process until every ingested prompt is accounted for, or ctx ends.
func runPipeline(ctx context.Context, rc runConfig) (*runResult, error) {
	start := time.Now()
	log := cmp.Or(rc.Logger, slog.Default())
	if rc.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rc.Timeout)
		defer cancel()
	}
	kc, stopBroker, err := startBroker(rc.Kafka, log)
	if err != nil {
		return nil, err
	}
	defer stopBroker()
	// The process's client: the stages make their own from kc.
	kcl, err := kafka.NewClient(kc)
	if err != nil {
		return nil, err
	}
	defer kcl.Close()
	// The dead-letter reader belongs to this run alone and starts where `rejected` ends now: the rejections
	// earlier runs left there are not this run's.
	rejectedGroup, err := prepareTopics(ctx, kcl.Admin())
	if err != nil {
		return nil, err
	}
	// The run's status records, one per stage, from the one registry of the process: stopped (after a last
	// record) once the stages have stopped, before the broker goes.
	if rc.Gatherer != nil {
		defer startStatusEvery(ctx, &kc, rc.Gatherer, rc.StatusInterval, runStatusStages(rc)...)()
	}
	model, ctxLen, cleanup, err := pipelineModel(rc, log)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	if rc.Capture.enabled() {
		if err := rc.Capture.prepare(model, rc.Tokenize.ModelDir, ctxLen, log); err != nil {
			return nil, err
		}
		defer rc.Capture.stop()
		rc.Sink.AnnounceShards = true
		if rc.Progress != nil {
			rc.Capture.estimate(rc.Progress, rc.Ingest.Inputs, rc.Sink.Dir)
		}
	}
	if len(rc.Generate.Endpoints) == 0 { // the engine: a simulator of the model
		url, stop, err := startSim(rc.Sim, model, ctxLen, log)
		if err != nil {
			return nil, err
		}
		defer stop()
		rc.Generate.Endpoints = []string{url}
	}
	p, err := newPipeline(ctx, rc, kc, kcl, log, rejectedGroup) // kc as the status publisher named the process
	if err != nil {
		return nil, err
	}
	// However this function returns, the stages stop and are waited for before the broker, the simulator
	// and the model directory go away.
	defer p.close()
	if err := p.start(rc, model); err != nil {
		return nil, err
	}
	in := rc.Ingest
	in.Kafka, in.Logger = kc, log
	in.OnPrompt = func(id string, _ topics.Source) { p.tr.mark(idExpected, id) }
	ires, err := ingest.Run(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	runErr := p.wait(ctx, rc.Progress, ires.Rejected)
	if err := p.stop(); runErr == nil {
		runErr = err // errors after the stop count too: a failed final flush must not pass for success
	}
	if runErr == nil && rc.Capture.enabled() {
		// The sink's final flush is committed now: every shard gets its feature file before the run ends.
		runErr = rc.Capture.finish(ctx, kc, rc.Sink.Dir, p.captureConfig(rc), rc.Progress)
	}
	// The dead-letter reader's group was this run's alone: leave no trace of it on the broker.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := kcl.Admin().DeleteGroup(dctx, rejectedGroup); err != nil {
		log.Warn("could not delete the run's dead-letter group", "group", rejectedGroup, "err", err)
	}
	dcancel()
	return p.result(rc.Sink.Dir, ires, time.Since(start), runErr)
}

// startBroker starts an embedded broker when kc names none, and returns the Kafka settings of the run and what
// stops the broker.
func startBroker(kc kafka.Config, log *slog.Logger) (kafka.Config, func(), error) {
	stop := func() {}
	if len(kc.Brokers) == 0 {
		b, err := embedded.Start(embedded.Config{MaxMessageBytes: kc.MaxMessageBytes})
		if err != nil {
			return kc, stop, err
		}
		stop = b.Close
		kc.Brokers = b.Brokers()
		log.Info("embedded Kafka broker", "addr", kc.Brokers)
	}
	if kc.Logger == nil {
		kc.Logger = log
	}
	return kc, stop, nil
}

// prepareTopics creates the pipeline's topics and a consumer group of this run alone that starts where the
// rejected topic ends now; it returns the group.
func prepareTopics(ctx context.Context, admin *kafka.Admin) (string, error) {
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer tcancel()
	if err := admin.EnsureTopics(tctx, topics.Retained()...); err != nil {
		return "", err
	}
	group := fmt.Sprintf("draftflow-run-%x", rand.Uint64())
	ends, err := admin.EndOffsets(tctx, topics.TopicRejected)
	if err != nil {
		return "", err
	}
	return group, admin.StartGroupAt(tctx, group, topics.TopicRejected, ends)
}

// pipelineModel returns the run's model (rc's, its directory's, or the bundled sample) and its context window;
// cleanup removes what loading it made.
func pipelineModel(rc runConfig, log *slog.Logger) (model *tokenize.Model, ctxLen int, cleanup func(), err error) {
	cleanup = func() {}
	model = rc.Tokenize.Model
	if model == nil {
		if model, cleanup, err = loadModelOrBundled(rc.Tokenize.ModelDir); err != nil {
			return nil, 0, cleanup, err
		}
		if rc.Tokenize.ModelDir == "" {
			log.Info("using the bundled sample tokenizer (pass --model DIR for a real model)")
		}
		if rc.Tokenize.ModelName != "" {
			model.Name = rc.Tokenize.ModelName
		}
	}
	// The too-long check needs the model's context window: from the directory or --context-length.
	ctxLen, err = model.ContextWindow(rc.Tokenize.ContextLength)
	return model, ctxLen, cleanup, err
}

// pipeline is the stages of one run in this process, and what accounts for its prompts.
type pipeline struct {
	ctx           context.Context // the run's
	kcl           *kafka.Client   // the process's; each stage makes its own of kc
	kc            kafka.Config
	log           *slog.Logger
	tr            *tracker
	rejs          *rejectionLog
	rejectedGroup string

	// The stages run in a group: the first to fail stops the others (stageCtx ends) and is the group's error.
	// stopStages stops them all without an error.
	stages     *errgroup.Group
	stageCtx   context.Context
	stopStages context.CancelFunc
	sink       sink.Result // the sink's, once it returned
}

// newPipeline returns the pipeline of a run; its stages make their clients of kc.
func newPipeline(ctx context.Context, rc runConfig, kc kafka.Config, kcl *kafka.Client, log *slog.Logger, rejectedGroup string) (*pipeline, error) {
	tr, err := newTracker()
	if err != nil {
		return nil, err
	}
	rejs, err := newRejectionLog(rc.Sink.Dir)
	if err != nil {
		tr.close()
		return nil, err
	}
	p := &pipeline{ctx: ctx, kcl: kcl, kc: kc, log: log, tr: tr, rejs: rejs, rejectedGroup: rejectedGroup}
	var runCtx context.Context
	runCtx, p.stopStages = context.WithCancel(ctx)
	p.stages, p.stageCtx = errgroup.WithContext(runCtx)
	return p, nil
}

// run starts one stage; its error, even one after the stop, is the run's (a failed final flush must not pass
// for success).
func (p *pipeline) run(name string, run func(context.Context) error) {
	p.stages.Go(func() error {
		if err := run(p.stageCtx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// stopped is why the stages stopped once stageCtx has ended: ctx's end (what waited for says what) or the
// error of the stage that failed.
func (p *pipeline) stopped(waitedFor string) error {
	if p.ctx.Err() != nil {
		return fmt.Errorf("%s: %w", waitedFor, p.ctx.Err())
	}
	if err := p.stages.Wait(); err != nil {
		return err
	}
	return errors.New("a stage stopped without an error") // only ctx or stopStages end stageCtx otherwise
}

// stop stops the stages and waits for them; it returns the error of the first that failed.
func (p *pipeline) stop() error {
	p.stopStages()
	return p.stages.Wait()
}

// close stops the stages and closes the tracker.
func (p *pipeline) close() {
	_ = p.stop()
	p.tr.close()
}

// start starts every stage but ingest: tokenize, the sink, then generate once the sink has said what its shards
// hold (an existing --out), so that it sends none of those turns to a server again, and the reader of this
// run's dead letters.
func (p *pipeline) start(rc runConfig, model *tokenize.Model) error {
	tk := rc.Tokenize
	tk.Kafka, tk.Logger, tk.Model = p.kc, p.log, model
	p.run("tokenize", func(ctx context.Context) error { return tokenize.Run(ctx, tk) })
	seeded := make(chan struct{})
	sk := p.sinkConfig(rc, func() { close(seeded) })
	p.run("sink", func(ctx context.Context) (err error) { p.sink, err = sink.Run(ctx, sk); return err })
	select {
	case <-seeded:
	case <-p.stageCtx.Done():
		return p.stopped("waiting for the sink to start")
	}
	gen := rc.Generate
	gen.Kafka, gen.Logger = p.kc, p.log
	p.run("generate", func(ctx context.Context) error { return generate.Run(ctx, gen) })
	if rc.Capture.enabled() {
		// Shards committed during the run are captured as they come; the rest once the stages stop.
		cc := p.captureConfig(rc)
		p.run("capture", func(ctx context.Context) error { return capturestage.Run(ctx, cc) })
	}
	// This run's dead letters, read by a group of this run alone: written beside the shards, and the stages'
	// after ingest accounted for.
	p.run("rejected", func(ctx context.Context) error {
		c := p.kcl.NewConsumer(topics.TopicRejected, kafka.ConsumerConfig{Group: p.rejectedGroup})
		return c.Run(ctx, func(d *kafka.Delivery) {
			var r topics.Rejection
			if topics.Unmarshal(d.Message.Value, &r) == nil {
				p.rejs.add(&r)
				if r.Stage != "ingest" && r.ID != "" {
					p.tr.mark(idRejected, r.ID)
				}
			}
			d.Done()
		})
	})
	return nil
}

// captureConfig is the run's capture stage.
func (p *pipeline) captureConfig(rc runConfig) capturestage.Config {
	cc := rc.Capture.cfg
	cc.Kafka, cc.Logger, cc.Dir = p.kc, p.log, rc.Sink.Dir
	return cc
}

// sinkConfig is the run's sink: its rows accounted for once durable, onSeeded called once its shards are
// published.
func (p *pipeline) sinkConfig(rc runConfig, onSeeded func()) sink.Config {
	sk := rc.Sink
	sk.Kafka, sk.Logger = p.kc, p.log
	if sk.ModelPath == "" { // where vocab finds the model later
		sk.ModelPath = shard.BundledModelPath
		if rc.Tokenize.ModelDir != "" {
			sk.ModelPath, _ = filepath.Abs(rc.Tokenize.ModelDir)
		} else if rc.Tokenize.Model != nil {
			sk.ModelPath = ""
		}
	}
	// A row is done once durable: in the sink's journal (it reaches a shard at the latest at the sink's final
	// flush, or when the next start recovers the journal) or in a shard.
	sk.OnDurable = func(ids []string) { p.tr.mark(idWritten, ids...) }
	sk.OnJournaled = sk.OnDurable
	sk.OnDuplicate = func(id string) { p.tr.mark(idPresent, id) }
	sk.OnSeeded = onSeeded
	return sk
}

// wait waits until every ingested prompt is accounted for (a stage failing or ctx ending stops it with the
// error), drawing a progress bar on progressOut, and then (briefly) until ingest's ingestRejected rejections are
// read too, so the rejections file holds them all.
func (p *pipeline) wait(ctx context.Context, progressOut io.Writer, ingestRejected int) error {
	done, missing, _ := p.tr.status()
	expected := done + missing
	p.log.Info("ingest finished", "prompts", expected, "rejected_lines", ingestRejected)
	var bar *progress.Bar
	if progressOut != nil && expected > 0 {
		bar = progress.New(progressOut, "prompts", int64(expected), progress.Options{Unit: "prompts"})
	}
	if err := p.accounted(ctx, bar); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); p.rejs.read(ingest.Stage) < ingestRejected && time.Now().Before(deadline) && p.stageCtx.Err() == nil; {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// accounted waits until every ingested prompt is accounted for, a stage fails or ctx ends, showing the count on
// bar (when not nil), which it clears then: the summary follows.
func (p *pipeline) accounted(ctx context.Context, bar *progress.Bar) error {
	if bar != nil {
		defer bar.Clear()
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		done, missing, err := p.tr.status()
		if bar != nil {
			bar.Set(int64(done))
		}
		if err != nil {
			return fmt.Errorf("account for the prompts: %w", err)
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-p.tr.changed:
		case <-ticker.C:
		case <-p.stageCtx.Done():
			return p.stopped("stopped before every prompt reached the shards")
		}
	}
}

// result is the run's summary, once the stages stopped, and its error: runErr (the stages' included), else the
// first that the summary met.
func (p *pipeline) result(dir string, ires ingest.Result, elapsed time.Duration, runErr error) (*runResult, error) {
	done, missing, _ := p.tr.status()
	res := &runResult{Prompts: done + missing, IngestRejected: ires.Rejected, Dir: dir, Elapsed: elapsed,
		Duplicates: p.sink.Duplicates, InShards: p.sink.InShards, Turns: p.sink.Turns}
	if err := p.tr.account(res); err != nil && runErr == nil {
		runErr = fmt.Errorf("account for the prompts: %w", err)
	}
	var rerr error
	if res.RejectedFile, res.Examples, rerr = p.rejs.close(); rerr != nil && runErr == nil {
		runErr = rerr
	}
	if runs, _ := shard.RunDirs(dir); len(runs) == 0 && res.Written == 0 {
		// Nothing was written, now or before: no shards to inspect.
	} else if sum, err := offline.Inspect(context.Background(), dir, io.Discard); err == nil { // also after an interrupted run
		res.Tokens, res.Shards, res.Rows = sum.Tokens, sum.Shards, sum.Rows
		res.FeatureFiles, res.FeatureRows, res.FeatureMissing = sum.FeatureFiles, sum.FeatureRows, sum.FeatureRowsMissing
	} else if runErr == nil {
		runErr = fmt.Errorf("inspect %s: %w", dir, err)
	}
	if runErr == nil && res.Prompts == 0 && ires.Rejected > 0 {
		runErr = fmt.Errorf("every input line was rejected (%d): nothing to generate; the reasons are in %s", ires.Rejected, res.RejectedFile)
	}
	if res.Turns == nil {
		res.Turns = map[string]int64{}
	}
	return res, runErr
}

// startSim serves a simulated SGLang server for model (context window ctxLen) on a free loopback port and
// returns its URL and a function that stops it.
func startSim(scfg sim.Config, model *tokenize.Model, ctxLen int, log *slog.Logger) (string, func(), error) {
	scfg.Logger = log
	scfg.VocabSize = model.Tokenizer.VocabSize()
	scfg.EOSTokenIDs = nil
	for _, id := range model.EOSTokenIDs {
		scfg.EOSTokenIDs = append(scfg.EOSTokenIDs, int(id))
	}
	scfg.SpecialTokenStart = model.SpecialTokenStart
	// Reasoning and tool-call segments, when the model has the tokens, as a thinking model emits them.
	if a, ok := model.Tokenizer.TokenID("<think>"); ok && scfg.ReasoningTokenIDs == nil {
		if b, ok := model.Tokenizer.TokenID("</think>"); ok {
			scfg.ReasoningTokenIDs = []int{int(a), int(b)}
		}
	}
	if a, ok := model.Tokenizer.TokenID("<tool_call>"); ok && scfg.ToolCallTokenIDs == nil {
		if b, ok := model.Tokenizer.TokenID("</tool_call>"); ok {
			scfg.ToolCallTokenIDs, scfg.ToolCallRate = []int{int(a), int(b)}, 0.1
		}
	}
	scfg.ContextLength = ctxLen
	s, err := sim.New(scfg)
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	url := "http://" + l.Addr().String()
	log.Info("simulated SGLang server", "url", url)
	return url, func() { srv.Close(); s.Close() }, nil
}
