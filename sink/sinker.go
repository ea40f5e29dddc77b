package sink

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

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

	j *journal.Journal

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
	row *shard.WriteRow
}

// result is what the run did so far. Called with s.mu held.
func (s *sinker) result() Result {
	return Result{Duplicates: s.duplicates, InShards: s.inShardsN, Turns: maps.Clone(s.turns)}
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
	case g.StopReason != "" && !slices.Contains(topics.StopReasons(), g.StopReason):
		return fmt.Sprintf("unknown stop reason %q", g.StopReason)
	case g.StopReason == topics.StopContinued && !g.Continues():
		return "stop reason continued, but the record has no reply or no next turn to build"
	case !topics.KnownOrigin(g.Origin):
		return fmt.Sprintf("unknown origin %q", g.Origin)
	case int64(len(g.PromptIDs))+int64(len(g.OutputIDs)) > math.MaxInt32:
		return "sequence longer than an int32 can count"
	}
	if id, ok := shard.CheckTokenRange(g.PromptIDs); !ok {
		return fmt.Sprintf("prompt token id %d does not fit int32", id)
	}
	if id, ok := shard.CheckTokenRange(g.OutputIDs); !ok {
		return fmt.Sprintf("output token id %d does not fit int32", id)
	}
	return ""
}

// rowOf is the shard row of a valid generation.
func rowOf(g *topics.Generation) (*shard.WriteRow, error) {
	r := &shard.WriteRow{ID: g.ID, Dataset: g.Dataset, FinishReason: g.Meta.FinishReason, Endpoint: g.Meta.Endpoint,
		Turn: int32(g.Turn), Prompt: g.PromptIDs, Output: g.OutputIDs, StopReason: cmp.Or(g.StopReason, topics.StopEnd),
		Origin: topics.OriginOf(g.Origin)}
	if g.Reply != nil {
		reply, err := json.Marshal(g.Reply)
		if err != nil {
			return nil, fmt.Errorf("sink: encode the reply of %s turn %d: %w", g.ID, g.Turn, err)
		}
		r.Reply = string(reply)
	}
	return r, nil
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

// accountKey is the key a run accounts for a row by (topics.AccountKey): what OnDurable, OnJournaled and
// OnDuplicate report.
func accountKey(r *shard.WriteRow) string { return topics.AccountKey(r.ID, int(r.Turn), r.Origin) }

// memBytes estimates a buffered row's memory: 4 bytes per token plus 1 for its mask, plus strings.
func memBytes(r *shard.WriteRow) int64 {
	return int64(5*r.Tokens() + len(r.ID) + len(r.Dataset) + len(r.FinishReason) + len(r.Endpoint) + len(r.StopReason) + len(r.Reply) + 64)
}
