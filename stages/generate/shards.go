package generate

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/topics"
)

// DefaultShardsWait is the command line's --shards-wait: how long generate waits at start for a sink to say
// what its shards hold when no sink ever has on this namespace's shards topic.
const DefaultShardsWait = 30 * time.Second

// shardsView is what generate knows of the sink's shards: topics.TopicShards, followed from its first record
// (see its documentation for the epochs). Memory holds one entry per turn in the shards: its key (the run's
// fingerprint prefix, the turn and the id) and the epoch that published it.
type shardsView struct {
	mu       sync.RWMutex
	epochs   map[string]uint32 // epoch id -> index
	names    []string          // index -> epoch id
	latest   *topics.ShardsEpoch
	previous *topics.ShardsEpoch // the last complete epoch before latest
	turns    map[string]uint32   // topics.ShardKey -> index of the epoch that published it

	caughtUp chan struct{} // closed once the records on the topic at start are read
	changed  chan struct{} // poked when an epoch record arrives
	log      *slog.Logger
}

func newShardsView(log *slog.Logger) *shardsView {
	return &shardsView{epochs: map[string]uint32{}, turns: map[string]uint32{}, caughtUp: make(chan struct{}),
		changed: make(chan struct{}, 1), log: log}
}

// follow reads the topic until ctx ends; failures are logged and retried (generate then sends what it cannot
// look up, and the sink drops the copies).
func (v *shardsView) follow(ctx context.Context, kcl *kafka.Client) {
	var once sync.Once
	caught := func() { once.Do(func() { close(v.caughtUp) }) }
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := kcl.Follow(ctx, topics.TopicShards, v.apply, caught)
		if ctx.Err() != nil {
			return
		}
		if attempt%10 == 0 {
			v.log.Warn("cannot read the shards topic; turns already in the shards may be generated again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// epoch returns the index of an epoch id, adding it. Called with v.mu held.
func (v *shardsView) epoch(id string) uint32 {
	i, ok := v.epochs[id]
	if !ok {
		i = uint32(len(v.names))
		v.epochs[id] = i
		v.names = append(v.names, id)
	}
	return i
}

// apply takes one record of the topic.
func (v *shardsView) apply(m kafka.Message) {
	kind, err := topics.PeekKind(m.Value)
	if err != nil {
		return // a tombstone or a record of another build: nothing to learn
	}
	switch kind {
	case topics.KindShardedTurn:
		var t topics.ShardedTurn
		if topics.Unmarshal(m.Value, &t) != nil {
			return
		}
		v.mu.Lock()
		v.turns[topics.ShardKey(t.Run, t.ID, t.Turn)] = v.epoch(t.Epoch)
		v.mu.Unlock()
	case topics.KindShardsEpoch:
		var e topics.ShardsEpoch
		if topics.Unmarshal(m.Value, &e) != nil {
			return
		}
		v.mu.Lock()
		if v.latest != nil && v.latest.State == topics.EpochComplete && v.latest.Epoch != e.Epoch {
			v.previous = v.latest
		}
		v.latest = &e
		v.epoch(e.Epoch)
		v.mu.Unlock()
		select {
		case v.changed <- struct{}{}:
		default:
		}
		v.log.Info("shards topic epoch", "epoch", e.Epoch, "state", e.State, "dir", e.Path, "turns", e.Turns)
	}
}

// holds reports whether the shards hold the turn, and the epoch that says so: a turn of the latest epoch, or,
// while the latest is seeding, of the complete epoch before it when both are of the same directory (a
// restarted sink republishing what it held).
func (v *shardsView) holds(run, id string, turn int) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.latest == nil || v.latest.State == topics.EpochVoid {
		return "", false
	}
	i, ok := v.turns[topics.ShardKey(run, id, turn)]
	if !ok {
		return "", false
	}
	e := v.names[i]
	switch {
	case e == v.latest.Epoch:
		// Published by the sink start that is the latest: in its shards, complete or not yet.
		return e, true
	case v.latest.State == topics.EpochSeeding && v.previous != nil && e == v.previous.Epoch && v.previous.Dir == v.latest.Dir:
		return e, true
	}
	return "", false
}

// known reports whether a sink has said what its shards hold: the latest epoch is complete or void, or it is
// seeding after a complete epoch of the same directory.
func (v *shardsView) known() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.latest == nil {
		return false
	}
	return v.latest.State != topics.EpochSeeding || (v.previous != nil && v.previous.Dir == v.latest.Dir)
}

// wait returns once the records on the topic at start are read and a sink has said what its shards hold, or
// after limit (or when ctx ends), whichever comes first.
func (v *shardsView) wait(ctx context.Context, limit time.Duration) {
	catchUp := time.NewTimer(max(limit, 30*time.Second))
	defer catchUp.Stop()
	select {
	case <-v.caughtUp:
	case <-ctx.Done():
		return
	case <-catchUp.C:
		v.log.Warn("the shards topic was not read to its end in time; turns already in the shards may be generated again")
		return
	}
	if limit <= 0 {
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	logged := false
	for !v.known() {
		if !logged {
			v.log.Info("waiting for a sink to say what its shards hold (shards topic), so that no turn they hold is generated again",
				"up_to", limit)
			logged = true
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return
		case <-t.C:
			v.log.Warn("no sink has said what its shards hold; generating every record until one does", "waited", limit)
			return
		}
	}
}
