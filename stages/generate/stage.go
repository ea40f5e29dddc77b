package generate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/topics"
)

// ackDrainTime is how long, after shutdown begins (and ShutdownGrace has passed), the consumer waits for
// acknowledgements of outputs already sent before it commits what is finished and returns.
const ackDrainTime = 5 * time.Second

// The results of the stage's records (draftflow_records_total{stage="generate"}), besides stream.Rejected.
const (
	resultGenerated = "generated"  // a server generated it
	resultInShards  = "in_shards"  // already in the sink's shards: no request, the thread passed on
	resultStaleTurn = "stale_turn" // a later turn of a run with other settings: skipped
	resultAnswered  = "answered"   // answered before a restart (Config.AnswersDir): no request, the answer produced
	resultKept      = "kept"       // brought in with its output (topics.Kept): no request, produced as it is
)

// record is one tokenized record in the stage.
type record = stream.Record[topics.Tokenized]

// stage is one running generate stage.
type stage struct {
	cfg     Config
	log     *slog.Logger
	ctl     *admission.Controller
	drv     *driver // runs ctl: its servers' health and load, each request's attempts
	met     *stageMetrics
	life    *stream.Stage  // the record lifecycle; its writes are retried while work lives
	gen     *stream.Output // topics.TopicGenerated
	shards  *shardsView    // what the sink's shards hold: turns not to send again
	answers *answered      // answered generations, journaled before they are produced (nil: none)
	work    context.Context
	workers sync.WaitGroup
}

// Run consumes topics.TopicTokenized in group cfg.Group, generates a completion for every record through the
// Controller, and produces a topics.Generation to topics.TopicGenerated, or a topics.Rejection to
// topics.TopicRejected for a record the server refuses. A delivery is Done only once its output is
// acknowledged by Kafka (the lifecycle and its produce policy: package kafka/stream). When ctx ends Run stops
// fetching, gives in-flight requests cfg.ShutdownGrace to finish, aborts the rest on their servers (they are
// redelivered later), commits what is finished and returns nil; it returns an error only when it cannot start,
// the consumer fails for good, Kafka refuses the stage's credentials, or a server refuses the API key
// (*AuthError: the stage stops at once, what was in flight is redelivered later).
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	kcl := cfg.Client
	if kcl == nil {
		return errors.New("generate: Config.Client is required")
	}
	if err := ensureTopics(ctx, kcl); err != nil {
		return err
	}
	ctl, err := admission.NewController(cfg.Config)
	if err != nil {
		return err
	}
	cfg.Stall.start(ctl)
	// A fatal Controller error (a server refusing the API key) stops the stage as a shutdown does, without
	// the grace period: nothing in flight can finish.
	ctx, stopRun := context.WithCancel(ctx)
	fatalWatch := make(chan struct{})
	go func() {
		defer close(fatalWatch)
		select {
		case <-ctl.Fatal():
			stopRun()
		case <-ctx.Done():
		}
	}()
	defer func() { stopRun(); <-fatalWatch }()
	work, stopWork := graceful(ctx, ctl, cfg.ShutdownGrace)
	defer stopWork()
	log := cfg.Logger.With("stage", "generate")
	shards := newShardsView(log)
	answers, err := openAnswered(cfg.AnswersDir, shards, log)
	if err != nil {
		return err
	}
	life := stream.New(work, stream.Config{Client: kcl, Stage: "generate", Logger: cfg.Logger, Registerer: cfg.Registerer})
	drv := newDriver(ctl, log)
	if cfg.Loops.watching() {
		drv.loops = &cfg.Loops
	}
	s := &stage{cfg: cfg, log: log, ctl: ctl, drv: drv, met: newStageMetrics(cfg.Registerer), life: life,
		gen: life.Output(topics.TopicGenerated), shards: shards, answers: answers, work: work}
	stopBackground := s.background(ctx, kcl)
	defer stopBackground()
	cons := kcl.NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: cfg.Group, Namespace: cfg.InputNamespace, MaxInFlight: cfg.MaxInFlight,
		DrainTimeout: cfg.ShutdownGrace + ackDrainTime, RevokeTimeout: cfg.RevokeTimeout})
	cfg.Ready.Add("generate", func() error {
		switch {
		case cons.Assigned() == 0:
			return errors.New("no partitions of the tokenized topic assigned")
		case !ctl.AnyReady():
			return errors.New("no SGLang endpoint up")
		}
		return nil
	})
	// Nothing is fetched before the stage knows what the shards hold.
	s.shards.wait(ctx, cfg.ShardsWait)
	log.Info("generate stage started", "endpoints", cfg.Endpoints, "policy", ctl.Config().Policy, "group", cfg.Group, "max_in_flight", cfg.MaxInFlight)
	runErr := stream.Consume(ctx, life, stream.Options[topics.Tokenized]{}, s.handle, cons)

	// The consumer has committed what finished. Abandon what is left, then flush the outputs.
	stopWork()
	s.workers.Wait()
	s.drv.wait()
	closeErr := life.Close()
	stopBackground()
	log.Info("generate stage stopped")
	return errors.Join(ctl.Err(), runErr, closeErr)
}

// ensureTopics creates the topics the stage reads and writes.
func ensureTopics(ctx context.Context, kcl *kafka.Client) error {
	if err := kcl.Admin().EnsureTopics(ctx, topics.TopicTokenized, topics.TopicGenerated, topics.TopicRejected); err != nil {
		return err
	}
	return kcl.Admin().EnsureCompactedTopic(ctx, topics.TopicShards)
}

// graceful returns the context the stage's work runs in: cancelled grace after ctx ends (at once when the
// Controller failed), or by the returned function, which also waits for the goroutine that keeps the grace
// (more than once is fine).
func graceful(ctx context.Context, ctl *admission.Controller, grace time.Duration) (context.Context, context.CancelFunc) {
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-work.Done():
			return
		}
		if ctl.Err() == nil && grace > 0 {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-t.C:
			case <-work.Done():
			}
		}
		stopWork()
	}()
	return work, func() { stopWork(); <-done }
}

// background starts what runs beside the consumer: following the shards topic and the Controller. The returned
// function stops both and waits for them (more than once is fine).
func (s *stage) background(ctx context.Context, kcl *kafka.Client) func() {
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	followDone := make(chan struct{})
	go func() { defer close(followDone); s.shards.follow(followCtx, kcl) }()
	ctlCtx, stopCtl := context.WithCancel(context.WithoutCancel(ctx))
	ctlDone := make(chan struct{})
	go func() { defer close(ctlDone); _ = s.drv.run(ctlCtx) }() // its error is ctl.Err(), which Run returns
	answersCtx, stopAnswers := context.WithCancel(context.WithoutCancel(ctx))
	answersDone := make(chan struct{})
	go func() { defer close(answersDone); s.answers.run(answersCtx) }()
	return func() {
		stopCtl()
		<-ctlDone
		stopAnswers()
		<-answersDone
		stopFollow()
		<-followDone
	}
}

// handle starts the work of one record; it is called from the consumer's goroutine and returns at once.
func (s *stage) handle(r *record) {
	t := r.Value
	if len(t.InputIDs) == 0 {
		r.Reject("empty_prompt", "empty prompt (no input_ids)", nil)
		return
	}
	if !topics.KnownOrigin(t.Origin) {
		r.Reject("unknown_origin", fmt.Sprintf("unknown origin %q (want one of %s)", t.Origin, strings.Join(topics.Origins(), ", ")), nil)
		return
	}
	lane := s.ctl.ResolveLane(t.Dataset, t.Sampling.Lane)
	sampling := s.cfg.Override.Apply(t.Sampling)
	sampling.MaxNewTokens = s.ctl.MaxNewTokens(sampling.MaxNewTokens, lane)
	sampling.Lane = lane.Name
	if topics.Kept(t.Origin) {
		s.keep(r, sampling)
		return
	}
	if t.Continuation && !sameSampling(sampling, t.Sampling) {
		// A later turn built from a generation made with other settings: a replay of the tokenized topic
		// with other sampling (or lanes) reads the previous run's continuations too. This run builds its
		// own later turns from its own replies; the old one belongs to the old run.
		s.log.Debug("later turn of a run with other settings skipped", "id", t.ID, "turn", t.Turn, "at", r.Where())
		r.Finish(stream.Outcome{Result: resultStaleTurn})
		return
	}
	fp := topics.RunFingerprint(t.Model, t.TokenizerHash, sampling)
	if epoch, ok := s.shards.holds(fp, t.ID, t.Turn); ok {
		// Already in the sink's shards: no request. The sink gets a record that says so, with the thread, and
		// sends the conversation's next turn from the reply its shards recorded where that is needed.
		s.log.Debug("turn already in the shards, not generated again", "id", t.ID, "turn", t.Turn, "at", r.Where())
		r.Produce(s.gen, t.ID, &topics.Generation{ID: t.ID, Dataset: t.Dataset, Turn: t.Turn, Sampling: sampling, Source: t.Source,
			Model: t.Model, TokenizerHash: t.TokenizerHash, Thread: t.Thread, InShards: epoch}, stream.Outcome{Result: resultInShards})
		return
	}
	if g, ok := s.answers.lookup(fp, t.ID, t.Turn); ok {
		// Answered before a restart, but not yet in the shards: the answer is produced again, not asked for.
		s.log.Debug("turn answered before a restart, produced from the journal", "id", t.ID, "turn", t.Turn, "at", r.Where())
		r.Produce(s.gen, g.ID, g, stream.Outcome{Result: resultAnswered, Tokens: len(g.OutputIDs)})
		return
	}
	req := request(t, sampling, lane.Name)
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		ctx, cancel := context.WithCancel(s.work)
		defer cancel()
		defer context.AfterFunc(r.Lost(), cancel)()
		// A record whose partition is being given up starts no request; one already running is stopped (and
		// aborted on its server) once the partition is gone, since its next owner generates it again.
		res, err := s.drv.do(ctx, req, r.Revoking())
		var rej *admission.RejectedError
		switch {
		case err == nil && res.loop != nil && s.cfg.Loops.Action == LoopDrop:
			l := *res.loop
			s.met.loops.WithLabelValues(LoopDrop).Inc()
			s.log.Info("reply in a repetition loop stopped and dropped", "id", t.ID, "turn", t.Turn, "period", l.Period, "start", l.Start, "found", l.End)
			s.cfg.Stall.answer(false)
			r.Reject("loop", loopDetail(l, len(res.Response.OutputIDs)), nil)
		case err == nil:
			g := generation(t, sampling, res.Result)
			if res.loop != nil {
				l := *res.loop
				markLoop(g, l, s.cfg.Loops.Action)
				s.met.loops.WithLabelValues(s.cfg.Loops.Action).Inc()
				s.log.Info("reply in a repetition loop", "id", t.ID, "turn", t.Turn, "action", s.cfg.Loops.Action,
					"period", l.Period, "start", l.Start, "found", l.End, "produced", len(g.OutputIDs))
			}
			if t.Thread != nil {
				s.met.turns.WithLabelValues(g.StopReason).Inc()
				if g.StopReason != topics.StopContinued && g.StopReason != topics.StopEnd {
					s.log.Info("conversation ends at this turn", "id", t.ID, "turn", t.Turn, "stop_reason", g.StopReason, "detail", g.StopDetail)
				}
			}
			s.met.cachedTokens.Add(float64(g.Meta.CachedTokens))
			s.cfg.Stall.answer(g.StopReason == topics.StopContinued)
			s.answers.record(fp, g)
			r.Produce(s.gen, g.ID, g, stream.Outcome{Result: resultGenerated, Tokens: len(g.OutputIDs)})
		case errors.As(err, &rej):
			r.Reject("server_rejected", rej.Reason, nil)
		default:
			// Abandoned on shutdown or handed over on a rebalance (errNotStarted, or stopped once its partition
			// was lost): its slot is freed at once (the consumer need not wait out its drain timeout) and its
			// offset is never committed, so the record is redelivered.
			s.log.Debug("request abandoned", "id", t.ID, "at", r.Where(), "err", err)
			r.Abandon()
		}
	}()
}

// request is the server request of a tokenized record with the stage's sampling and lane.
func request(t *topics.Tokenized, sampling topics.Sampling, lane string) *admission.Request {
	req := &admission.Request{
		RID:      admission.RequestID(t.ID, t.Turn),
		Key:      admission.LengthKey{Dataset: t.Dataset, Lane: lane},
		InputIDs: t.InputIDs,
		Sampling: sglang.SamplingParams{
			MaxNewTokens: sampling.MaxNewTokens,
			Temperature:  sampling.Temperature,
			TopP:         sampling.TopP,
			TopK:         sampling.TopK,
			MinP:         sampling.MinP,
			SamplingSeed: sampling.Seed,
			StopTokenIDs: sampling.StopTokenIDs,
		},
		Prefer: t.Endpoint,
	}
	if t.Thread != nil {
		// The reply is parsed from the text: reasoning and tool-call markers are special tokens in some
		// families (Kimi-K2's tool-call sections), which the default skip_special_tokens would drop.
		no := false
		req.Sampling.SkipSpecialTokens = &no
	}
	return req
}

// generation builds the output record of a finished request.
func generation(t *topics.Tokenized, sampling topics.Sampling, res *admission.Result) *topics.Generation {
	m := res.Response.MetaInfo
	g := &topics.Generation{
		ID: t.ID, Dataset: t.Dataset, Turn: t.Turn, Sampling: sampling, Source: t.Source,
		Model: t.Model, TokenizerHash: t.TokenizerHash,
		PromptIDs: t.InputIDs, OutputIDs: res.Response.OutputIDs,
		Meta: topics.GenerationMeta{
			FinishReason:     m.FinishReason.Type,
			FinishMatched:    m.FinishReason.Matched,
			PromptTokens:     m.PromptTokens,
			CompletionTokens: m.CompletionTokens,
			CachedTokens:     m.CachedTokens,
			Retractions:      m.Retractions(),
			LatencySeconds:   m.E2ELatency,
			Endpoint:         res.Endpoint,
			ServedModel:      res.ServedModel,
		},
	}
	if string(g.Meta.FinishMatched) == "null" {
		g.Meta.FinishMatched = nil
	}
	conclude(t, g, res.Response.Text)
	return g
}

// sameSampling reports whether two sampling settings are the same (as JSON: pointers and maps by value).
func sameSampling(a, b topics.Sampling) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}
