package sink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// shardsIndex publishes what the shards hold on topics.TopicShards (see its documentation): the epoch of this
// sink start, every (id, turn) of every run at the start, and the keys of every flush after it.
type shardsIndex struct {
	p     *kafka.Producer
	epoch topics.ShardsEpoch
	log   *slog.Logger
	ctx   context.Context // the run's: publications are retried while it lasts
	warn  atomic.Bool     // a publication failed (warned once)
}

// dirID returns the identity of the output directory dir (shard.DirIDFile), creating it on first use.
func dirID(dir string) (string, error) {
	id, err := shard.ReadDirID(dir)
	if err != nil {
		return "", fmt.Errorf("sink: %w", err)
	}
	if id != "" {
		return id, nil
	}
	id = randomID()
	path := filepath.Join(dir, shard.DirIDFile)
	if err := shard.WriteFileAtomic(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("sink: write %s: %w", path, err)
	}
	return id, nil
}

// randomID returns 16 random hex digits.
func randomID() string {
	var b [8]byte
	rand.Read(b[:]) // crypto/rand's Read never fails
	return hex.EncodeToString(b[:])
}

// seedShardsIndex starts a new epoch of topics.TopicShards: it writes the epoch in state seeding, a
// topics.ShardedTurn for every (id, turn) of every run of st, and the epoch in state complete, each acknowledged
// by the broker before the next step. The returned index publishes the keys of later flushes.
func seedShardsIndex(ctx context.Context, kcl *kafka.Client, st *store, log *slog.Logger) (*shardsIndex, error) {
	kc := kcl.Config()
	id, err := dirID(st.dir)
	if err != nil {
		return nil, err
	}
	if err := kcl.Admin().EnsureCompactedTopic(ctx, topics.TopicShards); err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	x := &shardsIndex{p: kcl.NewProducer(topics.TopicShards, kafka.ProducerConfig{}), log: log, ctx: ctx,
		epoch: topics.ShardsEpoch{Epoch: randomID(), State: topics.EpochSeeding, Dir: id, Path: st.dir, Time: time.Now().UTC()}}
	start := time.Now()
	n, err := x.seed(ctx, st)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("sink: publish what the shards hold on %s: %w", kc.Topic(topics.TopicShards), err), x.p.Close())
	}
	log.Info("published what the shards hold", "topic", kc.Topic(topics.TopicShards), "epoch", x.epoch.Epoch, "turns", n,
		"took", time.Since(start).Round(time.Millisecond))
	return x, nil
}

func (x *shardsIndex) seed(ctx context.Context, st *store) (int64, error) {
	ep := x.epoch
	if err := x.sendEpoch(ctx, &ep); err != nil {
		return 0, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		n     int64
	)
	for _, rs := range st.runs {
		run := rs.info.Fingerprint
		err := rs.index.forEach(func(k rowKey) error {
			mu.Lock()
			err := first
			mu.Unlock()
			if err != nil {
				return err
			}
			wg.Add(1)
			n++
			value, err := topics.Marshal(&topics.ShardedTurn{Epoch: ep.Epoch, Run: run, ID: k.id, Turn: int(k.turn)})
			if err != nil {
				wg.Done()
				return err
			}
			if err := x.p.Send(ctx, topics.ShardKey(run, k.id, int(k.turn)), value, func(err error) {
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
				wg.Done()
			}); err != nil {
				wg.Done()
				return err
			}
			return nil
		})
		if err != nil {
			wg.Wait()
			return n, err
		}
	}
	wg.Wait()
	if first != nil {
		return n, first
	}
	ep.State, ep.Turns, ep.Time = topics.EpochComplete, n, time.Now().UTC()
	if err := x.sendEpoch(ctx, &ep); err != nil {
		return n, err
	}
	x.epoch = ep
	return n, nil
}

// publish writes a topics.ShardedTurn for each key a flush of run made durable, retrying while the run lasts.
// A failure costs no row: generate may then send those turns again, and the sink drops the copies.
func (x *shardsIndex) publish(run string, keys []indexEntry) {
	if x == nil {
		return
	}
	for _, e := range keys {
		value, err := topics.Marshal(&topics.ShardedTurn{Epoch: x.epoch.Epoch, Run: run, ID: e.key.id, Turn: int(e.key.turn)})
		if err != nil {
			x.log.Warn("could not publish a shard's turns on the shards topic; generate may send them again", "err", err)
			continue
		}
		x.p.SendRetrying(x.ctx, topics.ShardKey(run, e.key.id, int(e.key.turn)), value, func(err error) {
			if err != nil && x.ctx.Err() == nil && x.warn.CompareAndSwap(false, true) {
				x.log.Warn("could not publish a shard's turns on the shards topic; generate may send them again", "err", err)
			}
		})
	}
}

// sendEpoch writes ep and waits for the broker's acknowledgement.
func (x *shardsIndex) sendEpoch(ctx context.Context, ep *topics.ShardsEpoch) error {
	value, err := topics.Marshal(ep)
	if err != nil {
		return err
	}
	return x.p.SendSync(ctx, topics.ShardsEpochKey, value)
}

// Close closes the index's producer once every publication sent has been answered.
func (x *shardsIndex) Close() error {
	if x == nil {
		return nil
	}
	return x.p.Close()
}

// forEach calls fn for every key of the index, in key order. Keys of ids too long for a bbolt key (stored as a
// hash) cannot be given back and are left out.
func (x *idIndex) forEach(fn func(rowKey) error) error {
	if x == nil {
		return nil
	}
	return x.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(indexKeys)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			if len(k) < 4 || (len(k) > 4 && k[0] == 0xff) {
				return nil
			}
			n := len(k) - 4
			turn := int32(uint32(k[n])<<24 | uint32(k[n+1])<<16 | uint32(k[n+2])<<8 | uint32(k[n+3]))
			return fn(rowKey{id: string(k[:n]), turn: turn})
		})
	})
}

// epochID is the epoch this sink start publishes under ("" without an index).
func (x *shardsIndex) epochID() string {
	if x == nil {
		return ""
	}
	return x.epoch.Epoch
}
