package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

func sum(m map[int]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// readAll consumes tokenized in group until want records arrived, and returns how many did.
func readAll(t *testing.T, cfg kafka.Config, group string, want int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := newTracker()
	consume(ctx, t, cfg, group, tr, func(seen int) bool { return seen >= want })
	return tr.distinct()
}

// TestConsumerReplay: a stopped group is reset to the beginning, to a time and to explicit offsets, and its
// next member reads from there; a group with a live member is refused with the member named.
func TestConsumerReplay(t *testing.T) {
	cfg := kafkatest.Config(t, 2)
	cl := kafkatest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produceN(t, cfg, 10)
	if got := readAll(t, cfg, "g", 10); got != 10 {
		t.Fatalf("first read: %d records", got)
	}
	committed, err := cl.Admin().CommittedOffsets(ctx, "g", topics.TopicTokenized)
	if err != nil || sum(committed) != 10 {
		t.Fatalf("committed %v, %v", committed, err)
	}
	g, err := cl.Admin().DescribeGroup(ctx, "g")
	if err != nil || len(g.Members) != 0 {
		t.Fatalf("stopped group: state %s, members %v, %v", g.State, g.Members, err)
	}

	// To the beginning.
	starts, err := cl.Admin().StartOffsets(ctx, topics.TopicTokenized)
	if err != nil || sum(starts) != 0 || len(starts) != 2 {
		t.Fatalf("start offsets %v, %v", starts, err)
	}
	if err := cl.Admin().ResetGroup(ctx, "g", topics.TopicTokenized, starts); err != nil {
		t.Fatal(err)
	}
	if committed, _ = cl.Admin().CommittedOffsets(ctx, "g", topics.TopicTokenized); sum(committed) != 0 {
		t.Fatalf("after the reset: committed %v", committed)
	}
	if got := readAll(t, cfg, "g", 10); got != 10 {
		t.Fatalf("replay read %d records, want 10", got)
	}

	// To a time: only the records written after it.
	time.Sleep(20 * time.Millisecond)
	mark := time.Now()
	time.Sleep(20 * time.Millisecond)
	recs := make([]kafkatest.Record, 4)
	for i := range recs {
		id := "late" + string(rune('a'+i))
		recs[i] = kafkatest.Record{Key: id, Value: &topics.Tokenized{ID: id}}
	}
	kafkatest.Produce(t, cfg, topics.TopicTokenized, recs...)
	at, err := cl.Admin().OffsetsForTime(ctx, topics.TopicTokenized, mark)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := cl.Admin().EndOffsets(ctx, topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	if sum(ends)-sum(at) != 4 {
		t.Fatalf("offsets for %s: %v (ends %v): want the 4 later records after them", mark, at, ends)
	}
	future, err := cl.Admin().OffsetsForTime(ctx, topics.TopicTokenized, time.Now().Add(time.Hour))
	if err != nil || sum(future) != sum(ends) {
		t.Fatalf("offsets for a future time: %v, %v; want the end offsets %v", future, err, ends)
	}
	if err := cl.Admin().ResetGroup(ctx, "g", topics.TopicTokenized, at); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, cfg, "g", 4); got != 4 {
		t.Fatalf("replay from a time read %d records, want 4", got)
	}

	// Out of range.
	if err := cl.Admin().ResetGroup(ctx, "g", topics.TopicTokenized, map[int]int64{0: ends[0] + 5}); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("offset past the end: %v", err)
	}
	if err := cl.Admin().ResetGroup(ctx, "g", topics.TopicTokenized, map[int]int64{7: 0}); err == nil || !strings.Contains(err.Error(), "no partition 7") {
		t.Errorf("unknown partition: %v", err)
	}

	// A live member: refused, naming it.
	live, stop := context.WithCancel(ctx)
	c := cl.NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: "g", SessionTimeout: 6 * time.Second})
	done := make(chan error, 1)
	go func() { done <- c.Run(live, func(d *kafka.Delivery) { d.Done() }) }()
	for c.Assigned() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the consumer never joined")
		case <-time.After(50 * time.Millisecond):
		}
	}
	err = cl.Admin().ResetGroup(ctx, "g", topics.TopicTokenized, starts)
	if !errors.Is(err, kafka.ErrGroupActive) || !strings.Contains(err.Error(), "draftflow") {
		t.Errorf("reset of a live group: %v, want ErrGroupActive naming the member", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
