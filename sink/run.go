package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// Result is what one Run did, counted for that Run alone (two sinks in one process each count their own).
type Result struct {
	// Duplicates counts generations dropped because their (id, turn) was already written or buffered for their
	// run (a rebalance or crash handed in-flight or uncommitted work to another replica, a retry, or a prompt
	// ingested again while its first copy was still being generated): GPU work done twice.
	Duplicates int64
	// InShards counts turns generate did not send to a server because the shards topic said the shards hold
	// them, found in the shards: no work done twice.
	InShards int64
	// Turns counts the rows made durable in shards (journal recovery included), by stop reason
	// (topics.StopReasons).
	Turns map[string]int64
}

// The results of the sink's records (draftflow_records_total{stage="sink"}), besides stream.Rejected. A record is
// counted when it is taken in (a row is then in the journal, durable at its next sync); it is acknowledged when
// the flush that makes it part of a shard commits.
const (
	resultWritten   = "written"   // a row of its run
	resultDuplicate = "duplicate" // its (id, turn) was already written or buffered for its run: work done twice
	resultInShards  = "in_shards" // generate skipped it as already in the shards, and they hold it
	resultCovered   = "covered"   // its offset is already in a shard on disk (the group's commit lagged)
)

// Run consumes the generated topic and writes shards under cfg.Dir until ctx is done; it then flushes what it
// holds, lets the consumer commit, and returns what it did. It returns an error when it cannot recover cfg.Dir,
// when a flush fails, or when Kafka refuses its writes; everything not yet durable is then left for the next
// start. Its records live in the lifecycle of package kafka/stream, acknowledged when their shard commits.
func Run(ctx context.Context, cfg Config) (_ Result, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return Result{}, err
	}
	kcl := cfg.Client
	if kcl == nil {
		return Result{}, errors.New("sink: Config.Client is required")
	}
	st, tid, unlock, err := openDir(ctx, cfg, kcl.Admin())
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	defer st.close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	life := stream.New(runCtx, stream.Config{Client: kcl, Stage: "sink", Logger: cfg.Logger, Registerer: cfg.Registerer})
	defer life.Close()
	// The next turns of multi-turn conversations go back to the prompts topic, keyed by conversation id.
	s := newSinker(runCtx, cancel, cfg, cfg.Logger.With("stage", "sink"), st, life, life.Output(topics.TopicPrompts))
	closeAll, err := s.recover(runCtx, kcl)
	defer func() { err = errors.Join(err, closeAll()) }()
	if err != nil {
		return Result{}, err
	}
	cons := kcl.NewConsumer(topics.TopicGenerated, kafka.ConsumerConfig{Group: cfg.Group, MaxInFlight: cfg.MaxBufferedRows + 64})
	cfg.Ready.Add("sink", func() error {
		if cons.Assigned() == 0 {
			return errors.New("no partitions of the generated topic assigned")
		}
		return nil
	})
	s.log.Info("sink started", "dir", cfg.Dir, "group", cfg.Group, "runs", len(st.runs), "rotate_rows", cfg.RotateRows,
		"rotate_interval", cfg.RotateInterval, "idle_flush", cfg.IdleFlush, "journal_sync", cfg.JournalSync, "topic_id", tid)
	timerDone := make(chan struct{})
	go func() { defer close(timerDone); s.timer(runCtx) }()
	cerr := stream.Consume(runCtx, life, stream.Options[topics.Generation]{Undecodable: s.undecodable}, s.handle, cons)
	cancel()
	<-timerDone
	closeErr := life.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.result(), s.err
	case cerr != nil:
		return s.result(), fmt.Errorf("sink: %w", cerr)
	case closeErr != nil:
		return s.result(), closeErr
	}
	s.log.Info("sink stopped")
	return s.result(), nil
}

// openDir locks cfg.Dir (creating it) and opens its store, set up for the consumed topic, whose ID it returns.
func openDir(ctx context.Context, cfg Config, admin *kafka.Admin) (*store, string, func(), error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, "", nil, fmt.Errorf("sink: %w", err)
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, "", nil, err
	}
	log := cfg.Logger.With("stage", "sink")
	st, err := openStore(ctx, cfg.Dir, log)
	if err != nil {
		unlock()
		return nil, "", nil, err
	}
	st.modelPath = cfg.ModelPath
	st.jobConfig = cfg.JobConfig
	tid, err := lookupTopicID(ctx, admin, topics.TopicGenerated, log)
	if err != nil {
		st.close()
		unlock()
		return nil, "", nil, err
	}
	st.setLog(cfg.Client.Config().Topic(topics.TopicGenerated), tid)
	st.zstd = cfg.ZstdLevel
	return st, tid, unlock, nil
}

// recover opens the journal, writes what it holds from another incarnation of the topic into shards, publishes
// what the shards hold (topics.TopicShards) and takes in the journal's records of this one. The returned
// function closes the publisher and the journal and returns the publisher's error closing (call it even when
// recover fails).
func (s *sinker) recover(ctx context.Context, kcl *kafka.Client) (func() error, error) {
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			if err := closers[i](); err != nil {
				errs = append(errs, fmt.Errorf("sink: %w", err))
			}
		}
		return errors.Join(errs...)
	}
	j, recovered, err := journal.Open(s.cfg.Dir, s.st.nextKey, s.log)
	if err != nil {
		return closeAll, err
	}
	s.j = j
	closers = append(closers, func() error { j.Close(); return nil })
	// Rows journaled from another incarnation of the topic go into shards first, so that what is published
	// next counts them as in the shards.
	if err := s.recoverJournal(recovered, false); err != nil {
		return closeAll, err
	}
	// What the shards hold, published for generate before anything is consumed (topics.TopicShards).
	index, err := seedShardsIndex(ctx, kcl, s.st, s.log)
	if err != nil {
		return closeAll, err
	}
	s.index = index
	closers = append(closers, index.Close)
	if s.cfg.AnnounceShards {
		a, err := startAnnouncer(ctx, kcl, s.cfg.Dir, s.log)
		if err != nil {
			return closeAll, err
		}
		s.announce = a
		closers = append(closers, a.Close)
	}
	if s.cfg.OnSeeded != nil {
		s.cfg.OnSeeded()
	}
	return closeAll, s.recoverJournal(recovered, true)
}

// lookupTopicID returns the ID of the consumed (logical) topic, waiting (until ctx ends) for the topic to exist.
func lookupTopicID(ctx context.Context, admin *kafka.Admin, topic string, log *slog.Logger) (string, error) {
	for attempt := 1; ; attempt++ {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := admin.TopicID(lctx, topic)
		cancel()
		if err == nil {
			if id == "" {
				log.Warn("the broker reports no topic IDs; a topic reset cannot be told from old offsets", "topic", topic)
			}
			return id, nil
		}
		if attempt%10 == 1 {
			log.Warn("waiting for the topic's metadata", "topic", topic, "err", err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("sink: topic ID of %s: %w", topic, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
