package sink

import (
	"context"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// A dead letter the broker is slow to acknowledge holds back only its own partition: the other partitions
// keep flushing meanwhile, nothing after the rejected offset is absorbed or committed before the
// acknowledgement, and once it arrives everything completes.
func TestSlowDeadLetterDoesNotStallSink(t *testing.T) {
	e := kafkatest.Embedded(t)
	kc := kafka.Config{Brokers: e.Brokers(), Partitions: 2, Namespace: "slow-dead-letter", Logger: quietLogger()}
	cl := kafkatest.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}

	// Hold every produce request to the rejected topic until release is called.
	held, release := kafkatest.HoldProduce(t, e, kc.Topic(topics.TopicRejected))

	const junkKey = "junk"
	partOf := func(key string) int { return kafka.PartitionOf(key, 2) }
	junkPart := partOf(junkKey)
	produce(t, kc, []string{junkKey}, [][]byte{[]byte("not a record")})
	cfg := Config{Client: cl, Dir: t.TempDir(), Group: "slow-dl", IdleFlush: 200 * time.Millisecond}
	sr := startSink(t, cfg)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the sink never sent the dead letter")
	}

	// While the dead letter is held: the other partition's rows become durable, the junk partition's wait.
	gens := mkGens(0, 40, 0.5)
	produceGens(t, kc, gens)
	var other, behind []string
	for _, g := range gens {
		if partOf(g.ID) == junkPart {
			behind = append(behind, g.ID)
		} else {
			other = append(other, g.ID)
		}
	}
	if len(other) == 0 || len(behind) == 0 {
		t.Fatalf("generations split %d/%d over the partitions; need both", len(other), len(behind))
	}
	deadline := time.After(8 * time.Second) // below the producer's 10 s produce request timeout, so the held request is still the first
	for done := false; !done; {
		sr.mu.Lock()
		done = true
		for _, id := range other {
			done = done && sr.durable[id] > 0
		}
		for _, id := range behind {
			if sr.durable[id] > 0 {
				t.Errorf("%s, behind the unacknowledged dead letter, is durable already", id)
			}
		}
		sr.mu.Unlock()
		if done {
			break
		}
		select {
		case <-sr.change:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no row became durable while a dead letter waited for its acknowledgement: the sink is stalled")
		}
	}
	offs, err := cl.Admin().CommittedOffsets(ctx, cfg.Group, topics.TopicGenerated)
	if err != nil {
		t.Fatal(err)
	}
	if off := offs[junkPart]; off > 0 {
		t.Errorf("partition %d committed up to %d before its dead letter was acknowledged", junkPart, off)
	}

	release()
	sr.waitFor(t, "every row durable after the acknowledgement", allDurable(append(other, behind...)))
	stopped := time.Now()
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(stopped); el > 10*time.Second {
		t.Errorf("sink took %v to stop", el)
	}
	for _, rs := range shardtest.ReadRows(t, cfg.Dir) {
		checkRowsExact(t, rs, gens)
	}
	ends, err := cl.Admin().EndOffsets(ctx, topics.TopicRejected)
	if err != nil {
		t.Fatal(err)
	}
	if n := ends[0] + ends[1]; n < 1 {
		t.Errorf("%d dead letters on %s, want the junk record's", n, topics.TopicRejected)
	}
}
