package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// A compacted topic has one partition and cleanup.policy=compact; Follow passes every record on it in order,
// says when it has read what was there at its start, and goes on with what comes after.
func TestFollowCompactedTopic(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	cl := kafkatest.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 { // the second call reuses the topic
		if err := cl.Admin().EnsureCompactedTopic(ctx, topics.TopicShards); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := cl.Admin().PartitionCount(ctx, topics.TopicShards); err != nil || n != 1 {
		t.Fatalf("partitions %d (%v), want 1", n, err)
	}
	if v, err := cl.Admin().TopicConfigValue(ctx, topics.TopicShards, "cleanup.policy"); err != nil || v != "compact" {
		t.Fatalf("cleanup.policy %q (%v), want compact", v, err)
	}
	p := cl.NewProducer(topics.TopicShards, kafka.ProducerConfig{})
	defer p.Close()
	send := func(id string) {
		t.Helper()
		if err := p.SendSync(ctx, id, kafkatest.Encode(t, &topics.ShardedTurn{Epoch: "e", Run: "r", ID: id})); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		send(id)
	}
	var mu sync.Mutex
	var got []string
	seenAtCatchUp := -1
	caught := make(chan struct{})
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cl.Follow(fctx, topics.TopicShards, func(m kafka.Message) {
			mu.Lock()
			got = append(got, string(m.Key))
			mu.Unlock()
		}, func() {
			mu.Lock()
			seenAtCatchUp = len(got)
			mu.Unlock()
			close(caught)
		})
	}()
	select {
	case <-caught:
	case <-time.After(30 * time.Second):
		t.Fatal("Follow did not catch up")
	}
	send("d")
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fcancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Follow returned %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seenAtCatchUp != 3 || len(got) != 4 || got[0] != "a" || got[1] != "b" || got[2] != "c" || got[3] != "d" {
		t.Fatalf("read %v, %d of them when caught up; want a b c (caught up) then d", got, seenAtCatchUp)
	}
}
