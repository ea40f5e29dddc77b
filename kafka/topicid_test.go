package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"

	"github.com/draftflow/draftflow/topics"
)

func TestTopicIDDistinguishesIncarnations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	for i := 0; i < 2; i++ {
		e := kafkatest.Embedded(t) // a new incarnation of the cluster, and of its topics
		kc := kafka.Config{Brokers: e.Brokers(), Partitions: 1}
		cl := kafkatest.Client(t, kc)
		if err := cl.Admin().EnsureTopics(ctx, topics.TopicGenerated); err != nil {
			t.Fatal(err)
		}
		id, err := cl.Admin().TopicID(ctx, topics.TopicGenerated)
		if err != nil {
			t.Fatal(err)
		}
		again, err := cl.Admin().TopicID(ctx, topics.TopicGenerated)
		if err != nil || again != id {
			t.Fatalf("second lookup %q, %v; want %q", again, err, id)
		}
		if len(id) != 32 {
			t.Fatalf("topic id %q, want 32 hex digits", id)
		}
		ids = append(ids, id)
		e.Close()
	}
	if ids[0] == ids[1] {
		t.Fatalf("two brokers gave the same topic id %s", ids[0])
	}
	if _, err := kafkatest.Client(t, kafka.Config{Brokers: []string{"127.0.0.1:1"}}).Admin().TopicID(ctx, "x"); err == nil {
		t.Fatal("lookup against no broker succeeded")
	}
}
