package generate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/stages/generate/internal/admission"
	"github.com/draftflow/draftflow/topics"
)

// ackDrainTime is how long, after shutdown begins (and ShutdownGrace has passed), the consumer waits for
// acknowledgements of outputs already sent before it commits what is finished and returns.
const ackDrainTime = 5 * time.Second

// stage is one running generate stage.
type stage struct {
	cfg     Config
	log     *slog.Logger
	ctl     *admission.Controller
	met     *stageMetrics
	gen     *kafka.Producer
	dead    *kafka.DeadLetters
	shards  *shardsView     // what the sink's shards hold: turns not to send again
	work    context.Context // cancelled ShutdownGrace after shutdown begins: in-flight requests are abandoned
	workers sync.WaitGroup
}

// Run consumes topics.TopicTokenized in group cfg.Group, generates a completion for every record through the
// Controller, and produces a topics.Generation to topics.TopicGenerated, or a topics.Rejection to
// topics.TopicRejected for a record the server refuses. A delivery is Done only once its output is
// acknowledged by Kafka. When ctx ends Run stops fetching, gives in-flight requests cfg.ShutdownGrace to
// finish, aborts the rest on their servers (they are redelivered later), commits what is finished and
// returns nil; it returns an error only when it cannot start, the consumer fails for good, or a server
// refuses the API key (*AuthError: the stage stops at once, what was in flight is redelivered later).
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if len(cfg.Kafka.Brokers) == 0 {
		return errors.New("generate: no Kafka brokers")
	}
	kcl, err := kafka.NewClient(cfg.Kafka)
	if err != nil {
		return err
	}
	defer kcl.Close()
	if err := kcl.Admin().EnsureTopics(ctx, topics.TopicTokenized, topics.TopicGenerated, topics.TopicRejected); err != nil {
		return err
	}
	if err := kcl.Admin().EnsureCompactedTopic(ctx, topics.TopicShards); err != nil {
		return err
	}

	// A fatal Controller error (a server refusing the API key) stops the stage as a shutdown does, without
	// the grace period: nothing in flight can finish.
	ctl, err := admission.NewController(cfg.admission())
	if err != nil {
		return err
	}
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		select {
		case <-ctl.Fatal():
			stopRun()
		case <-ctx.Done():
		}
	}()
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	go func() {
		select {
		case <-ctx.Done():
		case <-work.Done():
			return
		}
		if ctl.Err() != nil {
			stopWork()
			return
		}
		if cfg.ShutdownGrace > 0 {
			t := time.NewTimer(cfg.ShutdownGrace)
			defer t.Stop()
			select {
			case <-t.C:
			case <-work.Done():
			}
		}
		stopWork()
	}()

	s := &stage{
		cfg:    cfg,
		log:    cfg.Logger.With("stage", "generate"),
		ctl:    ctl,
		met:    newStageMetrics(cfg.Registerer),
		gen:    kcl.NewProducer(topics.TopicGenerated, kafka.ProducerConfig{}),
		dead:   kcl.NewDeadLetters("generate"),
		shards: newShardsView(cfg.Logger.With("stage", "generate")),
		work:   work,
	}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	followDone := make(chan struct{})
	go func() { defer close(followDone); s.shards.follow(followCtx, kcl) }()
	defer func() { stopFollow(); <-followDone }()
	ctlCtx, stopCtl := context.WithCancel(context.WithoutCancel(ctx))
	ctlDone := make(chan struct{})
	go func() { defer close(ctlDone); _ = ctl.Run(ctlCtx) }()

	cons := kcl.NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{
		Group:         cfg.Group,
		MaxInFlight:   cfg.MaxInFlight,
		DrainTimeout:  cfg.ShutdownGrace + ackDrainTime,
		RevokeTimeout: cfg.RevokeTimeout,
	})
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
	s.log.Info("generate stage started", "endpoints", cfg.Endpoints, "policy", ctl.Config().Policy, "group", cfg.Group,
		"max_in_flight", cfg.MaxInFlight)
	runErr := cons.Run(ctx, s.handle)

	// The consumer has committed what finished. Abandon what is left, then flush the producers.
	stopWork()
	s.workers.Wait()
	var errs []error
	if err := s.gen.Close(); err != nil {
		errs = append(errs, fmt.Errorf("generate: close %s producer: %w", topics.TopicGenerated, err))
	}
	if err := s.dead.Close(); err != nil {
		errs = append(errs, fmt.Errorf("generate: close %s producer: %w", topics.TopicRejected, err))
	}
	stopCtl()
	<-ctlDone
	s.log.Info("generate stage stopped")
	if err := ctl.Err(); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	return errors.Join(errs...)
}

// handle starts the work of one delivery; it is called from the consumer's goroutine and returns at once.
func (s *stage) handle(d *kafka.Delivery) {
	var t topics.Tokenized
	if err := topics.Unmarshal(d.Message.Value, &t); err != nil {
		s.reject(d, &topics.Rejection{ID: string(d.Message.Key), Class: "undecodable", Reason: "undecodable tokenized record: " + err.Error(),
			Payload: d.Message.Value})
		return
	}
	if len(t.InputIDs) == 0 {
		s.reject(d, &topics.Rejection{ID: t.ID, Dataset: t.Dataset, Source: t.Source, Class: "empty_prompt", Reason: "empty prompt (no input_ids)"})
		return
	}
	lane := s.ctl.ResolveLane(t.Dataset, t.Sampling.Lane)
	sampling := s.cfg.Override.Apply(t.Sampling)
	sampling.MaxNewTokens = s.ctl.MaxNewTokens(sampling.MaxNewTokens, lane)
	sampling.Lane = lane.Name
	if t.Continuation && !sameSampling(sampling, t.Sampling) {
		// A later turn built from a generation made with other settings: a replay of the tokenized topic
		// with other sampling (or lanes) reads the previous run's continuations too. This run builds its
		// own later turns from its own replies; the old one belongs to the old run.
		s.met.records.WithLabelValues("stale_turn").Inc()
		s.log.Debug("later turn of a run with other settings skipped", "id", t.ID, "turn", t.Turn, "at", d.Where())
		d.Done()
		return
	}
	if epoch, ok := s.shards.holds(topics.RunFingerprint(t.Model, t.TokenizerHash, sampling), t.ID, t.Turn); ok {
		// Already in the sink's shards: no request. The sink gets a record that says so, with the thread, and
		// sends the conversation's next turn from the reply its shards recorded where that is needed.
		s.log.Debug("turn already in the shards, not generated again", "id", t.ID, "turn", t.Turn, "at", d.Where())
		s.emit(d, &topics.Generation{ID: t.ID, Dataset: t.Dataset, Turn: t.Turn, Sampling: sampling, Source: t.Source,
			Model: t.Model, TokenizerHash: t.TokenizerHash, Thread: t.Thread, InShards: epoch}, "in_shards")
		return
	}
	req := &admission.Request{
		RID:      admission.RequestID(t.ID, t.Turn),
		Key:      admission.LengthKey{Dataset: t.Dataset, Lane: lane.Name},
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
	// A record whose partition is being given up starts no request; one already running is stopped (and
	// aborted on its server) once the partition is gone, since its next owner generates it again.
	req.StartBy = d.Revoking()
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		ctx, cancel := context.WithCancel(s.work)
		defer cancel()
		defer context.AfterFunc(d.Lost(), cancel)()
		res, err := s.ctl.Do(ctx, req)
		var rej *admission.RejectedError
		switch {
		case err == nil:
			g := generation(&t, sampling, res)
			if t.Thread != nil {
				s.met.turns.WithLabelValues(g.StopReason).Inc()
				if g.StopReason != topics.StopContinued && g.StopReason != topics.StopEnd {
					s.log.Info("conversation ends at this turn", "id", t.ID, "turn", t.Turn, "stop_reason", g.StopReason, "detail", g.StopDetail)
				}
			}
			s.met.cachedTokens.Add(float64(g.Meta.CachedTokens))
			s.emit(d, g, "generated")
		case errors.As(err, &rej):
			s.log.Info("request rejected", "id", t.ID, "dataset", t.Dataset, "reason", rej.Reason, "at", d.Where())
			s.reject(d, &topics.Rejection{ID: t.ID, Dataset: t.Dataset, Source: t.Source, Class: "server_rejected", Reason: rej.Reason})
		default:
			// Abandoned on shutdown or handed over on a rebalance (ErrNotStarted, or stopped once its partition
			// was lost): its slot is freed at once (the consumer need not wait out its drain timeout) and its
			// offset is never committed, so the record is redelivered.
			s.log.Debug("request abandoned", "id", t.ID, "at", d.Where(), "err", err)
			d.Abandon()
		}
	}()
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

// emit writes a Generation and marks d Done once it is acknowledged, counting it in records under result. A write that fails is retried while the
// stage works (Producer.SendRetrying); at shutdown d stays unfinished and is redelivered. A generation over
// the message limit can never be written: it is dead-lettered instead of stalling the partition.
func (s *stage) emit(d *kafka.Delivery, g *topics.Generation, result string) {
	s.gen.SendRetrying(s.work, g.ID, g, func(err error) {
		switch {
		case err == nil:
			s.met.records.WithLabelValues(result).Inc()
			d.Done()
		case kafka.IsRecordTooLarge(err):
			s.log.Warn("generation too large for the topic", "id", g.ID, "at", d.Where(), "err", err)
			s.reject(d, &topics.Rejection{ID: g.ID, Dataset: g.Dataset, Source: g.Source, Class: "too_large", Reason: err.Error()})
		default:
			s.log.Warn("output not written before shutdown; record will be redelivered", "at", d.Where(), "err", err)
			d.Abandon()
		}
	})
}

// reject dead-letters d's record (kafka.DeadLetters: retried while the stage works) and marks d Done once the
// dead letter is acknowledged, or abandons it at shutdown.
func (s *stage) reject(d *kafka.Delivery, r *topics.Rejection) {
	s.dead.Reject(s.work, d, r, func(err error) {
		if err != nil {
			d.Abandon()
			return
		}
		s.met.records.WithLabelValues("rejected").Inc()
		d.Done()
	})
}

// sameSampling reports whether two sampling settings are the same (as JSON: pointers and maps by value).
func sameSampling(a, b topics.Sampling) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}
