package sink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
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
	j, recovered, err := openJournal(s.cfg.Dir, s.st.nextKey, s.log)
	if err != nil {
		return closeAll, err
	}
	s.j = j
	closers = append(closers, func() error { j.close(); return nil })
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

// newSinker returns the state of one Run, before the journal is opened. life is the record lifecycle (its dead
// letters), prompts where next turns go (tests that feed records without Kafka pass nil).
func newSinker(ctx context.Context, cancel context.CancelFunc, cfg Config, log *slog.Logger, st *store, life *stream.Stage,
	prompts *stream.Output) *sinker {
	return &sinker{cfg: cfg, log: log, st: st, life: life, prompts: prompts, ctx: ctx, cancel: cancel, met: newSinkMetrics(cfg.Registerer),
		parts: map[partKey]*partState{}, lastRecv: cfg.now(), lastSync: cfg.now(), turns: map[string]int64{}}
}

// delivery is one consumed generation in the record lifecycle.
type delivery = stream.Record[topics.Generation]

// waiter is a delivery waiting behind a dead letter in flight, with its own rejection when it did not decode.
type waiter struct {
	d           *delivery
	undecodable *topics.Rejection
}

// result is what the run did so far. Called with s.mu held.
func (s *sinker) result() Result {
	return Result{Duplicates: s.duplicates, InShards: s.inShardsN, Turns: maps.Clone(s.turns)}
}

// partState is what the sink holds for one topic partition since its last flush.
type partState struct {
	key        partKey
	next       int64 // first offset not yet in a shard
	seen       int64 // last offset absorbed (written to the buffer, dropped as duplicate, or rejected)
	first      int64 // first offset absorbed since the last flush, -1 if none
	rows       []bufferedRow
	deliveries []*delivery // acknowledged at the next flush
	bytes      int64
	oldest     time.Time
	blocked    bool // a rejection failed: nothing at or after its offset may be absorbed
	failed     bool // a flush failed: the buffer must not be acknowledged

	rejecting bool     // a dead letter is in flight: nothing after its offset may be absorbed yet
	waiting   []waiter // deliveries that arrived while rejecting, in order

	// emitting counts next-turn prompts of absorbed rows not yet acknowledged by the broker; a flush waits
	// for them before its commit point, so a turn in a shard always has its next turn in the prompts topic.
	emitting sync.WaitGroup
	emitMu   sync.Mutex
	emitErr  error // the first next turn that could not be written
}

type bufferedRow struct {
	run *runState
	row *row
}

// sinker is the state of one Run.
type sinker struct {
	cfg      Config
	log      *slog.Logger
	st       *store
	life     *stream.Stage   // dead letters and the records' outcomes
	prompts  *stream.Output  // next turns
	index    *shardsIndex    // publishes what the shards hold (topics.TopicShards)
	announce *announcer      // announces committed shards (topics.TopicShardFiles), when Config.AnnounceShards
	ctx      context.Context // the run's: dead letters and next turns are retried while it lasts
	met      *sinkMetrics
	cancel   context.CancelFunc

	j *journal

	mu       sync.Mutex
	parts    map[partKey]*partState
	stopped  bool
	err      error
	nrows    int
	nbytes   int64
	lastRecv time.Time
	lastSync time.Time // of the journal; used by the timer goroutine only

	// What this Run did (Result).
	duplicates, inShardsN int64
	turns                 map[string]int64
}

func (s *sinker) part(pk partKey) *partState {
	p := s.parts[pk]
	if p == nil {
		next := s.st.next(pk)
		p = &partState{key: pk, next: next, seen: next - 1, first: -1}
		s.parts[pk] = p
	}
	return p
}

// fail records a fatal error and stops the run. Called with s.mu held.
func (s *sinker) fail(err error) {
	if s.err == nil {
		s.err = err
		s.log.Error("sink failed; stopping", "err", err)
	}
	s.cancel()
}

// handle takes one decoded delivery from the consumer.
func (s *sinker) handle(d *delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handleLocked(d, nil)
}

// undecodable takes a delivery that does not decode, with its rejection: it is dead-lettered in its partition's
// order, as an invalid one is.
func (s *sinker) undecodable(d *delivery, rej *topics.Rejection) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handleLocked(d, rej)
}

// handleLocked is handle with s.mu held; undecodable is the rejection of a delivery that did not decode (nil:
// it did).
func (s *sinker) handleLocked(d *delivery, undecodable *topics.Rejection) {
	if s.stopped || s.err != nil {
		d.Abandon()
		return
	}
	m := d.Message()
	p := s.part(partKey{m.Topic, m.Partition})
	if p.blocked {
		d.Abandon()
		return
	}
	if p.rejecting {
		// Absorbing a later offset would let a flush checkpoint past the dead letter before it is durable.
		p.waiting = append(p.waiting, waiter{d, undecodable})
		return
	}
	s.lastRecv = s.cfg.now()
	if m.Offset < p.next {
		// Already in a shard on disk: the group's committed offset lagged behind our recovery point.
		d.Finish(stream.Outcome{Result: resultCovered})
		return
	}
	if m.Offset <= p.seen {
		// The consumer rewound over offsets absorbed since the last flush (or recovered from the journal);
		// they are resolved (and were counted) by that flush.
		p.deliveries = append(p.deliveries, d)
		return
	}
	g := d.Value
	switch {
	case undecodable != nil:
		s.reject(p, d, undecodable)
	case g.InShards != "":
		s.inShards(p, m.Offset, m.Value, d, g, nil)
	default:
		if reason := validate(g); reason != "" {
			s.reject(p, d, d.Rejection("invalid", reason))
			return
		}
		s.absorbValid(p, m.Offset, m.Value, g, d)
	}
}

// absorbValid takes the valid generation g, consumed at offset off of p, and flushes what is then due: the
// partition at RotateRows or RotateBytes, the largest buffers while all of them hold more than the sink may.
// d is nil only for records a test feeds without a consumer. Called with s.mu held.
func (s *sinker) absorbValid(p *partState, off int64, value []byte, g *topics.Generation, d *delivery) {
	if err := s.take(p, off, value, g, d, nil); err != nil {
		s.fail(err)
		if d != nil {
			d.Abandon()
		}
		return
	}
	if len(p.rows) >= s.cfg.RotateRows || p.bytes >= s.cfg.RotateBytes {
		if s.flush(p) != nil {
			return
		}
	}
	s.flushOverBudget()
}

// flushOverBudget flushes the largest buffers while the buffers together hold more than the sink may. Called
// with s.mu held.
func (s *sinker) flushOverBudget() {
	for s.nrows >= s.cfg.MaxBufferedRows || s.nbytes >= s.cfg.MaxBufferedBytes {
		var big *partState
		for _, q := range s.parts {
			if len(q.rows) > 0 && (big == nil || q.bytes > big.bytes) {
				big = q
			}
		}
		if big == nil || s.flush(big) != nil {
			return
		}
	}
}

// take absorbs the valid generation g, consumed at offset off of p with the Kafka value value: as a row of
// its run, or as a duplicate of a row already written or buffered. d is its delivery, Done once the outcome
// is durable. replayed is nil for a consumed record, which take first appends to the journal; when the
// journal is replayed at start it holds the offsets whose next turn the broker already acknowledged (d is
// then nil). Called with s.mu held; returns a fatal error.
func (s *sinker) take(p *partState, off int64, value []byte, g *topics.Generation, d *delivery, replayed map[int64]bool) error {
	live := replayed == nil
	key := s.st.key(p.key)
	rs := s.st.run(RunOf(g))
	k := rowKey{g.ID, int32(g.Turn)}
	dupW, win, err := rs.written(k)
	if err != nil {
		return fmt.Errorf("sink: id index of %s: %w", rs.dir, err)
	}
	_, dupB := rs.buffered[k]
	if dupW || dupB {
		// The copy in the shards continued its conversation from another incarnation of the generated topic (a
		// new embedded broker, a topic recreated): the prompts topic of that incarnation, and the next turn in
		// it, may be gone. Send the next turn again, built from the copy in the shards.
		again := dupW && win.continued && win.log != key.log
		if live {
			kind, v := jSkip, []byte(nil)
			if again {
				kind, v = jRecord, value // replayed, it sends the next turn again unless acknowledged
			}
			if err := s.j.append(key, kind, off, v, ""); err != nil {
				return err
			}
			s.duplicates++
			if d != nil {
				d.Settle(stream.Outcome{Result: resultDuplicate})
			}
			s.log.Debug("duplicate dropped", "id", g.ID, "turn", g.Turn, "run", rs.info.DirName(), "at", fmt.Sprintf("%s/%d@%d", p.key.topic, p.key.partition, off))
		}
		s.absorb(p, off)
		if again {
			if live || !replayed[off] {
				if err := s.reemit(p, off, g, win); err != nil {
					return err
				}
			}
			if d != nil {
				p.deliveries = append(p.deliveries, d) // Done at the next flush, after the next turn was acknowledged
			}
			return nil
		}
		if d != nil {
			d.Ack()
		}
		// Only a copy already in a shard is reported, and only when it ended its conversation: a buffered
		// original is reported by OnDurable once its flush is durable.
		if live && dupW && !win.continued && s.cfg.OnDuplicate != nil {
			s.cfg.OnDuplicate(g.ID)
		}
		return nil
	}
	r, err := rowOf(g)
	if err != nil {
		return err
	}
	if live {
		// In the journal before its next turn is sent: a later turn is never durable without this one.
		ended := ""
		if r.stopReason != topics.StopContinued {
			ended = r.id
		}
		if err := s.j.append(key, jRecord, off, value, ended); err != nil {
			return err
		}
	}
	if next, ok := g.Next(); ok && (live || !replayed[off]) {
		s.emit(p, off, &next)
	}
	rs.buffered[k] = struct{}{}
	s.absorb(p, off)
	if len(p.rows) == 0 {
		p.oldest = s.cfg.now()
	}
	p.rows = append(p.rows, bufferedRow{rs, r})
	if d != nil {
		d.Settle(stream.Outcome{Result: resultWritten, Tokens: len(r.prompt) + len(r.output)})
		p.deliveries = append(p.deliveries, d)
	}
	b := r.memBytes()
	p.bytes += b
	s.nrows++
	s.nbytes += b
	s.met.bufferedRows.Inc()
	return nil
}

// rowOf is the shard row of a valid generation.
func rowOf(g *topics.Generation) (*row, error) {
	r := &row{id: g.ID, dataset: g.Dataset, finishReason: g.Meta.FinishReason, endpoint: g.Meta.Endpoint,
		turn: int32(g.Turn), prompt: g.PromptIDs, output: g.OutputIDs, stopReason: cmp.Or(g.StopReason, topics.StopEnd)}
	if g.Reply != nil {
		reply, err := json.Marshal(g.Reply)
		if err != nil {
			return nil, fmt.Errorf("sink: encode the reply of %s turn %d: %w", g.ID, g.Turn, err)
		}
		r.reply = string(reply)
	}
	return r, nil
}

func (s *sinker) absorb(p *partState, off int64) {
	if p.first < 0 {
		p.first = off
	}
	p.seen = off
}

// emit writes next (a conversation's next turn, built from the row at offset off of p) to the prompts topic,
// retrying while the run lasts, and records its acknowledgement in the journal. It does not wait for a flush:
// the partition's next flush waits for it before its commit point. A next turn over the message limit is
// dead-lettered (the conversation ends there, its turns so far in the shards); any other failure fails that
// flush, so the row is written again, and its next turn sent again, after a restart. Called with s.mu held.
func (s *sinker) emit(p *partState, off int64, next *topics.Prompt) {
	key := s.st.key(p.key)
	p.emitting.Add(1)
	s.prompts.Send(next.ID, next, func(err error) {
		if err == nil {
			s.met.continuations.Inc()
			s.j.emitted(key, off)
			p.emitting.Done()
			return
		}
		if !kafka.IsRecordTooLarge(err) {
			p.emitFailed(fmt.Errorf("sink: write turn %d of %s to the prompts topic: %w", next.Turn, next.ID, err))
			p.emitting.Done()
			return
		}
		rej := &topics.Rejection{ID: next.ID, Dataset: next.Dataset, Source: next.Source, Class: stream.TooLarge,
			Reason: fmt.Sprintf("turn %d of conversation %s cannot be sent: %v; the conversation ends at turn %d", next.Turn, next.ID, err, next.Turn-1)}
		s.life.DeadLetter(rej, func(err error) {
			if err != nil {
				p.emitFailed(fmt.Errorf("sink: dead-letter turn %d of %s: %w", next.Turn, next.ID, err))
			} else {
				s.life.Count(stream.Outcome{Result: stream.Rejected, Class: stream.TooLarge})
			}
			p.emitting.Done()
		})
	})
}

func (p *partState) emitFailed(err error) {
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	if p.emitErr == nil {
		p.emitErr = err
	}
}

// reemit sends the next turn of a duplicate (at offset off of p) whose copy in the shards (win) continued its
// conversation: the duplicate's own thread (every copy of a turn has the same) with the reply of the copy in
// the shards. Called with s.mu held.
func (s *sinker) reemit(p *partState, off int64, g *topics.Generation, win winner) error {
	var reply topics.Message
	if err := json.Unmarshal(win.reply, &reply); err != nil {
		return fmt.Errorf("sink: id index of %s turn %d holds a reply that does not decode: %w", g.ID, g.Turn, err)
	}
	c := *g
	c.Reply, c.StopReason = &reply, topics.StopContinued
	if next, ok := c.Next(); ok {
		s.log.Debug("next turn sent again from the reply in the shards", "id", g.ID, "turn", next.Turn)
		s.emit(p, off, &next)
	}
	return nil
}

// inShards takes a turn generate did not send to a server because topics.TopicShards said the shards hold it
// (g.InShards: no token ids, the thread only), consumed at offset off of p with the Kafka value value. If the
// run's shards hold it, it is counted as already in the shards (not as redone work); when the row in the
// shards continued its conversation, the next turn is sent again from the reply the shards recorded, so a
// conversation whose first k turns are in the shards resumes at turn k; when it ended its conversation,
// Config.OnDuplicate reports it. If they do not hold it (the shards topic spoke for another directory, or of
// rows since deleted), nothing can make the row here: the turn is dead-lettered with the reason, to be
// replayed. As take, it journals what it absorbs; replayed is nil except when the journal is replayed at
// start (d is then nil). Called with s.mu held.
func (s *sinker) inShards(p *partState, off int64, value []byte, d *delivery, g *topics.Generation, replayed map[int64]bool) {
	live := replayed == nil
	info := RunOf(g)
	k := rowKey{g.ID, int32(g.Turn)}
	var dupW, dupB bool
	var win winner
	if rs := s.st.runs[info.Fingerprint]; rs != nil && g.Turn >= 0 && g.Turn <= math.MaxInt32 {
		var err error
		if dupW, win, err = rs.written(k); err != nil {
			s.fail(fmt.Errorf("sink: id index of %s: %w", rs.dir, err))
			if d != nil {
				d.Abandon()
			}
			return
		}
		_, dupB = rs.buffered[k]
	}
	if !dupW && !dupB {
		if !live {
			s.absorb(p, off) // taken in before the restart; what happened to the rows since is not this one's
			return
		}
		why := "the epoch is another sink start's: a sink of another output directory, or rows since deleted"
		if g.InShards == s.index.epochID() {
			why = "the epoch is this sink's own: rows deleted while it ran"
		}
		s.reject(p, d, d.Rejection("not_in_shards", fmt.Sprintf("generate skipped turn %d of %s as already in the shards (epoch %s of "+
			"the shards topic), but the shards of run %s in %s do not hold it (%s); replay the generate stage to generate it",
			g.Turn, g.ID, g.InShards, info.DirName(), s.cfg.Dir, why)))
		return
	}
	again := dupW && win.continued
	if live {
		kind, v := jSkip, []byte(nil)
		if again {
			kind, v = jRecord, value // replayed, it sends the next turn again unless acknowledged
		}
		if err := s.j.append(s.st.key(p.key), kind, off, v, ""); err != nil {
			s.fail(err)
			if d != nil {
				d.Abandon()
			}
			return
		}
		s.inShardsN++
		if d != nil {
			d.Settle(stream.Outcome{Result: resultInShards})
		}
		s.log.Debug("turn already in the shards", "id", g.ID, "turn", g.Turn, "run", info.DirName(), "at", fmt.Sprintf("%s/%d@%d", p.key.topic, p.key.partition, off))
	}
	s.absorb(p, off)
	if again {
		// Whichever topics carried the next turn before (lost ones, or these, then still in flight or long in
		// the shards), it is sent again from the recorded reply: a next turn in the shards comes back as an
		// in-shards record too, so the conversation is followed to its end at no GPU cost, and one that is
		// not resumes there.
		if live || !replayed[off] {
			if err := s.reemit(p, off, g, win); err != nil {
				s.fail(err)
				if d != nil {
					d.Abandon()
				}
				return
			}
		}
		if d != nil {
			p.deliveries = append(p.deliveries, d) // Done at the next flush, after the next turn was acknowledged
		}
		return
	}
	if d != nil {
		d.Ack()
	}
	if live && dupW && !win.continued && s.cfg.OnDuplicate != nil {
		s.cfg.OnDuplicate(g.ID)
	}
}

// validate returns why a generation cannot become a training row, or "".
func validate(g *topics.Generation) string {
	switch {
	case g.ID == "":
		return "generation has no id"
	case g.Turn < 0 || g.Turn > math.MaxInt32:
		return fmt.Sprintf("turn %d out of range", g.Turn)
	case len(g.PromptIDs) == 0:
		return "empty prompt: no prompt token ids"
	case len(g.OutputIDs) == 0:
		return "empty completion: no output token ids"
	case g.Meta.FinishReason == "abort":
		return "generation was aborted"
	case g.StopReason != "" && !slices.Contains(topics.StopReasons, g.StopReason):
		return fmt.Sprintf("unknown stop reason %q", g.StopReason)
	case g.StopReason == topics.StopContinued && !g.Continues():
		return "stop reason continued, but the record has no reply or no next turn to build"
	case int64(len(g.PromptIDs))+int64(len(g.OutputIDs)) > math.MaxInt32:
		return "sequence longer than an int32 can count"
	}
	if id, ok := checkTokenRange(g.PromptIDs); !ok {
		return fmt.Sprintf("prompt token id %d does not fit int32", id)
	}
	if id, ok := checkTokenRange(g.OutputIDs); !ok {
		return fmt.Sprintf("output token id %d does not fit int32", id)
	}
	return ""
}

// reject dead-letters a delivery (the lifecycle's dead letters: retried while the run lasts). Called with s.mu
// held; it does not wait for the broker. Until the dead letter is acknowledged the partition absorbs nothing
// after it (later deliveries wait in p.waiting), so no flush checkpoints past it; on the acknowledgement the
// delivery is absorbed and finished as rejected, and the waiting ones are handled. If the run ends first, the
// partition stops there: the delivery and those waiting behind it are abandoned and redelivered after a restart.
func (s *sinker) reject(p *partState, d *delivery, rej *topics.Rejection) {
	p.rejecting = true
	d.DeadLetter(rej, func(err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.rejectDone(p, d, rej.Class, err)
	})
}

// rejectDone settles a dead letter (err nil: acknowledged; else the run ended first). Called with s.mu held.
func (s *sinker) rejectDone(p *partState, d *delivery, class string, err error) {
	p.rejecting = false
	waiting := p.waiting
	p.waiting = nil
	if err != nil {
		p.blocked = true
		d.Abandon()
		for _, w := range waiting {
			w.d.Abandon()
		}
		s.log.Info("dead letter not written before the sink stopped; redelivered after a restart", "at", d.Where(), "err", err)
		return
	}
	if err := s.j.append(s.st.key(p.key), jSkip, d.Message().Offset, nil, ""); err != nil {
		s.fail(err)
		d.Abandon()
		for _, w := range waiting {
			w.d.Abandon()
		}
		return
	}
	s.absorb(p, d.Message().Offset)
	d.Finish(stream.Outcome{Result: stream.Rejected, Class: class})
	for _, w := range waiting {
		s.handleLocked(w.d, w.undecodable) // waits again behind the next dead letter, if it makes one
	}
}

// flush makes everything p absorbed durable and acknowledges its deliveries. Called with s.mu held.
func (s *sinker) flush(p *partState) error {
	if p.failed {
		return errors.New("sink: partition already failed")
	}
	if len(p.rows) == 0 && len(p.deliveries) == 0 && p.seen < p.next {
		return nil
	}
	start := time.Now()
	// Every next turn of the buffered rows must be in the prompts topic before the commit point.
	p.emitting.Wait()
	p.emitMu.Lock()
	emitErr := p.emitErr
	p.emitMu.Unlock()
	if emitErr != nil {
		p.failed = true
		if s.stopped && errors.Is(emitErr, context.Canceled) {
			// Shutting down with a next turn unsent: the partition's records are redelivered after a restart,
			// and the turn is written, and its next turn sent, then. Not a failure of the run.
			return emitErr
		}
		s.fail(emitErr)
		return emitErr
	}
	var shards []committedShard
	if len(p.rows) > 0 {
		var groups []runRows
		idx := map[*runState]int{}
		for _, br := range p.rows {
			i, ok := idx[br.run]
			if !ok {
				i = len(groups)
				idx[br.run] = i
				groups = append(groups, runRows{run: br.run})
			}
			groups[i].rows = append(groups[i].rows, br.row)
		}
		var err error
		shards, err = s.st.commitFlush(p.key, p.first, p.seen, groups, s.cfg.RowGroupRows)
		if err != nil {
			p.failed = true
			s.fail(err)
			return err
		}
	} else if p.seen >= p.next {
		s.st.advance(p.key, p.seen+1)
		if err := s.st.writeCheckpoint(); err != nil {
			p.failed = true
			s.fail(fmt.Errorf("sink: write checkpoint: %w", err))
			return err
		}
	}
	// Committed: the journal's records of the partition are in shards now.
	s.j.retire(s.st.key(p.key))
	p.next = p.seen + 1
	for _, br := range p.rows {
		s.met.turns.WithLabelValues(br.row.stopReason).Inc()
		s.turns[br.row.stopReason]++
	}
	for _, sh := range shards {
		s.index.publish(sh.run.info.Fingerprint, sh.keys)
		s.announce.publish(sh.run.dir, sh.run.info.Fingerprint, sh.entry)
		s.met.rowsWritten.Add(float64(sh.entry.Rows))
		s.met.tokensWritten.Add(float64(sh.entry.Tokens))
		s.met.shardsWritten.Inc()
		s.met.shardBytes.Add(float64(sh.entry.Bytes))
	}
	for _, br := range p.rows {
		delete(br.run.buffered, rowKey{br.row.id, br.row.turn})
	}
	for _, d := range p.deliveries {
		d.Ack()
	}
	s.nrows -= len(p.rows)
	s.nbytes -= p.bytes
	s.met.bufferedRows.Sub(float64(len(p.rows)))
	nrows := len(p.rows)
	p.rows, p.deliveries, p.bytes, p.first = nil, nil, 0, -1
	s.met.flushSeconds.Observe(time.Since(start).Seconds())
	for _, sh := range shards {
		s.log.Info("shard written", "run", sh.run.info.DirName(), "shard", sh.entry.File, "rows", sh.entry.Rows,
			"tokens", sh.entry.Tokens, "bytes", sh.entry.Bytes)
		if s.cfg.OnDurable != nil {
			s.cfg.OnDurable(sh.ids)
		}
	}
	if nrows == 0 {
		s.log.Debug("offsets checkpointed", "topic", p.key.topic, "partition", p.key.partition, "next", p.next)
	}
	return nil
}

// timer fsyncs the journal and flushes buffers that are due, and flushes everything when ctx ends.
func (s *sinker) timer(ctx context.Context) {
	every := min(s.cfg.JournalSync, time.Second)
	if s.cfg.RotateInterval > 0 {
		every = min(every, s.cfg.RotateInterval/4)
	}
	if s.cfg.IdleFlush > 0 {
		every = min(every, s.cfg.IdleFlush/2)
	}
	every = max(every, 20*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.stop()
			return
		case <-t.C:
			if s.cfg.now().Sub(s.lastSync) >= s.cfg.JournalSync {
				s.syncJournal()
			}
			s.flushDue()
		}
	}
}

// syncJournal fsyncs the journal and reports the rows it made durable.
func (s *sinker) syncJournal() {
	start := time.Now()
	s.lastSync = s.cfg.now()
	ids, n, err := s.j.sync()
	if err != nil {
		s.mu.Lock()
		s.fail(err)
		s.mu.Unlock()
		return
	}
	if n > 0 {
		s.met.journalBytes.Add(float64(n))
		s.met.journalSyncSeconds.Observe(time.Since(start).Seconds())
	}
	if len(ids) > 0 && s.cfg.OnJournaled != nil {
		s.cfg.OnJournaled(ids)
	}
}

func (s *sinker) flushDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.err != nil {
		return
	}
	now := s.cfg.now()
	idle := s.cfg.IdleFlush > 0 && now.Sub(s.lastRecv) >= s.cfg.IdleFlush
	for _, p := range s.parts {
		due := s.cfg.RotateInterval > 0 && len(p.rows) > 0 && now.Sub(p.oldest) >= s.cfg.RotateInterval
		if idle && (len(p.rows) > 0 || len(p.deliveries) > 0 || p.seen >= p.next) {
			due = true
		}
		if len(p.deliveries) > 0 && closed(p.deliveries[0].Revoking()) {
			// A rebalance takes the partition away once its deliveries are done (or after the consumer's
			// RevokeTimeout): flush now, so the group commits what this sink wrote and the next owner starts
			// after it instead of writing it again into its own directory.
			due = true
		}
		if due && s.flush(p) != nil {
			return
		}
	}
}

// closed reports whether c is closed (a nil c never is).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// stop flushes every buffer; what cannot be flushed is abandoned, to be redelivered after a restart.
func (s *sinker) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for _, p := range s.parts {
		if s.err == nil || !p.failed {
			if err := s.flush(p); err == nil {
				continue
			}
		}
		for _, d := range p.deliveries {
			d.Abandon()
		}
		p.deliveries = nil
	}
	// Deliveries waiting behind a dead letter in flight are redelivered after a restart; the dead letter's
	// own delivery is settled by its acknowledgement (the consumer's drain waits for it).
	for _, p := range s.parts {
		for _, w := range p.waiting {
			w.d.Abandon()
		}
		p.waiting = nil
	}
}
