// Package pipeline runs every stage of draftflow in one process, as `draftflow run` does, and accounts for every
// prompt it ingested. It owns what a run needs around the stages: the broker (an embedded one unless the
// Config names brokers), the process's one Kafka client that every stage is handed, the topics, a simulated
// SGLang server shaped after the model unless the Config names endpoints (and simulated capture servers for
// "sim"), the account of every ingested prompt (written, already in the shards, rejected or lost), the run's
// rejections file beside the shards, and its status records.
//
// Its API is Run with a Config and the Result it returns. StatusStage names the pipeline's stages as status sees
// them (the single-stage commands and `draftflow status` use it too); StartSim serves the simulated SGLang server
// a run uses; RejectionLine is a line of the run's rejections file; RunModelDir finds the model a run recorded.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/draftflow/draftflow/internal/progress"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/status"
	"github.com/draftflow/draftflow/topics"
)

// AnswersDir is the directory, in the output directory, of the generate stage's journal of answered generations
// (package stages/generate/answers).
const AnswersDir = "answers"

// Config is everything a run needs. The stages' Clients are the run's and their Loggers Logger: Run sets them.
type Config struct {
	// Client, when set, is the process's client of the cluster to run on (Kafka is not used then); it stays
	// open. Else Run makes one of Kafka, on an embedded broker it starts when Kafka names no Brokers.
	Client   *kafka.Client
	Kafka    kafka.Config
	Ingest   ingest.Config
	Tokenize tokenize.Config // Model and ModelDir empty: the bundled sample model
	Generate generate.Config // Endpoints empty: start an in-process simulator of Sim's settings
	Sink     sink.Config
	Sim      sim.Config
	// Capture, when enabled, captures the EAGLE-3 features of every shard.
	Capture Capture
	// Timeout bounds the whole run (0: none).
	Timeout time.Duration
	// Progress receives progress bars and the capture's estimate (nil: none).
	Progress io.Writer
	Logger   *slog.Logger
	// Gatherer is the process's registry, the one the stages' Registerers name: the run publishes its status
	// records from it (nil: no status records).
	Gatherer prometheus.Gatherer
	// StatusInterval is how often the status records are written (0: status.DefaultInterval).
	StatusInterval time.Duration
}

// Result is what a run reports.
type Result struct {
	Prompts          int              // valid prompts ingested: conversations by id, rows brought in with their output by id and turn
	Written          int              // of them, rows now in the shards (written by this run)
	AlreadyPresent   int              // of them, already in the shards from an earlier run
	IngestRejected   int              // malformed input lines
	PipelineRejected int              // prompts dead-lettered by tokenize, generate or sink
	Lost             int              // prompts that reached none of these
	Missing          []string         // the first maxListedMissing of them
	Duplicates       int64            // generations the sink dropped as already written or buffered (redone work)
	InShards         int64            // turns not sent to a server because the shards already held them
	Tokens           int64            // tokens in the shards of this run's output
	Rows             int64            // rows in the shards of this run's output (one per regenerated turn or row brought in)
	Origins          map[string]int64 // those rows by origin (topics.Origins)
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

// Run runs every stage in this process until every ingested prompt is accounted for, or ctx ends. It returns
// the run's Result (nil when the run could not start) and its error: the first stage's that failed, a prompt
// lost, or ctx's end.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	log := cmp.Or(cfg.Logger, slog.Default())
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	// The process's one client, handed to every stage.
	kcl := cfg.Client
	if kcl == nil {
		kc, stopBroker, err := startBroker(cfg.Kafka, log)
		if err != nil {
			return nil, err
		}
		defer stopBroker()
		if cfg.Gatherer != nil && kc.ClientID == "" {
			// The status records and the group members then name this process alike.
			kc.ClientID = "draftflow-" + status.DefaultInstance()
		}
		if kcl, err = kafka.NewClient(kc); err != nil {
			return nil, err
		}
		defer kcl.Close()
	}
	// The dead-letter reader belongs to this run alone and starts where `rejected` ends now: the rejections
	// earlier runs left there are not this run's.
	rejectedGroup, err := prepareTopics(ctx, kcl.Admin())
	if err != nil {
		return nil, err
	}
	// Why the run makes no progress, when it does not: its progress line and the generate stage's status record
	// say.
	if cfg.Generate.Stall == nil {
		cfg.Generate.Stall = &generate.Stall{}
	}
	stall := newStallWatch(cfg.Generate.Stall)
	stall.broker = kcl
	defer stall.close() // before the client goes
	// The run's status records, one per stage, from the one registry of the process: stopped (after a last
	// record) once the stages have stopped, before the client and the broker go.
	if cfg.Gatherer != nil {
		defer status.Start(ctx, status.PublisherConfig{Client: kcl, Gatherer: cfg.Gatherer, Stages: statusStages(cfg, stall.reason),
			Instance: status.DefaultInstance(), Interval: cfg.StatusInterval, Logger: log})()
	}
	model, ctxLen, cleanup, err := runModel(cfg, log)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	var cp *capture
	if cfg.Capture.Enabled() {
		if cp, err = startCapture(cfg.Capture, model, cfg.Tokenize.ModelDir, ctxLen, log); err != nil {
			return nil, err
		}
		defer cp.stop()
		cfg.Sink.AnnounceShards = true
		if cfg.Progress != nil {
			if err := cp.estimate(cfg.Progress, cfg.Ingest.Inputs, cfg.Sink.Dir); err != nil {
				return nil, err
			}
		}
	}
	if len(cfg.Generate.Endpoints) == 0 { // the engine: a simulator of the model
		url, stop, err := StartSim(cfg.Sim, model, ctxLen, log)
		if err != nil {
			return nil, err
		}
		defer stop()
		cfg.Generate.Endpoints = []string{url}
	}
	r, err := newRun(ctx, kcl, log, cfg.Sink.Dir, rejectedGroup, stall)
	if err != nil {
		return nil, err
	}
	// However this function returns, the stages stop and are waited for before the broker, the simulator
	// and the model directory go away.
	defer r.close()
	if err := r.start(cfg, model, cp); err != nil {
		return nil, err
	}
	in := cfg.Ingest
	in.Client, in.Logger = kcl, log
	in.OnPrompt = func(p *topics.Prompt) { r.tr.mark(idExpected, topics.AccountKey(p.ID, p.Turn, p.Origin)) }
	ires, err := ingest.Run(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	runErr := r.wait(ctx, cfg.Progress, ires.Rejected)
	if err := r.stop(); runErr == nil {
		runErr = err // errors after the stop count too: a failed final flush must not pass for success
	}
	if runErr == nil && cp != nil {
		// The sink's final flush is committed now: every shard gets its feature file before the run ends.
		cc := r.captureConfig(cfg, cp)
		cc.Progress = cfg.Progress
		runErr = finish(ctx, kcl, cfg.Sink.Dir, cc)
	}
	// The dead-letter reader's group was this run's alone: leave no trace of it on the broker, even after a
	// shutdown signal.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if err := kcl.Admin().DeleteGroup(dctx, rejectedGroup); err != nil {
		log.Warn("could not delete the run's dead-letter group", "group", rejectedGroup, "err", err)
	}
	dcancel()
	return r.result(ctx, cfg.Sink.Dir, ires, time.Since(start), runErr)
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

// runModel returns the run's model (cfg's, its directory's, or the bundled sample) and its context window;
// cleanup removes what loading it made.
func runModel(cfg Config, log *slog.Logger) (model *tokenize.Model, ctxLen int, cleanup func(), err error) {
	cleanup = func() {}
	model = cfg.Tokenize.Model
	if model == nil {
		if model, cleanup, err = tokenize.LoadModelOrBundled(cfg.Tokenize.ModelDir); err != nil {
			return nil, 0, cleanup, err
		}
		if cfg.Tokenize.ModelDir == "" {
			log.Info("using the bundled sample tokenizer (pass --model DIR for a real model)")
		}
		if cfg.Tokenize.ModelName != "" {
			model.Name = cfg.Tokenize.ModelName
		}
	}
	// The too-long check needs the model's context window: from the directory or --context-length.
	ctxLen, err = model.ContextWindow(cfg.Tokenize.ContextLength)
	return model, ctxLen, cleanup, err
}

// run is the stages of one run in this process, and what accounts for its prompts.
type run struct {
	ctx           context.Context // the run's
	kcl           *kafka.Client   // the process's, every stage's
	log           *slog.Logger
	tr            *tracker
	rejs          *rejectionLog
	rejectedGroup string
	stall         *stallWatch // why the run makes no progress

	// The stages run in a group: the first to fail stops the others (stageCtx ends) and is the group's error.
	// stopStages stops them all without an error.
	stages     *errgroup.Group
	stageCtx   context.Context
	stopStages context.CancelFunc
	sink       sink.Result // the sink's, once it returned
}

// newRun returns the run of the stages, its rejections file in dir.
func newRun(ctx context.Context, kcl *kafka.Client, log *slog.Logger, dir, rejectedGroup string, stall *stallWatch) (*run, error) {
	tr, err := newTracker()
	if err != nil {
		return nil, err
	}
	rejs, err := newRejectionLog(dir)
	if err != nil {
		tr.close()
		return nil, err
	}
	r := &run{ctx: ctx, kcl: kcl, log: log, tr: tr, rejs: rejs, rejectedGroup: rejectedGroup, stall: stall}
	var runCtx context.Context
	runCtx, r.stopStages = context.WithCancel(ctx)
	r.stages, r.stageCtx = errgroup.WithContext(runCtx)
	return r, nil
}

// run starts one stage; its error, even one after the stop, is the run's (a failed final flush must not pass
// for success).
func (r *run) run(name string, run func(context.Context) error) {
	r.stages.Go(func() error {
		if err := run(r.stageCtx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// stopped is why the stages stopped once stageCtx has ended: ctx's end (what waited for says what) or the
// error of the stage that failed.
func (r *run) stopped(waitedFor string) error {
	if r.ctx.Err() != nil {
		return fmt.Errorf("%s: %w", waitedFor, r.ctx.Err())
	}
	if err := r.stages.Wait(); err != nil {
		return err
	}
	return errors.New("a stage stopped without an error") // only ctx or stopStages end stageCtx otherwise
}

// stop stops the stages and waits for them; it returns the error of the first that failed.
func (r *run) stop() error {
	r.stopStages()
	return r.stages.Wait()
}

// close stops the stages and closes the tracker.
func (r *run) close() {
	if err := r.stop(); err != nil {
		r.log.Debug("a stage failed", "err", err) // the run's error already, when it returns one
	}
	if err := r.tr.close(); err != nil {
		r.log.Warn("could not remove the run's id set", "err", err)
	}
}

// start starts every stage but ingest: tokenize, the sink, then generate once the sink has said what its shards
// hold (an existing --out), so that it sends none of those turns to a server again, capture (cp, when the run
// captures), and the reader of this run's dead letters.
func (r *run) start(cfg Config, model *tokenize.Model, cp *capture) error {
	tk := cfg.Tokenize
	tk.Client, tk.Logger, tk.Model = r.kcl, r.log, model
	r.run("tokenize", func(ctx context.Context) error { return tokenize.Run(ctx, tk) })
	seeded := make(chan struct{})
	sk := r.sinkConfig(cfg, func() { close(seeded) })
	r.run("sink", func(ctx context.Context) (err error) { r.sink, err = sink.Run(ctx, sk); return err })
	select {
	case <-seeded:
	case <-r.stageCtx.Done():
		return r.stopped("waiting for the sink to start")
	}
	gen := cfg.Generate
	gen.Client, gen.Logger = r.kcl, r.log
	if gen.AnswersDir == "" {
		// Answered generations are journaled beside the shards: a kill loses none that reached the journal, even
		// those the embedded broker held in memory alone.
		gen.AnswersDir = filepath.Join(cfg.Sink.Dir, AnswersDir)
	}
	r.run("generate", func(ctx context.Context) error { return generate.Run(ctx, gen) })
	if cp != nil {
		// Shards committed during the run are captured as they come; the rest once the stages stop.
		cc := r.captureConfig(cfg, cp)
		r.run("capture", func(ctx context.Context) error { return capturestage.Run(ctx, cc) })
	}
	// This run's dead letters, read by a group of this run alone: written beside the shards, and the stages'
	// after ingest accounted for.
	r.run("rejected", func(ctx context.Context) error {
		c := r.kcl.NewConsumer(topics.TopicRejected, kafka.ConsumerConfig{Group: r.rejectedGroup})
		return c.Run(ctx, func(d *kafka.Delivery) {
			var rej topics.Rejection
			if topics.Unmarshal(d.Message.Value, &rej) == nil {
				r.rejs.add(&rej)
				if rej.Stage != ingest.Stage && rej.ID != "" {
					r.tr.mark(idRejected, topics.AccountKey(rej.ID, rej.Turn, rej.Origin))
				}
			}
			d.Done()
		})
	})
	return nil
}

// captureConfig is the run's capture stage.
func (r *run) captureConfig(cfg Config, cp *capture) capturestage.Config {
	cc := cp.cfg
	cc.Client, cc.Logger, cc.Dir = r.kcl, r.log, cfg.Sink.Dir
	return cc
}

// sinkConfig is the run's sink: its rows accounted for once durable, onSeeded called once its shards are
// published.
func (r *run) sinkConfig(cfg Config, onSeeded func()) sink.Config {
	sk := cfg.Sink
	sk.Client, sk.Logger = r.kcl, r.log
	if sk.ModelPath == "" { // where vocab finds the model later
		switch {
		case cfg.Tokenize.ModelDir != "":
			if abs, err := filepath.Abs(cfg.Tokenize.ModelDir); err == nil {
				sk.ModelPath = abs
			} else {
				r.log.Warn("the model's directory is not recorded in the manifest", "model", cfg.Tokenize.ModelDir, "err", err)
			}
		case cfg.Tokenize.Model == nil:
			sk.ModelPath = shard.BundledModelPath
		}
	}
	// A row is done once durable: in the sink's journal (it reaches a shard at the latest at the sink's final
	// flush, or when the next start recovers the journal) or in a shard.
	sk.OnDurable = func(ids []string) { r.tr.mark(idWritten, ids...) }
	sk.OnJournaled = sk.OnDurable
	sk.OnDuplicate = func(id string) { r.tr.mark(idPresent, id) }
	sk.OnSeeded = onSeeded
	return sk
}

// wait waits until every ingested prompt is accounted for (a stage failing or ctx ending stops it with the
// error), drawing a progress bar on progressOut, and then (briefly) until ingest's ingestRejected rejections are
// read too, so the rejections file holds them all.
func (r *run) wait(ctx context.Context, progressOut io.Writer, ingestRejected int) error {
	done, missing, _ := r.tr.status() // an error of the id set is accounted's
	expected := done + missing
	r.log.Info("ingest finished", "prompts", expected, "rejected_lines", ingestRejected)
	var bar *progress.Bar
	if progressOut != nil && expected > 0 {
		bar = progress.New(progressOut, "prompts", int64(expected), progress.Options{Unit: "prompts"})
	}
	if err := r.accounted(ctx, bar); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); r.rejs.read(ingest.Stage) < ingestRejected && time.Now().Before(deadline) && r.stageCtx.Err() == nil; {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// accounted waits until every ingested prompt is accounted for, a stage fails or ctx ends, showing the count on
// bar (when not nil), and after it why the count does not move when it does not (stallWatch); it clears bar then:
// the summary follows.
func (r *run) accounted(ctx context.Context, bar *progress.Bar) error {
	if bar != nil {
		defer bar.Clear()
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		done, missing, err := r.tr.status()
		note := r.stall.update(ctx, done, missing)
		if bar != nil {
			bar.Set(int64(done))
			bar.SetNote(note)
		}
		if err != nil {
			return fmt.Errorf("account for the prompts: %w", err)
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-r.tr.changed:
		case <-ticker.C:
		case <-r.stageCtx.Done():
			return r.stopped("stopped before every prompt reached the shards")
		}
	}
}

// result is the run's summary, once the stages stopped, and its error: runErr (the stages' included), else the
// first that the summary met. The summary is read even when ctx was cancelled (a stopped run still says what
// it wrote).
func (r *run) result(ctx context.Context, dir string, ires ingest.Result, elapsed time.Duration, runErr error) (*Result, error) {
	done, missing, _ := r.tr.status() // an error of the id set is account's
	res := &Result{Prompts: done + missing, IngestRejected: ires.Rejected, Dir: dir, Elapsed: elapsed,
		Duplicates: r.sink.Duplicates, InShards: r.sink.InShards, Turns: r.sink.Turns}
	if err := r.tr.account(res); err != nil && runErr == nil {
		runErr = fmt.Errorf("account for the prompts: %w", err)
	}
	var rerr error
	if res.RejectedFile, res.Examples, rerr = r.rejs.close(); rerr != nil && runErr == nil {
		runErr = rerr
	}
	if runs, _ := shard.RunDirs(dir); len(runs) == 0 && res.Written == 0 {
		// Nothing was written, now or before: no shards to inspect.
	} else if sum, err := offline.Inspect(context.WithoutCancel(ctx), dir, io.Discard); err == nil {
		res.Tokens, res.Shards, res.Rows, res.Origins = sum.Tokens, sum.Shards, sum.Rows, sum.Origins
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
	if res.Origins == nil {
		res.Origins = map[string]int64{}
	}
	return res, runErr
}
