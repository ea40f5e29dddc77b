package sink

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// shardsTopic is what the shards topic holds: its epoch records in order, and the latest turn record per key.
type shardsTopic struct {
	epochs []topics.ShardsEpoch
	turns  map[string]topics.ShardedTurn
}

func readShardsTopic(t *testing.T, kc kafka.Config) shardsTopic {
	cl := kafkatest.Client(t, kc)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end, err := cl.Admin().EndOffsets(ctx, topics.TopicShards)
	if err != nil {
		t.Fatal(err)
	}
	st := shardsTopic{turns: map[string]topics.ShardedTurn{}}
	err = cl.ReadPartition(ctx, topics.TopicShards, 0, 0, end[0], func(m kafka.Message) error {
		kind, err := topics.PeekKind(m.Value)
		if err != nil {
			return err
		}
		switch kind {
		case topics.KindShardsEpoch:
			var e topics.ShardsEpoch
			if err := topics.Unmarshal(m.Value, &e); err != nil {
				return err
			}
			if string(m.Key) != topics.ShardsEpochKey {
				return fmt.Errorf("epoch record keyed %q", m.Key)
			}
			st.epochs = append(st.epochs, e)
		case topics.KindShardedTurn:
			var tr topics.ShardedTurn
			if err := topics.Unmarshal(m.Value, &tr); err != nil {
				return err
			}
			if k := topics.ShardKey(tr.Run, tr.ID, tr.Turn); string(m.Key) != k {
				return fmt.Errorf("turn record keyed %q, want %q", m.Key, k)
			}
			st.turns[string(m.Key)] = tr
		default:
			return fmt.Errorf("a %s on the shards topic", kind)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// marker is the record generate writes for a turn the shards topic says the shards hold.
func marker(g *topics.Generation, epoch string) *topics.Generation {
	return &topics.Generation{ID: g.ID, Dataset: g.Dataset, Turn: g.Turn, Sampling: g.Sampling, Source: g.Source,
		Model: g.Model, TokenizerHash: g.TokenizerHash, Thread: g.Thread, InShards: epoch}
}

// TestSinkPublishesShardsAndResumesFromThem: the sink publishes every row it makes durable on the shards topic,
// and on every start (here on a new broker: the topics are lost, the directory remains) publishes again, in a
// new epoch, every row its shards hold. A turn generate then skips as in the shards comes back as an in-shards
// record: counted apart from redone work, the next turn of a continued one sent again from the recorded reply,
// an ended one reported; one the shards do not hold is dead-lettered, never dropped.
func TestSinkPublishesShardsAndResumesFromThem(t *testing.T) {
	dir := t.TempDir()
	gens := mkTurns(0, 30)
	kc := freshBroker(t, "pub1")
	produceGens(t, kc, gens)
	cfg := baseConfig(t, kc, dir)
	sr := startSink(t, cfg)
	sr.waitFor(t, "rows durable", func(d, _ map[string]int) bool { return len(readRowsQuiet(dir)) == len(gens) })
	waitConsumed(t, kc, cfg.Group)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	run := shard.RunOf(gens[0]).Fingerprint
	first := readShardsTopic(t, kc)
	if len(first.epochs) != 2 || first.epochs[0].State != topics.EpochSeeding || first.epochs[1].State != topics.EpochComplete ||
		first.epochs[1].Turns != 0 || first.epochs[0].Epoch != first.epochs[1].Epoch {
		t.Fatalf("first start's epochs %+v: want seeding then complete, 0 turns (empty directory)", first.epochs)
	}
	for _, g := range gens {
		tr, ok := first.turns[topics.ShardKey(run, g.ID, g.Turn)]
		if !ok || tr.Epoch != first.epochs[0].Epoch || tr.Run != run {
			t.Fatalf("%s turn %d published after its flush as %+v (found %v), want epoch %s run %s", g.ID, g.Turn, tr, ok, first.epochs[0].Epoch, run)
		}
	}
	id, err := os.ReadFile(filepath.Join(dir, shard.DirIDFile))
	if err != nil || strings.TrimSpace(string(id)) != first.epochs[0].Dir {
		t.Fatalf("%s holds %q (%v), the epoch names dir %q", shard.DirIDFile, id, err, first.epochs[0].Dir)
	}

	// A new broker: the shards remain. The sink seeds the new shards topic from them before it consumes.
	kc = freshBroker(t, "pub2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.Client(t, kc).Admin().EnsureCompactedTopic(ctx, topics.TopicShards); err != nil { // to read it while the sink starts
		t.Fatal(err)
	}
	sr = startSink(t, baseConfig(t, kc, dir))
	var second shardsTopic
	deadline := time.Now().Add(60 * time.Second)
	for {
		second = readShardsTopic(t, kc)
		if len(second.epochs) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(second.epochs) != 2 || second.epochs[1].State != topics.EpochComplete || second.epochs[1].Turns != int64(len(gens)) ||
		second.epochs[1].Epoch == first.epochs[0].Epoch || second.epochs[1].Dir != first.epochs[0].Dir {
		t.Fatalf("second start's epochs %+v: want a new epoch of the same directory, complete with %d turns", second.epochs, len(gens))
	}
	if len(second.turns) != len(gens) {
		t.Fatalf("second start seeded %d turns, want %d", len(second.turns), len(gens))
	}
	epoch := second.epochs[1].Epoch
	markers := make([]*topics.Generation, 0, len(gens)+1)
	for _, g := range gens {
		markers = append(markers, marker(g, epoch))
	}
	stray := mkTurn(99) // not in the shards
	markers = append(markers, marker(stray, first.epochs[0].Epoch))
	produceGens(t, kc, markers)
	continued, ended := 0, 0
	for _, g := range gens {
		if g.StopReason == topics.StopContinued {
			continued++
		} else {
			ended++
		}
	}
	sr.waitFor(t, "ended conversations reported", func(_, dups map[string]int) bool { return len(dups) == ended })
	rej := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 60*time.Second)
	if rej[0].ID != stray.ID || rej[0].Class != "not_in_shards" || !strings.Contains(rej[0].Reason, "replay the generate stage") {
		t.Fatalf("rejection %+v, want %s as not_in_shards", rej[0], stray.ID)
	}
	// Every marker handled: the next turns sent (acknowledged before an offset is committed), the stray rejected.
	waitConsumed(t, kc, cfg.Group)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	// Every continued turn's next turn is on the new broker's prompts topic, built from the recorded reply
	// (without the routing hint of the server that generated it, which the shards do not index).
	hintless := make([]*topics.Generation, len(gens))
	for i, g := range gens {
		c := *g
		c.Meta.Endpoint = ""
		hintless[i] = &c
	}
	checkContinuations(t, kc, dir, hintless)
	sr.mu.Lock()
	res := sr.result
	sr.mu.Unlock()
	if res.InShards != int64(len(gens)) {
		t.Errorf("in-shards turns counted %d, want %d", res.InShards, len(gens))
	}
	if res.Duplicates != 0 {
		t.Errorf("redone generations counted %d for turns already in the shards, want 0", res.Duplicates)
	}
}
